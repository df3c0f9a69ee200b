"""The spacy-transformers path: nldm_tagger on a TransformerListener, with a tiny random BERT built
here (nothing is downloaded)."""
from pathlib import Path

import pytest
import spacy
from spacy.tokens import Doc
from spacy.training import Example
from thinc.api import Adam

import spacy_transformers  # noqa: F401  (in the test extra: tested, not skipped)
import transformers

SENTS = [
    (["I", "love", "this", "song", "!"], ["O", "V", "D", "N", ","]),
    (["you", "are", "so", "funny", "lol"], ["O", "V", "R", "A", "!"]),
    (["@bob", "check", "http://x.co", "now"], ["@", "V", "U", "R"]),
]


@pytest.fixture(scope="module")
def tiny_bert(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("tiny_bert")
    words = sorted({w.lower() for ws, _ in SENTS for w in ws} | set("abcdefghijklmnopqrstuvwxyz:/.@!"))
    (path / "vocab.txt").write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + words) + "\n")
    transformers.BertTokenizerFast(vocab_file=str(path / "vocab.txt")).save_pretrained(path)
    config = transformers.BertConfig(
        vocab_size=5 + len(words), hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
        intermediate_size=32, max_position_embeddings=64,
    )
    transformers.BertModel(config).save_pretrained(path)
    return path


def test_nldm_tagger_trains_on_a_transformer_listener(tiny_bert, tmp_path):
    nlp = spacy.blank("en")
    nlp.add_pipe("transformer", config={"model": {
        "@architectures": "spacy-transformers.TransformerModel.v3",
        "name": str(tiny_bert),
        "tokenizer_config": {"use_fast": True},
        "get_spans": {"@span_getters": "spacy-transformers.strided_spans.v1", "window": 32, "stride": 24},
    }})
    listener = {"@architectures": "spacy-transformers.TransformerListener.v1", "grad_factor": 1.0,
                "pooling": {"@layers": "reduce_mean.v1"}}
    model = {"edge_scorer": "bilinear", "label_dim": 8, "max_dist": 2, "tok2vec": listener}
    tagger = nlp.add_pipe("nldm_tagger", config={"model": model})
    egs = [Example.from_dict(Doc(nlp.vocab, words=w), {"tags": t}) for w, t in SENTS]
    nlp.initialize(lambda: egs)
    bert = nlp.get_pipe("transformer").model
    weights = bert.to_bytes()
    optimizer = Adam(0.01)
    losses = [nlp.update(egs, sgd=optimizer)["nldm_tagger"] for _ in range(25)]
    assert losses[-1] < losses[0] / 2
    assert bert.to_bytes() != weights  # the tagger's gradient reached the transformer
    assert nlp.evaluate(egs)["tag_acc"] == 1.0
    nlp.to_disk(tmp_path / "pipe")
    loaded = spacy.load(tmp_path / "pipe")
    texts = [" ".join(w) for w, _ in SENTS]
    assert [[t.tag_ for t in d] for d in loaded.pipe(texts)] == [[t.tag_ for t in d] for d in nlp.pipe(texts)]
    assert set(tagger.labels) == {t for _, ts in SENTS for t in ts}
