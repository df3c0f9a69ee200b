"""`python -m projects.paper arc-length` (projects/paper/pretrained/arc_length.py): the paper's Figure 4 workflow."""
import subprocess
import sys

import pytest
import spacy
from spacy.tokens import Doc, DocBin
from spacy.training import Example
from spacy.vocab import Vocab

from nldm_fixtures import ROOT
from projects.paper.pretrained.arc_length import dev_choice, nldm_component, render_table, summarise
from projects.paper.runs.records import RunsFile
from projects.paper.runs.seeds import RunError


def write_record(runs_file, k, seed, test, dev, seconds=60.0):
    RunsFile(runs_file).add({"key": f"k{k}/nldm-seed{seed}", "system": "nldm", "seed": seed, "test_acc": test,
                             "dev_acc": dev, "train_seconds": seconds})


def test_summary_means_and_the_dev_choice_within_the_papers_range(tmp_path):
    runs = tmp_path / "arc.jsonl"
    for seed, (test, dev) in enumerate([(89.0, 88.0), (90.0, 89.0), (91.0, 90.0)]):
        write_record(runs, 3, seed, test, dev)
    for seed in range(3):
        write_record(runs, 1, seed, 95.0, 99.0)  # best dev, outside the paper's range {2..10}
        write_record(runs, 5, seed, 88.0, 89.0 + (seed == 2) * 0.01)  # dev 89.0033 > k 3's 89.0
    write_record(runs, 10, 0, 80.0, 99.5)  # best dev, but one seed against three
    rows = summarise(runs, [1, 3, 5, 10, 15])  # no record for 15: no row
    assert [row.k for row in rows] == [1, 3, 5, 10]
    k3 = rows[1]
    assert (k3.test, k3.test_std, k3.dev, k3.seeds, k3.minutes) == (90.0, 1.0, 89.0, [0, 1, 2], 1.0)
    assert rows[3].test_std is None
    assert dev_choice(rows).k == 5
    assert dev_choice(rows, search=[1, 3]).k == 1
    assert dev_choice(rows, search=[12]) is None

    text = render_table(rows, title="T", command="cmd", reference=3)
    assert "| **5** (dev's choice) | 88.00 ± 0.00 | 89.00 ± 0.01 | 0,1,2 | 1.0 | -2.00 |" in text
    assert "| 3 (the config's) | 90.00 ± 1.00 | 89.00 ± 1.00 | 0,1,2 | 1.0 | – |" in text
    assert "| 10 | 80.00 | 99.50 | 0 | 1.0 | -10.00 |" in text and "Command: `cmd`" in text


def test_the_nldm_component_and_its_own_k_are_read_from_the_config():
    assert nldm_component(ROOT / "configs/nldm.cfg") == ("nldm", 5)
    with pytest.raises(RunError, match="softmax.cfg: needs exactly one nldm_tagger component, found 0"):
        nldm_component(ROOT / "configs/softmax.cfg")
    with pytest.raises(RunError, match="config not found"):
        nldm_component(ROOT / "configs/missing.cfg")


def tiny_corpus(path, n):
    words = [["I", "love", "this", "song", "!"], ["you", "are", "so", "funny", "lol"]]
    tags = [["O", "V", "D", "N", ","], ["O", "V", "R", "A", "!"]]
    vocab = Vocab()
    docs = [Doc(vocab, words=words[i % 2], tags=tags[i % 2]) for i in range(n)]
    DocBin(docs=docs, attrs=["TAG"]).to_disk(path)


def test_each_k_trains_with_its_own_arc_limit_resumably_and_writes_the_table_and_figure(tmp_path):
    for split, n in (("train", 8), ("dev", 4), ("test", 4)):
        tiny_corpus(tmp_path / f"{split}.spacy", n)
    command = [sys.executable, "-m", "projects.paper", "arc-length", "--config", str(ROOT / "configs/nldm.cfg"),
               "--ks", "1,3", "--seeds", "0", "--max-steps", "2", "--eval-frequency", "1",
               "--train", str(tmp_path / "train.spacy"), "--dev", str(tmp_path / "dev.spacy"),
               "--test", str(tmp_path / "test.spacy"), "--training", str(tmp_path / "training"),
               "--results", str(tmp_path / "arc.jsonl"), "--table", str(tmp_path / "arc.md"),
               "--figure", str(tmp_path / "arc.png")]
    res = subprocess.run(command, capture_output=True, text=True, cwd=ROOT)  # python -m projects.paper: from the root
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    from spacy.util import load_config

    rows = RunsFile(tmp_path / "arc.jsonl").rows()
    assert sorted(rows) == ["k1/nldm-seed0", "k3/nldm-seed0"]
    for k in (1, 3):
        record = rows[f"k{k}/nldm-seed0"]
        assert f"--components.nldm.model.max_dist {k}" in record["train_command"]
        trained = load_config(tmp_path / f"training/k{k}/nldm/seed0/model-best/config.cfg")
        assert trained["components"]["nldm"]["model"]["max_dist"] == k
        nlp = spacy.load(tmp_path / f"training/k{k}/nldm/seed0/model-best")  # the record's score is the pipeline's
        gold = list(DocBin().from_disk(tmp_path / "test.spacy").get_docs(nlp.vocab))
        examples = [Example(Doc(nlp.vocab, words=[t.text for t in d]), d) for d in gold]
        assert record["test_acc"] == round(100 * nlp.evaluate(examples)["tag_acc"], 2)
    table = (tmp_path / "arc.md").read_text()
    assert "test − k = – |" in table and table.count("| 0 | ") == 2  # the config's k 5 has no runs: no row
    assert (tmp_path / "arc.png").read_bytes()[:4] == b"\x89PNG"

    written = (tmp_path / "arc.jsonl").read_text()
    again = subprocess.run(command, capture_output=True, text=True, cwd=ROOT)  # resumable: both runs are skipped
    assert again.returncode == 0, again.stderr[-3000:]
    assert (tmp_path / "arc.jsonl").read_text() == written


def test_a_config_without_an_nldm_is_a_clear_error(tmp_path):
    res = subprocess.run([sys.executable, "-m", "projects.paper", "arc-length", "--config",
                          str(ROOT / "configs/crf1.cfg"), "--training", str(tmp_path), "--results", str(tmp_path),
                          "--table", str(tmp_path / "t.md")], capture_output=True, text=True, cwd=ROOT)
    assert res.returncode == 1 and "crf1.cfg: needs exactly one nldm_tagger component" in res.stderr
    assert "Traceback" not in res.stderr
