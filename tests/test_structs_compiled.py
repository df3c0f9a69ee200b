"""The compiled lanes (``lane="compiled"`` and ``"factored"``) against the reference (``lane="reference"``) and
against enumeration: log Z, the gradient of F and of the distance bias, at every score scale, and when they run."""
import pytest
import torch

import importlib.util

from brute import enumerate_tree_model, expand_directional
from spacy_nldm.structs import (DirectionalScores, LogSemiring, MaxSemiring, label_marginals, log_partition, marginals,
                                sentence_by_sentence, tree_lane, viterbi)

pytestmark = pytest.mark.skipif(importlib.util.find_spec("numba") is None, reason="numba is not installed")


def log_z_and_grads(F, bias, lengths, k, lane=None):
    leaf = F.detach().clone().requires_grad_(True)
    leaf_bias = None if bias is None else bias.detach().clone().requires_grad_(True)
    log_z = log_partition(DirectionalScores(leaf, leaf_bias), lengths, max_dist=k, lane=lane)
    weights = torch.arange(1, len(lengths) + 1, dtype=log_z.dtype)  # a backward pass scaled per sentence
    (log_z * weights).sum().backward()
    return log_z.detach(), leaf.grad, None if bias is None else leaf_bias.grad


def random_case(seed, scale, dtype, with_bias):
    """Scores, a bias (``with_bias`` True: (2, 3); False: none), lengths and k."""
    gen = torch.Generator().manual_seed(seed)
    n = int(torch.randint(1, 9, (), generator=gen))
    m = int(torch.randint(1, 6, (), generator=gen))
    k = int(torch.randint(1, n + 1, (), generator=gen))
    batch = 4
    F = scale * torch.randn(batch, n, 2, m + 1, m, generator=gen, dtype=torch.float64)
    bias = scale * torch.randn(2, 3, generator=gen, dtype=torch.float64) if with_bias else None
    lengths = torch.randint(0, n + 1, (batch,), generator=gen)
    lengths[0] = n
    return F.to(dtype), None if bias is None else bias.to(dtype), lengths, k


@pytest.mark.parametrize("scale", [0.5, 5.0, 50.0, 500.0, 5000.0])
@pytest.mark.parametrize("with_bias", [False, True])
def test_the_compiled_lane_agrees_with_the_reference_in_float64(scale, with_bias):
    for seed in range(8):
        F, bias, lengths, k = random_case(seed, scale, torch.float64, with_bias)
        got = log_z_and_grads(F, bias, lengths, k, "compiled")
        want = log_z_and_grads(F, bias, lengths, k, "reference")
        assert torch.allclose(got[0], want[0], rtol=1e-12, atol=1e-9), (seed, got[0], want[0])
        assert torch.allclose(got[1], want[1], atol=1e-9), (seed, (got[1] - want[1]).abs().max())
        if with_bias:
            assert torch.allclose(got[2], want[2], atol=1e-8), (seed, got[2], want[2])


@pytest.mark.parametrize("lane", ["compiled", "reference"])
@pytest.mark.parametrize("scale", [1.0, 100.0, 1e4])
def test_float32_scores_are_exact_at_any_scale(scale, lane):
    """float32 scores: log Z and the marginals as the float64 computation of the same scores gives them."""
    for seed in range(6):
        F, bias, lengths, k = random_case(100 + seed, scale, torch.float32, True)
        got = log_z_and_grads(F, bias, lengths, k, lane)
        want = log_z_and_grads(F.double(), bias.double(), lengths, k, "reference")
        assert got[0].dtype == torch.float32
        assert torch.allclose(got[0].double(), want[0], rtol=1e-6, atol=1e-5)
        assert torch.allclose(got[1].double(), want[1], atol=1e-5)


def test_log_z_and_marginals_against_enumeration():
    gen = torch.Generator().manual_seed(7)
    m, n = 2, 4
    F = torch.randn(2, n, 2, m + 1, m, generator=gen, dtype=torch.float64)
    bias = torch.randn(2, 2, generator=gen, dtype=torch.float64)
    lengths = torch.tensor([4, 3])
    scores = DirectionalScores(F, bias)
    dense = expand_directional(F) + _dense_bias(bias, n)[None, :, :, None, None]
    for k in (1, 2, None):
        log_z = log_partition(scores, lengths, max_dist=k)
        got = marginals(scores, lengths, max_dist=k)
        for b in range(2):
            n_b = int(lengths[b])
            want_log_z, _, _, arcs, labels = enumerate_tree_model(dense[b].numpy(), n_b, max_dist=k)
            arcs = torch.from_numpy(arcs)
            assert abs(float(log_z[b]) - float(want_log_z)) < 1e-10
            assert torch.allclose(got.labels[b, :n_b], torch.from_numpy(labels), atol=1e-10)
            for d in range(1, n_b + 1):  # F's gradient: the dense marginals summed over each direction's heads
                assert torch.allclose(got.arcs[b, d - 1, 0, 0], arcs[0, d, 0], atol=1e-10)
                assert torch.allclose(got.arcs[b, d - 1, 0, 1:], arcs[1:d, d].sum(0), atol=1e-10)
                assert torch.allclose(got.arcs[b, d - 1, 1, 1:], arcs[d + 1 :, d].sum(0), atol=1e-10)


def _dense_bias(bias, n):
    k = bias.shape[1]
    out = torch.zeros(n + 1, n + 1, dtype=bias.dtype)
    for h in range(1, n + 1):
        for d in range(1, n + 1):
            if h != d:
                out[h, d] = bias[0 if h < d else 1, min(abs(h - d), k) - 1]
    return out


@pytest.mark.parametrize("lane", ["compiled", "reference"])
def test_gradient_against_finite_differences(lane):
    F, bias, lengths, k = random_case(3, 2.0, torch.float64, True)
    F, bias = F.requires_grad_(True), bias.requires_grad_(True)
    assert torch.autograd.gradcheck(
        lambda f, c: log_partition(DirectionalScores(f, c), lengths, max_dist=k, lane=lane), (F, bias), eps=1e-6,
        atol=1e-6)


def test_the_lane_runs_where_it_applies_and_only_there():
    F, bias, lengths, k = random_case(1, 1.0, torch.float32, True)
    assert tree_lane(DirectionalScores(F, bias), lengths, max_dist=k) == "compiled"
    assert tree_lane(DirectionalScores(F, bias, token_independent=True), lengths, max_dist=k) == "factored"
    assert sentence_by_sentence("cpu")
    assert tree_lane(DirectionalScores(F, bias, token_independent=True), lengths, semiring=MaxSemiring) == "compiled"
    # not for a label mask (unless the scores are given as factors), an arc mask or dense scores
    mask = torch.ones(F.shape[0], F.shape[1] + 1, F.shape[4], dtype=torch.bool)
    factored = DirectionalScores.from_factors(F[:, :, 0, 1], F[0, 0] - F[0, 0, 0, 1], bias)
    assert tree_lane(factored, lengths, max_dist=k, label_mask=mask) == "factored"
    assert tree_lane(factored, lengths, max_dist=k, label_mask=mask, arc_mask=torch.ones(
        1, F.shape[1] + 1, F.shape[1] + 1, dtype=torch.bool)) == "reference"
    arc_mask = torch.ones(1, F.shape[1] + 1, F.shape[1] + 1, dtype=torch.bool)
    for kw in (dict(label_mask=mask), dict(arc_mask=arc_mask)):
        assert tree_lane(DirectionalScores(F, bias), lengths, max_dist=k, **kw) == "reference"
        with pytest.raises(ValueError, match="cannot take"):
            log_partition(DirectionalScores(F, bias), lengths, max_dist=k, lane="compiled", **kw)
    assert tree_lane(expand_directional(F), lengths, max_dist=k) == "reference"
    with pytest.raises(ValueError, match="token_independent"):  # factored reads are the caller's statement
        log_partition(DirectionalScores(F, bias), lengths, max_dist=k, lane="factored")
    with pytest.raises(ValueError, match="lane must be"):
        log_partition(DirectionalScores(F, bias), lengths, lane="fast")
    assert tree_lane(DirectionalScores(F, bias), lengths, semiring=LogSemiring()) == "compiled"


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_impossible_arcs_and_sentences(dtype):
    """-inf scores: single arcs, whole rows of a dependent (every head label), and sentences without any
    finite tree (log Z -inf, gradient 0), as the torch stages give them."""
    for seed in range(10):
        F, bias, lengths, k = random_case(200 + seed, 3.0, dtype, seed % 2 == 0)
        gen = torch.Generator().manual_seed(seed)
        F[torch.rand(F.shape, generator=gen) < 0.3] = float("-inf")
        rows = torch.rand(F.shape[:3], generator=gen) < 0.15
        F[rows] = float("-inf")
        got = log_z_and_grads(F, bias, lengths, k, "compiled")
        want = log_z_and_grads(F, bias, lengths, k, "reference")
        assert torch.equal(torch.isneginf(got[0]), torch.isneginf(want[0])), seed
        finite = torch.isfinite(want[0])
        tol = 1e-5 if dtype == torch.float32 else 1e-9
        assert torch.allclose(got[0][finite], want[0][finite], rtol=tol, atol=tol), seed
        assert torch.allclose(got[1], want[1], atol=tol), seed
        assert not torch.isnan(got[1]).any()


@pytest.mark.parametrize("lane", ["compiled", "reference"])
def test_a_bad_score_is_named_on_either_lane(lane):
    F, bias, lengths, k = random_case(2, 1.0, torch.float32, False)
    F[0, 0, 0, 0, 0] = float("nan")
    with pytest.raises(ValueError, match="F\\[0, 0, 0, 0, 0\\]"):
        log_partition(DirectionalScores(F), lengths, max_dist=k, lane=lane)


@pytest.mark.parametrize("with_bias", [False, True])
@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-6), (torch.float64, 1e-12)])
def test_label_marginals_are_the_marginals_labels(dtype, tol, with_bias):
    """The compiled lane's label marginals (summed in the loop) are those of the arc marginals, summed."""
    for seed in range(5):
        F, bias, lengths, k = random_case(300 + seed, 2.0, dtype, with_bias)
        F[0, 0, 1] = float("-inf")  # a sentence without a tree (its first token has no head to the right)
        F[0, 0, 0, 0] = float("-inf")
        scores = DirectionalScores(F, bias)
        got = label_marginals(scores, lengths, max_dist=k)
        assert got.dtype == dtype
        assert torch.allclose(got, marginals(scores, lengths, max_dist=k).labels, atol=tol)
        assert torch.allclose(got, label_marginals(scores, lengths, max_dist=k, lane="reference"), atol=tol)


def token_independent_case(seed, scale, dtype):
    """emissions (B, N, M), one table (2, M+1, M), a bias (2, 3) and lengths:
    F = emissions + table, as the components' bilinear scorer makes it."""
    gen = torch.Generator().manual_seed(seed)
    n, m, batch = 7, 4, 4
    draw = lambda *shape: (scale * torch.randn(*shape, generator=gen, dtype=torch.float64)).to(dtype)  # noqa: E731
    lengths = torch.tensor([0, n, 3, 1])  # the first sentence is empty: the table is read off the second
    return draw(batch, n, m), draw(2, m + 1, m), draw(2, 3), lengths


def factored_log_z_and_grads(emissions, table, bias, lengths, k, lane):
    """log Z of F = emissions + table (read by ``lane``) and the gradients of the three inputs."""
    leaves = [x.detach().clone().requires_grad_(True) for x in (emissions, table, bias)]
    F = leaves[0][:, :, None, None, :] + leaves[1]
    log_z = log_partition(DirectionalScores(F, leaves[2], True), lengths, max_dist=k, lane=lane)
    weights = torch.arange(1, len(lengths) + 1, dtype=log_z.dtype)  # a backward pass scaled per sentence
    (log_z * weights).sum().backward()
    return [log_z.detach()] + [leaf.grad for leaf in leaves]


@pytest.mark.parametrize("scale", [0.5, 5.0, 50.0, 5000.0])
@pytest.mark.parametrize("dtype, tol", [(torch.float64, 1e-9), (torch.float32, 2e-4)])
def test_token_independent_scores_read_as_factors_agree(scale, dtype, tol):
    """The factored lane (the kernel reads emissions and one table) against the same scores read by the
    reference in float64: log Z, the gradients of the emissions, the table and the bias (F is their sum, so
    these are what training uses), and the label marginals."""
    emissions, table, bias, lengths = token_independent_case(int(scale * 10), scale, dtype)
    F = emissions[:, :, None, None, :] + table
    for k in (2, 7):
        want = factored_log_z_and_grads(emissions.double(), table.double(), bias.double(), lengths, k, "reference")
        want_labels = label_marginals(DirectionalScores(F.double(), bias.double()), lengths, max_dist=k,
                                      lane="reference")
        got = factored_log_z_and_grads(emissions, table, bias, lengths, k, "factored")
        assert got[0].dtype == dtype  # log Z in the scores' dtype, as on the dense reading
        torch.testing.assert_close(got[0].double(), want[0], rtol=tol, atol=tol * scale)
        for g, w in zip(got[1:], want[1:]):
            torch.testing.assert_close(g.double(), w, rtol=tol, atol=tol * 10)
        labels = label_marginals(DirectionalScores(F, bias, True), lengths, max_dist=k, lane="factored")
        torch.testing.assert_close(labels.double(), want_labels, rtol=0, atol=tol * 10)


@pytest.mark.parametrize("given", ["F", "factors"])
def test_token_independent_gradient_against_finite_differences(given):
    """log Z of token-independent scores given as F (read as factors) or as the factors themselves, by finite
    differences in the emissions, the table and the bias."""
    emissions, table, bias, lengths = token_independent_case(3 if given == "F" else 5, 1.0, torch.float64)

    def log_z(emissions, table, bias):
        if given == "factors":
            return log_partition(DirectionalScores.from_factors(emissions, table, bias), lengths, max_dist=3)
        F = emissions[:, :, None, None, :] + table
        return log_partition(DirectionalScores(F, bias, True), lengths, max_dist=3, lane="factored")

    inputs = tuple(x.detach().requires_grad_(True) for x in (emissions, table, bias))
    assert torch.autograd.gradcheck(log_z, inputs)


@pytest.mark.parametrize("scale", [0.5, 50.0, 5000.0])
def test_dense_one_label_scores_on_the_compiled_lane(scale):
    """Dense one-label scores (the gold labels' arcs, log S): the compiled lane against the reference, log Z and
    its gradient in float64, with -inf arcs, empty and impossible sentences, and where it runs."""
    gen = torch.Generator().manual_seed(int(scale))
    n = 9
    scores = scale * torch.randn(5, n + 1, n + 1, 1, 1, generator=gen, dtype=torch.float64)
    scores[torch.rand(scores.shape, generator=gen) < 0.2] = float("-inf")
    scores[3, :, 2] = float("-inf")  # token 2 of sentence 3 has no head: no tree
    lengths = torch.tensor([9, 4, 0, 7, 1])
    for k in (None, 1, 3):
        got, want = (log_z_and_dense_grad(scores, lengths, k, lane) for lane in ("compiled", "reference"))
        assert torch.equal(torch.isneginf(got[0]), torch.isneginf(want[0]))
        torch.testing.assert_close(got[0], want[0], rtol=1e-12, atol=1e-9)
        torch.testing.assert_close(got[1], want[1], rtol=0, atol=1e-9)
    assert tree_lane(scores, lengths) == "compiled"
    wide = torch.zeros(1, 62, 62, 1, 1)  # sentences longer than ONE_LABEL_UP_TO: the reference is faster
    assert tree_lane(wide, torch.tensor([61])) == "reference"
    assert tree_lane(torch.zeros(1, 4, 4, 2, 2), torch.tensor([3])) == "reference"


def log_z_and_dense_grad(scores, lengths, k, lane):
    leaf = scores.clone().requires_grad_(True)
    log_z = log_partition(leaf, lengths, max_dist=k, lane=lane)
    (grad,) = torch.autograd.grad((log_z * torch.arange(1.0, 6.0, dtype=log_z.dtype)).sum(), leaf)
    return log_z.detach(), grad


def test_dense_one_label_gradient_against_finite_differences():
    gen = torch.Generator().manual_seed(11)
    scores = torch.randn(2, 6, 6, 1, 1, generator=gen, dtype=torch.float64, requires_grad=True)
    lengths = torch.tensor([5, 3])
    assert torch.autograd.gradcheck(lambda s: log_partition(s, lengths, max_dist=2, lane="compiled"), (scores,))


def test_viterbi_on_the_compiled_lane_makes_the_references_choices():
    """Labels, heads and score of the compiled Viterbi equal the reference's exactly, ties included (integer
    scores: many exactly tied trees, both take the first split and label pair), with -inf arcs, a distance
    bias, max_dist and empty sentences; against enumeration on small cases."""
    for seed in range(24):
        gen = torch.Generator().manual_seed(seed)
        n, m = int(torch.randint(1, 9, (), generator=gen)), int(torch.randint(1, 5, (), generator=gen))
        F = torch.randn(5, n, 2, m + 1, m, generator=gen)
        if seed % 3 == 0:
            F = F.round()
        if seed % 4 == 1:
            F[torch.rand(F.shape, generator=gen) < 0.3] = float("-inf")
        bias = torch.randn(2, 3, generator=gen) if seed % 2 else None
        lengths = torch.randint(0, n + 1, (5,), generator=gen)
        for k in (None, 1, 3):
            got, want = (viterbi(DirectionalScores(F, bias), lengths, max_dist=k, lane=lane)
                         for lane in ("compiled", "reference"))
            assert torch.equal(got.labels, want.labels) and torch.equal(got.heads, want.heads), (seed, k)
            torch.testing.assert_close(got.score, want.score)
    gen = torch.Generator().manual_seed(7)
    F = torch.randn(2, 4, 2, 3, 2, generator=gen, dtype=torch.float64)
    lengths = torch.tensor([4, 3])
    best = viterbi(DirectionalScores(F), lengths, lane="compiled")
    for b in range(2):
        n_b = int(lengths[b])
        want_score = enumerate_tree_model(expand_directional(F)[b].numpy(), n_b)[1]
        assert abs(float(best.score[b]) - float(want_score)) < 1e-10


def factored_masked_log_z_and_grads(emissions, table, bias, lengths, k, mask, lane):
    """log S of factored scores under a label mask (B, N+1, M) (read by ``lane``; None: the default) and the
    gradients of the emissions, the table and the bias."""
    leaves = [x.detach().clone().requires_grad_(True) for x in (emissions, table, bias)]
    if lane == "reference":
        scores = DirectionalScores(leaves[0][:, :, None, None, :] + leaves[1], leaves[2], True)
    else:
        scores = DirectionalScores.from_factors(leaves[0], leaves[1], leaves[2])
    log_s = log_partition(scores, lengths, max_dist=k, label_mask=mask, lane=lane)
    weights = torch.arange(1, len(lengths) + 1, dtype=log_s.dtype)
    (torch.where(torch.isfinite(log_s), log_s, 0.0) * weights).sum().backward()
    return [log_s.detach()] + [leaf.grad for leaf in leaves]


@pytest.mark.parametrize("scale", [0.5, 5.0, 50.0, 5000.0])
@pytest.mark.parametrize("dtype, tol", [(torch.float64, 1e-9), (torch.float32, 2e-4)])
def test_a_label_mask_on_factored_scores_takes_the_factored_lane_exactly(scale, dtype, tol):
    """Partial labels (some tokens one label, some a few, some all; a sentence with a token that allows none)
    on scores given as factors: the factored lane, which puts the labels left out at -inf in the emissions, gives
    the reference's log S and gradients. At the large scales an allowed label's arcs are far below the best
    label's (their exponentials underflow), so the exact log-space recomputation must still be taken there."""
    emissions, table, bias, lengths = token_independent_case(int(scale * 10) + 1, scale, dtype)
    gen = torch.Generator().manual_seed(7)
    B, N, M = emissions.shape
    mask = torch.rand(B, N + 1, M, generator=gen) < 0.4
    mask[:, :, 0] |= torch.rand(B, N + 1, generator=gen) < 0.5
    mask[:, 2] = True  # a token with every label (unknown)
    mask[:, 3] = False
    mask[:, 3, 1] = True  # a token with one label
    mask[3, 1] = False  # sentence 3 (one token): that token allows nothing, so the sentence is impossible
    for k in (2, 7):
        assert tree_lane(DirectionalScores.from_factors(emissions, table, bias), lengths, max_dist=k,
                         label_mask=mask) == "factored"
        want = factored_masked_log_z_and_grads(emissions.double(), table.double(), bias.double(), lengths, k, mask,
                                               "reference")
        got = factored_masked_log_z_and_grads(emissions, table, bias, lengths, k, mask, None)
        assert got[0].dtype == dtype and bool(torch.isneginf(got[0][3]))
        torch.testing.assert_close(got[0].double(), want[0], rtol=tol, atol=tol * scale)
        for g, w in zip(got[1:], want[1:]):
            torch.testing.assert_close(g.double(), w, rtol=tol, atol=tol * 10)
        labels = label_marginals(DirectionalScores.from_factors(emissions, table, bias), lengths, max_dist=k,
                                 label_mask=mask)
        want_labels = label_marginals(DirectionalScores(emissions.double()[:, :, None, None, :] + table.double(),
                                                        bias.double()), lengths, max_dist=k, label_mask=mask,
                                      lane="reference")
        torch.testing.assert_close(labels.double(), want_labels, rtol=0, atol=tol * 10)
        assert bool((labels[~mask[:, 1:]] == 0).all())  # no mass on a label the mask leaves out


def test_a_masked_factored_gradient_against_finite_differences():
    emissions, table, bias, lengths = token_independent_case(4, 1.0, torch.float64)
    mask = torch.ones(emissions.shape[0], emissions.shape[1] + 1, emissions.shape[2], dtype=torch.bool)
    mask[:, 1, 1:] = False  # the first token's label is known
    mask[:, 4, :2] = False

    def log_s(emissions, table, bias):
        return log_partition(DirectionalScores.from_factors(emissions, table, bias), lengths, max_dist=3,
                             label_mask=mask)

    inputs = tuple(x.detach().requires_grad_(True) for x in (emissions, table, bias))
    assert torch.autograd.gradcheck(log_s, inputs)


@pytest.mark.parametrize("scale", [0.5, 5.0, 50.0, 5000.0])
@pytest.mark.parametrize("k", [1, 2, 3, 6])
def test_the_subtree_messages_give_the_label_marginals_or_hand_the_sentence_back(scale, k):
    """compiled_subtrees.inside_outside on factored scores: every sentence it reports done has the reference's
    log Z and label marginals (float64, to 1e-9); at the small scales it does every sentence, one with an
    emission of -inf (a label left out) too; at the largest it hands some back; and the public label_marginals,
    which computes the handed-back sentences by the item-by-item kernel, matches the reference either way."""
    import numpy as np
    from spacy_nldm.structs import compiled, compiled_subtrees

    emissions, table, bias, lengths = token_independent_case(int(scale * 10) + k, scale, torch.float64)
    emissions[2, 0, 1] = float("-inf")
    want = label_marginals(DirectionalScores(emissions[:, :, None, None, :] + table, bias), lengths, max_dist=k,
                           lane="reference")
    want_z = log_partition(DirectionalScores(emissions[:, :, None, None, :] + table, bias), lengths, max_dist=k,
                           lane="reference")
    B, N, M = emissions.shape
    real = torch.arange(N)[None, :] < lengths[:, None]
    offsets = np.concatenate([[0], np.cumsum(lengths.numpy())[:-1]]).astype(np.int64)
    labels, log_z, done = np.zeros((int(lengths.sum()), M)), np.zeros(B), np.zeros(B, dtype=np.bool_)
    compiled_subtrees.inside_outside(np.ascontiguousarray(emissions[real].numpy()), table.numpy(), bias.numpy(),
                                     offsets, lengths.numpy().astype(np.int64), k, compiled.THRESHOLD, True, log_z, done,
                                     labels, np.zeros((0, 2, 1, 1)), np.zeros((0, 2, 0)))
    done = torch.from_numpy(done)
    if scale <= 5.0:  # every sentence, the one with a label left out (-inf) too
        assert bool(done.all())
    elif scale >= 5000.0:  # scores thousands of nats apart: totals that could lose digits are handed back
        assert not bool(done.all())
    mine = (real & done[:, None])[real]
    torch.testing.assert_close(torch.from_numpy(labels)[mine], want[real & done[:, None]], rtol=0, atol=1e-9)
    torch.testing.assert_close(torch.from_numpy(log_z)[done], want_z[done], rtol=1e-12, atol=1e-9 * scale)
    got = label_marginals(DirectionalScores.from_factors(emissions, table, bias), lengths, max_dist=k)
    torch.testing.assert_close(got, want, rtol=0, atol=1e-9)
