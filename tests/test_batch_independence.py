"""What makes a doc's predictions independent of its batch: the packed BiLSTM encoder (a doc's
vectors and gradients are those of the doc alone) and the canonical latent tree (one tree for each
class of equally scored trees, so that rounding cannot pick another)."""
import numpy
import pytest
import torch
from spacy.ml.models.tok2vec import BiLSTMEncoder
from spacy.util import registry
from thinc.api import PyTorchLSTM, chain, with_array
from thinc.layers import HashEmbed

from spacy_nldm import structs
from spacy_nldm.models.lstm import packed_lstm
from spacy_nldm.models.structure import LatentTree
from spacy_nldm.models.trees import canonical_heads


def sequences(rng, lengths, width):
    return [rng.normal(size=(n, width)).astype("float32") for n in lengths]


@pytest.mark.parametrize("depth", [1, 2])
def test_packed_lstm_gives_each_sequence_its_own_output_and_gradient(depth):
    rng = numpy.random.default_rng(depth)
    model = packed_lstm(nO=8, nI=6, depth=depth)
    model.initialize()
    Xs = sequences(rng, [5, 0, 1, 9, 3, 0], 6)
    dYs = [rng.normal(size=(len(x), 8)).astype("float32") for x in Xs]
    Ys, backprop = model.begin_update(Xs)
    dXs = backprop(dYs)
    for x, y, dy, dx in zip(Xs, Ys, dYs, dXs):
        assert y.shape == (len(x), 8) and dx.shape == x.shape
        if len(x) == 0:
            continue
        alone, backprop_alone = model.begin_update([x])
        numpy.testing.assert_allclose(y, alone[0], rtol=1e-5, atol=1e-6)
        numpy.testing.assert_allclose(dx, backprop_alone([dy])[0], rtol=1e-5, atol=1e-6)
    # a batch of empty sequences never reaches the LSTM
    Ys, backprop = model.begin_update([Xs[1], Xs[5]])
    assert [y.shape for y in Ys] == [(0, 8), (0, 8)] and [d.shape for d in backprop(Ys)] == [(0, 6), (0, 6)]


def test_spacy_padded_lstm_depends_on_the_batch_ours_does_not():
    """The reason for our encoder: spaCy's padded BiLSTM changes a short doc's vectors with a long neighbour."""
    rng = numpy.random.default_rng(0)
    Xs = sequences(rng, [3, 30], 16)
    theirs = BiLSTMEncoder(16, 1, 0.0)
    theirs.initialize(X=Xs)
    ours = registry.architectures.get("spacy-nldm.TorchBiLSTMEncoder.v1")(width=16, depth=1, dropout=0.0)
    ours.initialize(X=Xs)
    assert abs(theirs.predict(Xs)[0] - theirs.predict(Xs[:1])[0]).max() > 1e-3
    assert abs(ours.predict(Xs)[0] - ours.predict(Xs[:1])[0]).max() < 1e-5


def test_bilstm_encoder_v1_loads_weights_saved_by_the_padded_version():
    """spacy-nldm.BiLSTMEncoder.v1 used thinc's padded PyTorchLSTM: same layers, same LSTM state dict."""
    def embed():
        return with_array(HashEmbed(12, 100, column=0, seed=1))

    old = chain(embed(), PyTorchLSTM(nO=8, nI=12, bi=True))
    new = registry.architectures.get("spacy-nldm.BiLSTMEncoder.v1")(embed=embed(), embed_width=12, hidden_size=4)
    ids = [numpy.array([[3], [5], [7]], dtype="uint64")]
    old.initialize(X=ids)
    new.initialize(X=ids)
    new.from_bytes(old.to_bytes())
    numpy.testing.assert_allclose(new.predict(ids)[0], old.predict(ids)[0], rtol=1e-5, atol=1e-6)


def pattern(labels, heads):
    """Each token's (head direction, head label code) with code 0 for the root."""
    codes = [0] + [int(c) + 1 for c in labels]
    return [(int(h) > i + 1, codes[int(h)]) for i, h in enumerate(heads)]


def arc_length(heads):
    return sum(abs(int(h) - (i + 1)) for i, h in enumerate(heads))


@pytest.mark.parametrize("max_dist", [None, 2])
def test_canonical_tree_keeps_the_pattern_and_score_and_is_the_same_for_tied_trees(max_dist):
    torch.manual_seed(0)
    S, N, M = 12, 9, 3
    tree = LatentTree(max_dist=max_dist)
    F = torch.randn(S, N, 2, M + 1, M, dtype=torch.float64)
    lengths = torch.tensor([9, 1, 4, 7, 0, 9, 3, 8, 2, 6, 5, 9])
    scores = tree.expand(F)
    picks = []
    for seed in range(3):  # head-dependent noise far below the score differences picks other tied trees
        noise = 1e-9 * torch.rand(scores.shape[:3], generator=torch.Generator().manual_seed(seed), dtype=F.dtype)
        picks.append(structs.viterbi(scores + noise[..., None, None], lengths, max_dist=max_dist))
    heads_seen = {tuple(map(tuple, h.tolist())) for _, _, h in picks}
    assert len(heads_seen) > 1  # the tied trees exist
    canon = [canonical_heads(labels, heads, lengths, max_dist) for _, labels, heads in picks]
    for got in canon[1:]:
        assert torch.equal(got, canon[0])
    _, labels, heads = picks[0]
    for s, n in enumerate(lengths.tolist()):
        assert canon[0][s, n:].eq(0).all()
        assert pattern(labels[s, :n], canon[0][s, :n]) == pattern(labels[s, :n], heads[s, :n])
        assert arc_length(canon[0][s, :n]) <= arc_length(heads[s, :n])
    one = lambda h: tree.tree_score(scores, labels, h, lengths)  # noqa: E731
    torch.testing.assert_close(one(canon[0]), one(heads))
