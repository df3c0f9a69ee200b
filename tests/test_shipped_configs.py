"""Every shipped config of the library (configs/*.cfg), built as `spacy train` builds it and trained a few steps
on fixture tweets: what a user meets with it (the same predictions whatever the batch, empty input), and that it
learns (a tiny learnable task lifts its accuracy from below a floor to above it). The study's configs
(projects/paper/configs/) get the same checks in projects/paper/tests/test_study_configs.py."""
import pytest

from config_checks import ShippedConfigChecks, derived, train_shipped
from nldm_fixtures import ROOT

STUDY_CONFIGS = ROOT / "projects" / "paper" / "configs"
CONFIGS = sorted((ROOT / "configs").glob("*.cfg"))


def test_every_config_is_covered():
    names = {p.name for p in CONFIGS}
    assert len(CONFIGS) >= 7 and {"nldm.cfg", "crf1.cfg", "softmax.cfg", "example_minilm.cfg"} <= names
    assert not derived(CONFIGS)


@pytest.fixture(scope="module", params=CONFIGS, ids=[p.name for p in CONFIGS])
def shipped(request):
    """(nlp, its tagging component's name, (untrained, learned) accuracy on the learnable task):
    config_checks.train_shipped."""
    return train_shipped(request.param)


class TestShippedConfigs(ShippedConfigChecks):
    """config_checks.ShippedConfigChecks on each config in configs/."""
