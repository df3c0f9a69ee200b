"""The gold labels the loss reads: unknown labels are an error that names them, partial labels count once."""
import pytest
import spacy
from spacy.tokens import Doc
from spacy.training import Example

SMALL_TOK2VEC = {"@architectures": "spacy.HashEmbedCNN.v2", "pretrained_vectors": None, "width": 16, "depth": 1,
                 "embed_size": 100, "window_size": 1, "maxout_pieces": 2, "subword_features": False}


def _pipe(max_length=64):
    nlp = spacy.blank("en")
    pipe = nlp.add_pipe("crf_tagger", config={"max_length": max_length, "model": {"tok2vec": SMALL_TOK2VEC}})
    words = ["a", "b", "c", "d", "e"]
    examples = [Example.from_dict(Doc(nlp.vocab, words=words), {"tags": ["X", "Y", "X", "Y", "X"]})]
    nlp.initialize(lambda: examples)
    return nlp, pipe


def test_a_gold_label_the_component_lacks_is_named():
    nlp, pipe = _pipe()
    eg = Example.from_dict(Doc(nlp.vocab, words=["a", "b", "c"]), {"tags": ["X", "Z", "Y"]})
    with pytest.raises(ValueError, match="'Z' of token 1"):
        pipe.get_loss([eg], pipe.model.predict([eg.predicted]))


def test_the_loss_of_a_batch_is_the_sum_over_its_docs_in_windows():
    """Docs cut into windows (max_length 2), with unknown labels: the batch's summed loss is the sum of each
    doc's, so each token's gold label lands on its own position."""
    nlp, pipe = _pipe(max_length=2)
    pipe.normalize_loss = False
    data = [(["a", "b", "c", "d", "e"], ["X", "", "Y", "Y", "X"]), (["b", "a"], ["Y", "X"]),
            (["e", "d", "c"], ["", "X", ""])]
    examples = [Example.from_dict(Doc(nlp.vocab, words=w), {"tags": t}) for w, t in data]
    loss = lambda egs: pipe.get_loss(egs, pipe.model.predict([eg.predicted for eg in egs]))[0]  # noqa: E731
    assert loss(examples) == pytest.approx(sum(loss([eg]) for eg in examples), rel=1e-5)


def test_a_token_over_two_gold_tokens_with_different_labels_is_unknown():
    """Other tokens than the reference's: the alignment decides (a predicted token over gold tokens with
    different labels has no label), as in spaCy's tagger."""
    nlp, pipe = _pipe()
    predicted = Doc(nlp.vocab, words=["ab", "c", "d"])
    split = Example(predicted, Doc(nlp.vocab, words=["a", "b", "c", "d"], tags=["X", "Y", "X", "Y"]))
    unknown = Example(predicted, Doc(nlp.vocab, words=["ab", "c", "d"], tags=["", "X", "Y"]))
    scores = pipe.model.predict([predicted])
    assert pipe.get_loss([split], scores)[0] == pytest.approx(pipe.get_loss([unknown], scores)[0], rel=1e-6)
    known = Example(predicted, Doc(nlp.vocab, words=["ab", "c", "d"], tags=["X", "X", "Y"]))
    assert pipe.get_loss([known], scores)[0] != pytest.approx(pipe.get_loss([unknown], scores)[0], rel=1e-6)
