"""Word dropout (``spacy-nldm.WordDropoutHashEmbed.v1``): in training a share of the tokens lose their word key
and only it; prediction is untouched; at rate 0 the layer is spaCy's MultiHashEmbed."""
import numpy
import pytest
import spacy
from spacy.ml.models.tok2vec import MultiHashEmbed
from spacy.tokens import Doc
from spacy.util import registry
from thinc.api import fix_random_seed

from spacy_nldm.models.word_dropout import UNKNOWN_KEY, word_id_dropout

build = registry.architectures.get("spacy-nldm.WordDropoutHashEmbed.v1")


def test_word_id_dropout_replaces_about_rate_of_the_word_keys_and_nothing_else():
    rng = numpy.random.default_rng(0)
    Xs = [rng.integers(1, 2**63, size=(n, 3), dtype="uint64") for n in (2000, 0, 3000)]
    layer = word_id_dropout(0.3, column=0)
    fix_random_seed(0)
    Ys, backprop = layer.begin_update(Xs)
    dropped = numpy.concatenate([Y[:, 0] == UNKNOWN_KEY for Y in Ys])
    assert 0.27 < dropped.mean() < 0.33
    for X, Y in zip(Xs, Ys):
        kept = Y[:, 0] != UNKNOWN_KEY
        assert (Y[kept] == X[kept]).all() and (Y[:, 1:] == X[:, 1:]).all()
    assert all(X is Y for X, Y in zip(Xs, layer.predict(Xs)))
    with pytest.raises(ValueError, match="rate must be in"):
        word_id_dropout(1.0)


def docs(vocab):
    return [Doc(vocab, words=["the", "cat", "sat", "on", "the", "mat"]), Doc(vocab, words=[]), Doc(vocab, words=["a", "dog"])]


def test_at_full_dropout_every_training_token_reads_the_same_word_vector_and_prediction_reads_its_own():
    vocab = spacy.blank("en").vocab
    embed = build(width=8, attrs=["NORM"], rows=[100], include_static_vectors=False, word_dropout=0.999999)
    embed.initialize(X=docs(vocab))
    trained = numpy.concatenate(embed.begin_update(docs(vocab))[0])
    assert numpy.allclose(trained, trained[0], atol=1e-6)  # one unknown-word vector for all
    predicted = numpy.concatenate(embed.predict(docs(vocab)))
    assert not numpy.allclose(predicted, predicted[0], atol=1e-3)
    numpy.testing.assert_allclose(predicted[0], predicted[4], rtol=1e-6)  # "the" twice


def test_at_rate_zero_it_is_spacys_multihashembed():
    vocab = spacy.blank("en").vocab
    settings = dict(width=8, attrs=["NORM", "SHAPE"], rows=[100, 50], include_static_vectors=False)
    fix_random_seed(0)
    ours = build(**settings, word_dropout=0.0)
    ours.initialize(X=docs(vocab))
    fix_random_seed(0)
    theirs = MultiHashEmbed(**settings)
    theirs.initialize(X=docs(vocab))
    for a, b in zip(ours.begin_update(docs(vocab))[0], theirs.begin_update(docs(vocab))[0]):
        numpy.testing.assert_allclose(a, b, rtol=1e-6)
