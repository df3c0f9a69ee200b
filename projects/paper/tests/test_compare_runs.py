"""projects/paper/scripts/compare_runs.py: two runs files of Table 2, the mean over common seeds and the change."""
import subprocess
import sys
from pathlib import Path

from nldm_fixtures import ROOT  # noqa: E402

from projects.paper.runs.records import RunsFile


def write(runs: Path, dataset: str, system: str, seed: int, test: float, dev: float) -> None:
    RunsFile(runs).add({"key": f"{dataset}/{system}-seed{seed}", "dataset": dataset, "system": system, "seed": seed,
                        "test_acc": test, "dev_acc": dev})


def test_changes_over_common_seeds(tmp_path):
    base, variant = tmp_path / "base.jsonl", tmp_path / "variant.jsonl"
    write(base, "twitter", "nldm", 0, 85.0, 84.0)
    write(base, "twitter", "nldm", 1, 86.0, 85.0)
    write(base, "twitter", "nldm", 2, 99.0, 99.0)  # no variant run with seed 2: left out of both means
    write(variant, "twitter", "nldm", 0, 86.0, 84.5)
    write(variant, "twitter", "nldm", 1, 86.5, 85.5)
    write(base, "fr", "softmax", 0, 90.0, 90.0)  # no variant run at all: blank cell
    done = subprocess.run([sys.executable, str(ROOT / "projects" / "paper" / "scripts" / "compare_runs.py"), "--base", str(base),
                           "--variant", str(variant)], capture_output=True, text=True, cwd=ROOT / "projects" / "paper" / "scripts")
    assert done.returncode == 0, done.stderr
    row = next(line for line in done.stdout.splitlines() if line.startswith("| twitter"))
    assert "85.50 → 86.25 (+0.75; dev +0.50, seeds 0,1)" in row
    assert not any(line.startswith("| fr") for line in done.stdout.splitlines())
    assert "test +0.75; dev +0.50 (1 datasets)" in done.stdout


def test_difference_of_two_systems_changes(tmp_path):
    base, variant = tmp_path / "base.jsonl", tmp_path / "variant.jsonl"
    for dataset, nldm_change, crf_change in [("twitter", 1.0, 0.5), ("fr", 0.0, 0.5), ("en", 0.5, 0.0)]:
        write(base, dataset, "nldm", 0, 90.0, 90.0)
        write(base, dataset, "crf1", 0, 90.0, 90.0)
        write(variant, dataset, "nldm", 0, 90.0 + nldm_change, 90.0)
        write(variant, dataset, "crf1", 0, 90.0 + crf_change, 90.0)
    done = subprocess.run([sys.executable, str(ROOT / "projects" / "paper" / "scripts" / "compare_runs.py"), "--base", str(base),
                           "--variant", str(variant)], capture_output=True, text=True, cwd=ROOT / "projects" / "paper" / "scripts")
    assert done.returncode == 0, done.stderr
    row = next(line for line in done.stdout.splitlines() if line.startswith("| nldm − crf1"))
    # differences +0.5, -0.5, +0.5: mean +0.17, sample sd 0.577, standard error 0.577 / sqrt(3) = 0.33
    assert "| +0.17 ± 0.33 | 3 |" in row
    assert "twitter +0.50" in row and "fr -0.50" in row and "en +0.50" in row
    assert not any(line.startswith("| nldm − softmax") for line in done.stdout.splitlines())  # no softmax runs


def test_missing_runs_file_is_an_error(tmp_path):
    write(tmp_path / "base.jsonl", "twitter", "nldm", 0, 85.0, 84.0)
    done = subprocess.run([sys.executable, str(ROOT / "projects" / "paper" / "scripts" / "compare_runs.py"),
                           "--base", str(tmp_path / "base.jsonl"), "--variant", str(tmp_path / "nothing")], capture_output=True, text=True, cwd=ROOT / "projects" / "paper" / "scripts")
    assert done.returncode == 2 and "nothing is not a runs file" in done.stderr
