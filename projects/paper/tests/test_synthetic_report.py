"""projects/paper/scripts/synthetic_report.py on made-up runs (table, CSV and plot are written and agree)."""
import importlib.util
import sys


from nldm_fixtures import ROOT  # noqa: E402

from projects.paper.runs.records import RunsFile


def load_script(name):
    spec = importlib.util.spec_from_file_location(name, ROOT / "projects" / "paper" / "scripts" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def fake_runs(tmp_path):
    runs_file = RunsFile(tmp_path / "runs.jsonl")
    accs = {("nldm", 1000): [0.80, 0.82, 0.81], ("crf", 1000): [0.78, 0.79, 0.80], ("nldm", 3000): [0.85],
            ("crf", 3000): [0.86]}
    for (model, size), values in accs.items():
        for seed, a in enumerate(values):
            run = {"key": f"{model}-{size}-s{seed}", "model": model, "size": size, "seed": seed, "data_seed": 0, "test_tag_acc": a,
                   "dev_tag_acc": a, "heldout_tag_acc": a + 0.01, "heldout_sequences": 10000, "train_seconds": 10.0, "code_fingerprint": "x", "git_head": "y"}
            runs_file.add(run)
    return runs_file.path


def test_report_synthetic(tmp_path, monkeypatch):
    report = load_script("synthetic_report")
    metrics = fake_runs(tmp_path)
    out = tmp_path / "out"
    monkeypatch.setattr(
        sys, "argv",
        ["synthetic_report.py", "--runs-file", str(metrics), "--output", str(out), "--corpus-dir", str(tmp_path)],
    )
    report.main()
    table = (out / "table.md").read_text()
    assert "| 1,000 | 800 / 100 | 81.00 ± 1.00 (3) | 79.00 ± 1.00 (3) | +2.00 ± 1.00 (3/3) | " in table
    assert "| 3,000 | 2,400 / 300 | 85.00 (1) | 86.00 (1) | -1.00 (0/1) | " in table
    # held-out figures are 1 point above the test split in the fake runs
    assert "| 82.00 ± 1.00 (3) | 80.00 ± 1.00 (3) | +2.00 ± 1.00 (3/3) | - |" in table
    assert len((out / "runs.csv").read_text().strip().splitlines()) == 1 + 8
    assert (out / "accuracy.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_runs_stop_at():
    runs = load_script("synthetic_runs")
    assert runs.past("") is False
    assert runs.past("00:00") is True
