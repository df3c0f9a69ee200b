"""One source of defaults: the registered architectures' signatures, the factories' default configs, the
component class and the shipped configs agree (a shipped config differs only where a comment says why)."""
import inspect
import re
from pathlib import Path

import pytest
import spacy
from thinc.api import Config

from spacy_nldm.models import build_crf_tagger, build_nldm_tagger
from spacy_nldm.pipeline import defaults
from spacy_nldm.pipeline.tagger import StructuredTagger

ROOT = Path(__file__).resolve().parents[1]
FACTORIES = {"nldm_tagger": (defaults.NLDM, defaults.NLDM_MODEL, build_nldm_tagger),
             "crf_tagger": (defaults.CRF, defaults.CRF_MODEL, build_crf_tagger)}


def _signature_defaults(function):
    return {name: p.default for name, p in inspect.signature(function).parameters.items()
            if p.default is not inspect.Parameter.empty}


@pytest.mark.parametrize("factory", sorted(FACTORIES))
def test_architecture_signature_is_the_factory_default_model(factory):
    _, model, builder = FACTORIES[factory]
    declared = {k: v for k, v in _signature_defaults(builder).items() if k != "nO"}
    in_config = {k: v for k, v in model.items() if k not in ("@architectures", "tok2vec")}
    assert declared == in_config


@pytest.mark.parametrize("factory", sorted(FACTORIES))
def test_factory_default_config_is_the_defaults_module(factory):
    settings, model, _ = FACTORIES[factory]
    meta = spacy.blank("en").get_factory_meta(factory)
    config = dict(meta.default_config)
    assert config.pop("model") == model
    config.pop("scorer")
    assert config == settings


def test_component_class_defaults_are_the_nldm_factorys():
    declared = _signature_defaults(StructuredTagger.__init__)
    declared.pop("name")
    declared.pop("scorer")
    assert declared == defaults.NLDM


def test_a_generated_config_has_the_defaults():
    from spacy.cli.init_config import init_config

    config = init_config(lang="en", pipeline=["nldm_tagger"])
    block = config["components"]["nldm_tagger"]
    assert {k: block[k] for k in defaults.NLDM} == defaults.NLDM
    assert block["model"]["max_dist"] == defaults.NLDM_MODEL["max_dist"]


def _settings_with_comments(path: Path):
    """(section, key, value, commented) of each setting of the structured components in a config file,
    ``commented``: a comment line stands right above it or in the block's leading comments."""
    section, out, comment_above = None, [], False
    for line in path.read_text(encoding="utf8").splitlines():
        stripped = line.strip()
        if stripped.startswith("["):
            section, comment_above = stripped.strip("[]"), False
            continue
        if stripped.startswith("#"):
            comment_above = True
            continue
        if "=" in stripped and section:
            key, _, value = stripped.partition("=")
            out.append((section, key.strip(), value.strip(), comment_above))
            comment_above = False
        elif not stripped:
            comment_above = False
    return out


SHIPPED = sorted(p for p in (ROOT / "configs").rglob("*.cfg"))


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: str(p.relative_to(ROOT)))
def test_shipped_configs_differ_from_the_defaults_only_with_a_comment(path):
    config = Config().from_disk(path, interpolate=False)
    components = {name: block for name, block in config.get("components", {}).items()
                  if block.get("factory") in FACTORIES}
    lines = _settings_with_comments(path)
    unexplained = []
    for name, block in components.items():
        settings, model, _ = FACTORIES[block["factory"]]
        expected = {f"components.{name}": settings,
                    f"components.{name}.model": {k: v for k, v in model.items() if k != "tok2vec"}}
        for section, wanted in expected.items():
            if section.endswith(".model") and block["model"].get("@architectures") != model["@architectures"]:
                continue
            for key, value in wanted.items():
                written = [commented for s, k, _, commented in lines if s == section and k == key]
                actual = config["components"][name] if not section.endswith(".model") else block["model"]
                if key in actual and actual[key] != value and not (written and written[0]):
                    unexplained.append(f"[{section}] {key} = {actual[key]!r} (default {value!r})")
    assert not unexplained, f"{path.name} differs from the defaults without a comment saying why: {unexplained}"
