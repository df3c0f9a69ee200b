"""Session checks shared by all tests."""
import pytest
import srsly

from nldm_fixtures import ROOT


@pytest.fixture(scope="session", autouse=True)
def checkout_stays_clean():
    """The tests write only to temporary folders: none of the project's output directories
    (``directories`` in project.yml: corpus/, training/, ...) appears in the checkout during the run."""
    names = srsly.read_yaml(ROOT / "project.yml")["directories"]
    before = {name for name in names if (ROOT / name).exists()}
    yield
    created = sorted(name for name in names if (ROOT / name).exists() and name not in before)
    assert not created, f"the tests created {created} in the checkout {ROOT}"
