"""Fixtures of the library's tests (the session settings shared with the study's tests are in ../conftest.py)."""
import pytest


@pytest.fixture(params=["exp", "log"])
def space(request, monkeypatch):
    """Run the log semiring's charts in exp space (checked contractions) or in log space, whatever M."""
    from spacy_nldm.structs import inside

    monkeypatch.setattr(inside, "LOG_SPACE_UP_TO", 0 if request.param == "exp" else 1000)
    return request.param
