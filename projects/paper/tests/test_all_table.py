"""projects/paper/scripts/all_table.py: the summary of the main job's run."""
import re
import subprocess
import sys
from pathlib import Path

import srsly

ROOT = Path(__file__).resolve().parents[3]


def test_table_all_tabulates_the_main_jobs_scores_and_says_where_the_pipelines_are(tmp_path):
    """`spacy project run table-all projects/paper` after the main job's `all`: the test table from metrics/, and
    the path of every trained pipeline with how to load and apply it."""
    systems = ["softmax", "crf1", "crf2", "nldm"]
    for i, system in enumerate(systems):
        for folder in ("metrics/twitter", f"training/twitter/{system}/model-best"):
            (tmp_path / folder).mkdir(parents=True, exist_ok=True)
        srsly.write_json(tmp_path / "metrics" / "twitter" / f"{system}.json", {"tag_acc": 0.8 + i / 100})
        best = tmp_path / "training" / "twitter" / system / "model-best"
        srsly.write_json(best / "meta.json", {"performance": {"tag_acc": 0.79}})
    done = subprocess.run([sys.executable, str(ROOT / "projects" / "paper" / "scripts" / "all_table.py"), "--dataset", "twitter",
                           "--systems", ",".join(systems), "--output", "metrics/twitter.md"],
                          cwd=tmp_path, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "| NLDM (`nldm`) | 83.00 |" in (tmp_path / "metrics" / "twitter.md").read_text()
    for system in systems:
        path = tmp_path / "training" / "twitter" / system / "model-best"
        assert re.search(rf"^  {system} +{re.escape(str(path))}$", done.stdout, re.M), done.stdout
    nldm = tmp_path / "training" / "twitter" / "nldm" / "model-best"
    assert f"spacy.load({str(nldm)!r})" in done.stdout and f"python -m spacy apply {nldm}" in done.stdout
