"""Every config of the study (projects/paper/configs/*.cfg), with the checks of the library's shipped configs
(tests/config_checks.py): built as `spacy train` builds it and trained a few steps on fixture tweets, the same
predictions whatever the batch, empty input through every method, and a tiny learnable task learnt. The configs
that `python -m projects.paper derive-configs` writes are built and validated only."""
import pytest
from spacy.util import load_config, load_model_from_config

from config_checks import ShippedConfigChecks, derived, train_shipped
from nldm_fixtures import ROOT

CONFIGS = sorted((ROOT / "projects" / "paper" / "configs").glob("*.cfg"))
DERIVED = derived(CONFIGS)
TRAINED = [p for p in CONFIGS if p not in DERIVED]


def test_every_config_is_covered():
    assert len(CONFIGS) >= 7 and {"nldm_trf.cfg", "synthetic_nldm.cfg"} <= {p.name for p in TRAINED}
    assert {p.name for p in DERIVED} == {"crf1_trf.cfg", "crf2_trf.cfg", "softmax_trf.cfg"}


@pytest.mark.parametrize("path", DERIVED, ids=[p.name for p in DERIVED])
def test_derived_configs_build_as_spacy_train_builds_them(path):
    nlp = load_model_from_config(load_config(path), auto_fill=True, validate=True)
    assert nlp.pipe_names == ["transformer", load_config(path)["nlp"]["pipeline"][-1]]


@pytest.fixture(scope="module", params=TRAINED, ids=[p.name for p in TRAINED])
def shipped(request):
    return train_shipped(request.param)


class TestStudyConfigs(ShippedConfigChecks):
    """config_checks.ShippedConfigChecks on each trained config of the study."""
