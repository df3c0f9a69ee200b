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

from dense_trees import factored_scores
from spacy_nldm.models.lstm import packed_lstm
from spacy_nldm.models.structure import LatentTree
from spacy_nldm.structs import canonical_heads


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


def test_packed_lstm_names_both_widths_when_its_input_is_too_narrow():
    model = packed_lstm(nO=8, nI=6)
    model.initialize()
    with pytest.raises(ValueError, match="width 6 but its input has width 4"):
        model.predict(sequences(numpy.random.default_rng(0), [3, 2], 4))


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


def is_projective_tree(heads):
    """heads[d-1] in 0..n for tokens 1..n (0 = root): every token reaches the root, no arcs cross."""
    n = len(heads)
    for d in range(1, n + 1):
        seen, h = set(), d
        while h != 0:
            if h in seen:
                return False
            seen.add(h)
            h = heads[h - 1]
    arcs = [tuple(sorted((h, d))) for d, h in enumerate(heads, start=1)]
    return not any(a < c < b < e for a, b in arcs for c, e in arcs)


def arc_length(heads):
    return sum(abs(h - d) for d, h in enumerate(heads, start=1))


@pytest.mark.parametrize("kind", ["token", "transition"])
@pytest.mark.parametrize("max_dist", [None, 2])
def test_canonical_tree_is_a_best_tree_and_rounding_does_not_change_it(kind, max_dist):
    generator = torch.Generator().manual_seed(0)
    tree = LatentTree(max_dist=max_dist, canonical=False)  # Viterbi's own choice among tied trees
    S, N, M = 64, 12, 3
    F = factored_scores(kind, S, N, M, generator)
    lengths = torch.randint(0, N + 1, (S,), generator=generator)
    labels, viterbi_heads, best = tree.decode(F, lengths)
    heads, scores = canonical_heads(F, labels, lengths, max_dist)
    torch.testing.assert_close(scores, best.double(), rtol=1e-5, atol=1e-5)  # a best tree for the labels
    torch.testing.assert_close(tree.tree_score(tree.expand(F.double()), labels, heads, lengths), scores)
    for s, n in enumerate(lengths.tolist()):
        h = heads[s, :n].tolist()
        assert is_projective_tree(h) and heads[s, n:].eq(0).all()
        assert max_dist is None or all(abs(x - d) <= max_dist for d, x in enumerate(h, start=1) if x)
        if kind == "transition":  # among its many exactly tied trees, the one with the shortest arcs
            assert arc_length(h) <= arc_length(viterbi_heads[s, :n].tolist())
    # LatentTree.decode returns the canonical tree (the default) and its score
    canonical_decode = LatentTree(max_dist=max_dist).decode(F, lengths)
    assert torch.equal(canonical_decode.labels, labels) and torch.equal(canonical_decode.heads, heads)
    torch.testing.assert_close(canonical_decode.score, scores.float())
    canonical = set()
    for seed in range(6):  # rounding-level changes of the scores, as from other batch neighbours
        noisy = F * (1 + 1e-7 * torch.randn(F.shape, generator=torch.Generator().manual_seed(seed)))
        assert torch.equal(tree.decode(noisy, lengths).labels, labels)
        canonical.add(str(canonical_heads(noisy, labels, lengths, max_dist)[0].tolist()))
        small_buckets = LatentTree(max_dist=max_dist, budget=2000 * (seed + 1))  # other neighbours
        assert torch.equal(small_buckets.decode(noisy, lengths).heads, heads)
    assert canonical == {str(heads.tolist())}


@pytest.mark.parametrize("max_dist", [None, 3])
def test_canonical_tree_with_a_distance_bias_is_a_best_tree(max_dist):
    """With a distance bias (2, K), the canonical tree of the decoded
    labels scores what Viterbi's best tree scores, and its score is the sum of its arcs' scores with their
    bias (the dense definition)."""
    from spacy_nldm.structs import distance_bias_matrix

    generator = torch.Generator().manual_seed(5)
    S, N, M = 32, 10, 3
    F = factored_scores("token", S, N, M, generator).double()
    bias = torch.randn(2, 3, generator=generator, dtype=torch.float64)
    lengths = torch.randint(0, N + 1, (S,), generator=generator)
    tree = LatentTree(max_dist=max_dist, canonical=False, distance_bias=bias)
    labels, _, best = tree.decode(F, lengths)
    heads, scores = canonical_heads(F, labels, lengths, max_dist, distance_bias=bias)
    torch.testing.assert_close(scores, best, rtol=1e-5, atol=1e-5)
    dense_bias = distance_bias_matrix(bias, N + 1, max_dist)
    dense = tree.expand(F) + dense_bias[None, :, :, None, None]
    torch.testing.assert_close(tree.tree_score(dense, labels, heads, lengths), scores)
    for s, n in enumerate(lengths.tolist()):
        assert is_projective_tree(heads[s, :n].tolist())


def test_canonical_tree_of_a_long_sentence_keeps_to_the_band():
    """5,000 tokens at k=5: charts of (n+1) x (k+1) cells, a few MB (one dense (n+1)^2 chart is 200 MB)."""
    import tracemalloc

    n, k, M = 5000, 5, 4
    generator = torch.Generator().manual_seed(3)
    F = factored_scores("transition", 1, n, M, generator)
    labels = torch.randint(0, M, (1, n), generator=generator)
    tracemalloc.start()
    try:
        heads, scores = canonical_heads(F, labels, torch.tensor([n]), k)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 20e6, peak
    d = torch.arange(1, n + 1)
    h = heads[0]
    assert torch.all(((h - d).abs() <= k) & (h != d))
    head_codes = torch.cat([torch.zeros(1, dtype=torch.long), labels[0] + 1])[h]
    total = F[0, d - 1, (h > d).long(), head_codes, labels[0]].double().sum()
    torch.testing.assert_close(scores[0], total)  # the score of the returned tree
