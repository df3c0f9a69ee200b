"""Every shipped config of the library (configs/*.cfg), built as `spacy train` builds it and trained a few steps
on fixture tweets: what a user meets with it (the same predictions whatever the batch, empty input), and that it
learns (a tiny learnable task lifts its accuracy from below a floor to above it). The study's configs
(projects/paper/configs/) get the same checks in projects/paper/tests/test_study_configs.py."""
import pytest
from spacy.util import load_model_from_config

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


ALL_CONFIGS = sorted([*(ROOT / "configs").rglob("*.cfg"), *STUDY_CONFIGS.rglob("*.cfg")])


def test_every_nldm_config_states_the_settings_where_the_factory_default_differs_from_the_architectures():
    """spaCy fills a component's model block from its factory's default config when both name the same
    architecture, so an NLDM config that leaves out ``distance_bias`` or ``max_dist`` runs with the factory's
    value (true, 3), not the architecture's (false, 5): a config must say what it runs."""
    from thinc.api import Config

    from spacy_nldm.pipeline.factories import DEFAULT_NLDM_MODEL

    nldm = [p for p in ALL_CONFIGS if '"spacy-nldm.NLDMTagger.v1"' in p.read_text()]
    assert len(nldm) >= 8
    for path in nldm:
        config = Config().from_disk(path, interpolate=False)
        for name, block in config["components"].items():
            model = block.get("model", {})
            if model.get("@architectures") == "spacy-nldm.NLDMTagger.v1":
                missing = {"distance_bias", "max_dist"} - set(model)
                assert not missing, f"{path.relative_to(ROOT)}: [components.{name}.model] leaves out {missing}"
    # the reason: left out, the factory's default is what a built pipeline gets
    text = (ROOT / "configs" / "nldm.cfg").read_text().replace("distance_bias = true\n", "")
    filled = load_model_from_config(Config().from_str(text), auto_fill=True).config
    assert filled["components"]["nldm"]["model"]["distance_bias"] is DEFAULT_NLDM_MODEL["distance_bias"] is True
