"""One source of defaults (:mod:`spacy_nldm.defaults`): the factories' default configs and the component
class take theirs from it, and the registered architectures declare none of their own."""
import inspect

import pytest
import spacy
from spacy.util import registry

from spacy_nldm.models import build_crf_tagger, build_nldm_tagger
from spacy_nldm import defaults
from spacy_nldm.pipeline.tagger import StructuredTagger

FACTORIES = {"nldm_tagger": (defaults.NLDM, defaults.NLDM_MODEL, build_nldm_tagger),
             "crf_tagger": (defaults.CRF, defaults.CRF_MODEL, build_crf_tagger),
             "nldm_ner": (defaults.NLDM_NER, defaults.NLDM_MODEL, build_nldm_tagger),
             "crf_ner": (defaults.CRF_NER, defaults.CRF_MODEL, build_crf_tagger)}


def _signature_defaults(function):
    return {name: p.default for name, p in inspect.signature(function).parameters.items()
            if p.default is not inspect.Parameter.empty}


@pytest.mark.parametrize("factory", sorted(FACTORIES))
def test_the_architecture_reads_every_setting_from_the_config_and_declares_no_default(factory):
    """The registered function's parameters are the default model block's keys (and nO, which the component
    sets), none with a default of its own: the model block is the one place of the defaults."""
    _, model, builder = FACTORIES[factory]
    assert registry.architectures.get(model["@architectures"]) is builder
    parameters = inspect.signature(builder).parameters
    assert set(parameters) == (set(model) - {"@architectures"}) | {"nO"}
    assert _signature_defaults(builder) == {"nO": None}


@pytest.mark.parametrize("factory", sorted(FACTORIES))
def test_at_most_twelve_settings_a_component_and_twelve_parameters_an_architecture(factory):
    meta = spacy.blank("en").get_factory_meta(factory)
    _, _, builder = FACTORIES[factory]
    assert len(meta.default_config) <= 12  # model and scorer counted
    assert len(inspect.signature(builder).parameters) <= 12


@pytest.mark.parametrize("factory", sorted(FACTORIES))
def test_factory_default_config_is_the_defaults_module(factory):
    settings, model, _ = FACTORIES[factory]
    meta = spacy.blank("en").get_factory_meta(factory)
    config = dict(meta.default_config)
    assert config.pop("model") == model
    config.pop("scorer")
    assert config == settings


def test_entity_component_class_defaults_are_the_crf_ner_factorys():
    from spacy_nldm.pipeline.ner import StructuredEntityRecognizer

    declared = _signature_defaults(StructuredEntityRecognizer.__init__)
    declared.pop("name")
    declared.pop("scorer")
    assert declared.pop("loss") == defaults.NLDM_NER["loss"]
    assert declared == defaults.CRF_NER


def test_component_class_defaults_are_the_nldm_factorys():
    declared = _signature_defaults(StructuredTagger.__init__)
    declared.pop("name")
    declared.pop("scorer")
    assert declared == defaults.NLDM


@pytest.mark.parametrize("factory", sorted(FACTORIES))
def test_a_generated_config_has_the_defaults(factory):
    from spacy.cli.init_config import init_config

    settings, model, _ = FACTORIES[factory]
    config = init_config(lang="en", pipeline=[factory])
    block = config["components"][factory]
    assert {k: block[k] for k in settings} == settings
    assert {k: block["model"][k] for k in model if k != "tok2vec"} == {k: v for k, v in model.items() if k != "tok2vec"}
    tok2vec = block["model"]["tok2vec"]
    assert tok2vec["embed"]["width"] == tok2vec["encode"]["width"] == defaults.OWN_WIDTH
    assert tuple(tok2vec["embed"]["rows"]) == defaults.OWN_ROWS
