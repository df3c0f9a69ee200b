"""The study's project.yml: its commands run from the repository root (on a copy of the project, so that the
checkout stays clean)."""
import os
import subprocess
import sys
from pathlib import Path

from nldm_fixtures import ROOT, copy_project


def test_a_study_command_runs_from_the_repository_root(tmp_path):
    """`spacy project run derive-configs projects/paper` starts in projects/paper; run.py runs it from the root,
    so it reads configs/ and projects/paper/configs/ there and finds the committed derived configs up to date."""
    proj = copy_project(tmp_path / "proj")
    res = subprocess.run([sys.executable, "-m", "spacy", "project", "run", "derive-configs",
                          str(proj / "projects" / "paper")], capture_output=True, text=True, cwd=tmp_path,
                         env=dict(os.environ, OMP_NUM_THREADS="1"))
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    for name in ("glove/nldm.cfg", "softmax_trf.cfg"):
        study = Path("projects") / "paper" / "configs" / name
        assert (proj / study).read_text() == (ROOT / study).read_text()
