"""Session settings and checks shared by the library's tests (tests/) and the study's
(projects/paper/tests/): both import the test data's paths from tests/nldm_fixtures.py."""
import os
import sys
from pathlib import Path

import pytest
import srsly

sys.path.insert(0, str(Path(__file__).resolve().parent / "tests"))
from nldm_fixtures import ROOT  # noqa: E402

# One torch/BLAS thread per process, in this one and in the spacy commands the tests start: the models are
# tiny, and on a small shared machine more threads per process oversubscribe the cores (the suite took 1.7x
# the time at torch's default of one thread per core). An explicit OMP_NUM_THREADS is kept.
os.environ.setdefault("OMP_NUM_THREADS", "1")


@pytest.fixture(scope="session", autouse=True)
def one_torch_thread():
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="session", autouse=True)
def checkout_stays_clean():
    """The tests write only to temporary folders: none of the project's output directories
    (``directories`` in project.yml: corpus/, training/, ...) appears in the checkout during the run."""
    names = srsly.read_yaml(ROOT / "project.yml")["directories"]
    before = {name for name in names if (ROOT / name).exists()}
    yield
    created = sorted(name for name in names if (ROOT / name).exists() and name not in before)
    assert not created, f"the tests created {created} in the checkout {ROOT}"
