"""The latent-tree inside / Viterbi / marginals against brute-force enumeration, and their special cases."""
import numpy as np
import pytest
import torch

from brute import enumerate_tree_model, expand_directional, projective_trees, tree_reference
from spacy_nldm.structs import (
    DirectionalScores,
    count_trees,
    crf_log_partition,
    crf_marginals,
    crf_viterbi,
    log_partition,
    marginals,
    viterbi,
)

LENGTHS = [4, 2, 5, 1]  # a padded batch, N = 5


def random_scores(lengths, m, seed, dtype=torch.float64, scale=1.0):
    gen = torch.Generator().manual_seed(seed)
    n = max(lengths)
    return scale * torch.randn(len(lengths), n + 1, n + 1, m, m, generator=gen, dtype=dtype)


def random_label_mask(lengths, m, seed):
    gen = torch.Generator().manual_seed(seed)
    n = max(lengths)
    mask = torch.rand(len(lengths), n + 1, m, generator=gen) < 0.6
    mask[torch.arange(len(lengths)), :, torch.randint(m, (len(lengths),), generator=gen)] = True
    return mask


def random_arc_mask(lengths, seed):
    gen = torch.Generator().manual_seed(seed)
    n = max(lengths)
    mask = torch.rand(len(lengths), n + 1, n + 1, generator=gen) < 0.7
    mask[:, 0, :] = True  # keep every sentence feasible: root arcs stay
    return mask


@pytest.mark.parametrize("n,expected", [(1, 1), (2, 3), (3, 12), (4, 55), (5, 273)])
def test_number_of_projective_trees(n, expected):
    assert len(projective_trees(n)) == expected
    assert count_trees(n) == expected


CASES = [
    dict(m=3),
    dict(m=2, label_mask=True),
    dict(m=3, max_dist=1),
    dict(m=2, max_dist=2, label_mask=True),
    dict(m=2, arc_mask=True),
    dict(m=3, max_dist=3, arc_mask=True, label_mask=True),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: ",".join(f"{k}={v}" for k, v in c.items()))
def test_against_enumeration(case):
    m = case["m"]
    scores = random_scores(LENGTHS, m, seed=len(str(case)))
    lengths = torch.tensor(LENGTHS)
    label_mask = random_label_mask(LENGTHS, m, seed=1) if case.get("label_mask") else None
    arc_mask = random_arc_mask(LENGTHS, seed=2) if case.get("arc_mask") else None
    kw = dict(label_mask=label_mask, max_dist=case.get("max_dist"), arc_mask=arc_mask)

    log_z = log_partition(scores, lengths, **kw)
    labels, heads, best = viterbi(scores, lengths, **kw)
    arc, label = marginals(scores, lengths, **kw)
    for b, n in enumerate(LENGTHS):
        ref_z, ref_best, _, ref_arc, ref_label = enumerate_tree_model(
            scores[b].numpy(),
            n,
            label_mask=None if label_mask is None else label_mask[b].numpy(),
            max_dist=case.get("max_dist"),
            arc_mask=None if arc_mask is None else arc_mask[b].numpy(),
        )
        assert log_z[b].item() == pytest.approx(ref_z, abs=1e-9)
        assert best[b].item() == pytest.approx(ref_best, abs=1e-9)
        # the returned structure is a valid tree whose score is the best score
        h = tuple(heads[b, :n].tolist())
        y = labels[b, :n].tolist()
        assert h in projective_trees(n)
        if case.get("max_dist"):
            assert all(abs(hd - d) <= case["max_dist"] for d, hd in enumerate(h, start=1))
        if label_mask is not None:
            assert all(label_mask[b, d, c] for d, c in enumerate(y, start=1))
        structure_score = sum(
            scores[b, hd, d, y[hd - 1] if hd else 0, y[d - 1]].item() for d, hd in enumerate(h, start=1)
        )
        assert structure_score == pytest.approx(ref_best, abs=1e-9)
        np.testing.assert_allclose(arc[b, : n + 1, : n + 1].numpy(), ref_arc[: n + 1, : n + 1], atol=1e-9)
        np.testing.assert_allclose(label[b, :n].numpy(), ref_label, atol=1e-9)
        # padding is ignored and gives zeros
        assert torch.all(labels[b, n:] == 0) and torch.all(heads[b, n:] == 0)
        assert torch.all(label[b, n:] == 0)


def test_gold_label_mask_gives_log_score_of_the_labels():
    m, lengths = 3, torch.tensor([4])
    scores = random_scores([4], m, seed=5)
    gold = torch.tensor([[0, 2, 1, 1, 0]])
    mask = torch.nn.functional.one_hot(gold, m).bool()
    ref_z, *_ = enumerate_tree_model(scores[0].numpy(), 4, label_mask=mask[0].numpy())
    log_s = log_partition(scores, lengths, label_mask=mask)
    assert log_s.item() == pytest.approx(ref_z, abs=1e-9)
    assert log_s.item() < log_partition(scores, lengths).item()


def test_empty_sentences():
    scores = random_scores([0, 3], 2, seed=3)
    lengths = torch.tensor([0, 3])
    log_z = log_partition(scores, lengths)
    assert log_z[0].item() == 0.0
    labels, heads, best = viterbi(scores, lengths)
    assert best[0].item() == 0.0 and torch.all(labels[0] == 0) and torch.all(heads[0] == 0)
    ref_z, *_ = enumerate_tree_model(scores[1].numpy(), 3)
    assert log_z[1].item() == pytest.approx(ref_z)


@pytest.mark.parametrize("batch, n", [(0, 4), (3, 0)])
def test_batches_without_tokens(batch, n):
    """No sentence, or only empty ones (no width to backtrack through): empty or zero results."""
    scores, lengths = torch.randn(batch, n + 1, n + 1, 2, 2), torch.zeros(batch, dtype=torch.long)
    labels, heads, best = viterbi(scores, lengths)
    assert labels.shape == heads.shape == (batch, n) and best.shape == (batch,)
    assert torch.all(best == 0) and torch.all(log_partition(scores, lengths) == 0)


def test_gradient_matches_finite_differences():
    scores = random_scores([3], 2, seed=11)
    lengths = torch.tensor([3])
    arc, _ = marginals(scores, lengths)
    eps = 1e-6
    gen = torch.Generator().manual_seed(0)
    checked = 0
    for _ in range(12):
        h, d = torch.randint(0, 4, (2,), generator=gen).tolist()
        a, c = torch.randint(0, 2, (2,), generator=gen).tolist()
        plus, minus = scores.clone(), scores.clone()
        plus[0, h, d, a, c] += eps
        minus[0, h, d, a, c] -= eps
        numeric = (log_partition(plus, lengths) - log_partition(minus, lengths)).item() / (2 * eps)
        assert arc[0, h, d, a, c].item() == pytest.approx(numeric, abs=1e-6)
        checked += numeric != 0
    assert checked > 0


def test_marginals_are_distributions():
    scores = random_scores(LENGTHS, 3, seed=4)
    lengths = torch.tensor(LENGTHS)
    arc, label = marginals(scores, lengths, max_dist=2)
    for b, n in enumerate(LENGTHS):
        # every real token has exactly one head and one label
        np.testing.assert_allclose(arc[b, :, 1 : n + 1].sum(dim=(0, 2, 3)).numpy(), np.ones(n), atol=1e-9)
        np.testing.assert_allclose(label[b, :n].sum(-1).numpy(), np.ones(n), atol=1e-9)


def test_max_dist_one_is_the_first_order_crf():
    m = 4
    scores = random_scores(LENGTHS, m, seed=7)
    lengths = torch.tensor(LENGTHS)
    n = max(LENGTHS)
    # the chain 0 -> 1 -> ... -> n uses the right-direction arcs t -> t+1
    potentials = torch.stack([scores[:, t, t + 1] for t in range(n)], dim=1)  # (B, N, M, M)
    torch.testing.assert_close(log_partition(scores, lengths, max_dist=1), crf_log_partition(potentials, lengths))
    labels, heads, best = viterbi(scores, lengths, max_dist=1)
    crf_labels, _, crf_best = crf_viterbi(potentials, lengths)
    torch.testing.assert_close(best, crf_best)
    assert torch.equal(labels, crf_labels)
    expected_heads = torch.arange(n)[None, :] * (torch.arange(1, n + 1)[None, :] <= lengths[:, None])
    assert torch.equal(heads, expected_heads)
    torch.testing.assert_close(marginals(scores, lengths, max_dist=1)[1], crf_marginals(potentials, lengths))


def test_root_arcs_only_is_independent_softmax():
    m = 5
    scores = random_scores(LENGTHS, m, seed=8)
    lengths = torch.tensor(LENGTHS)
    n = max(LENGTHS)
    root_only = torch.zeros(1, n + 1, n + 1, dtype=torch.bool)
    root_only[:, 0, :] = True
    emissions = scores[:, 0, 1:, 0, :]  # (B, N, M)
    real = torch.arange(n)[None, :] < lengths[:, None]
    expected = (torch.logsumexp(emissions, -1) * real).sum(-1)
    torch.testing.assert_close(log_partition(scores, lengths, arc_mask=root_only), expected)
    _, label = marginals(scores, lengths, arc_mask=root_only)
    torch.testing.assert_close(label, torch.softmax(emissions, -1) * real[..., None])
    labels, heads, _ = viterbi(scores, lengths, arc_mask=root_only)
    assert torch.equal(labels, emissions.argmax(-1) * real)
    assert torch.all(heads == 0)


def test_float32_agrees_with_float64():
    scores = random_scores([12, 7, 3], 6, seed=9, scale=3.0)
    lengths = torch.tensor([12, 7, 3])
    z64 = log_partition(scores, lengths)
    z32 = log_partition(scores.float(), lengths)
    torch.testing.assert_close(z32.double(), z64, rtol=1e-5, atol=1e-4)
    _, l64 = marginals(scores, lengths, max_dist=4)
    _, l32 = marginals(scores.float(), lengths, max_dist=4)
    torch.testing.assert_close(l32.double(), l64, rtol=0, atol=1e-4)


def test_results_do_not_depend_on_batch_padding():
    lengths = [6, 3, 9]
    scores = random_scores(lengths, 4, seed=10, dtype=torch.float32)
    full = log_partition(scores, torch.tensor(lengths))
    arc, _ = marginals(scores, torch.tensor(lengths))
    for b, n in enumerate(lengths):
        alone = scores[b : b + 1, : n + 1, : n + 1]
        torch.testing.assert_close(log_partition(alone, torch.tensor([n]))[0], full[b])
        torch.testing.assert_close(marginals(alone, torch.tensor([n]))[0][0], arc[b, : n + 1, : n + 1])


@pytest.mark.parametrize("max_dist", [None, 3])
def test_large_float32_scores_stay_finite(max_dist):
    lengths = torch.tensor([10, 4, 0, 7])
    scores = random_scores(lengths.tolist(), 5, seed=12, dtype=torch.float32, scale=1e3)
    scores[1, 6:, :] = float("nan")  # padding may hold anything
    scores[0, 2, 3] = float("-inf")
    scores.requires_grad_(True)
    mask = random_label_mask(lengths.tolist(), 5, seed=13)
    clean = torch.nan_to_num(scores.detach(), nan=0.0)  # the float32 scores, padding zeroed
    for kw in (dict(), dict(label_mask=mask)):
        log_z = log_partition(scores, lengths, max_dist=max_dist, **kw)
        (grad,) = torch.autograd.grad(log_z.sum(), scores)
        assert (grad[0, 2, 3] == 0).all() and (grad[1, 6:] == 0).all()  # a -inf arc and the padding: marginal 0
        _, _, best = viterbi(scores, lengths, max_dist=max_dist, **kw)
        ref_z, ref_arcs, ref_best = tree_reference(clean, lengths, max_dist=max_dist, **kw)
        torch.testing.assert_close(log_z.double(), ref_z, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(best.double(), ref_best, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(grad.double(), ref_arcs, rtol=0, atol=1e-4)


def test_float32_is_exact_for_large_realistic_score_spreads():
    """Arc scores of standard deviation 30 (label spreads of hundreds of nats per item) in float32
    against float64: log Z and label marginals."""
    lengths = torch.tensor([9, 6, 3])
    scores = random_scores(lengths.tolist(), 6, seed=14, scale=30.0)
    for max_dist in (None, 3):
        want = log_partition(scores, lengths, max_dist=max_dist)
        got = log_partition(scores.float(), lengths, max_dist=max_dist)
        torch.testing.assert_close(got.double(), want, rtol=1e-6, atol=1e-3)
        _, want_labels = marginals(scores, lengths, max_dist=max_dist)
        _, got_labels = marginals(scores.float(), lengths, max_dist=max_dist)
        torch.testing.assert_close(got_labels.double(), want_labels, rtol=0, atol=1e-4)


def test_bad_input_is_rejected_with_a_clear_message():
    with pytest.raises(ValueError, match="shape"):
        log_partition(torch.zeros(2, 3, 4, 2, 2), torch.tensor([1, 1]))
    with pytest.raises(ValueError, match="lengths"):
        log_partition(torch.zeros(1, 3, 3, 2, 2), torch.tensor([3]))
    with pytest.raises(ValueError, match="arc_mask"):
        log_partition(torch.zeros(1, 3, 3, 2, 2), torch.tensor([2]), arc_mask=torch.ones(1, 2, 3, dtype=torch.bool))
    with pytest.raises(ValueError, match="max_dist"):
        log_partition(torch.zeros(1, 3, 3, 2, 2), torch.tensor([2]), max_dist=0)
    with pytest.raises(ValueError, match="label_mask"):
        log_partition(torch.zeros(1, 3, 3, 2, 2), torch.tensor([2]), label_mask=torch.ones(1, 2, 2, dtype=torch.bool))


@pytest.mark.parametrize("max_dist", [None, 1, 2])
def test_directional_scores_equal_their_dense_expansion(max_dist):
    """log Z and its gradient from the compact (B, N, 2, M+1, M) form, against the dense tensor."""
    lengths = torch.tensor(LENGTHS)
    gen = torch.Generator().manual_seed(50)
    F = torch.randn(len(LENGTHS), max(LENGTHS), 2, 4, 3, generator=gen, dtype=torch.float64, requires_grad=True)
    arc_mask = random_arc_mask(LENGTHS, seed=51)
    for kw in (dict(), dict(arc_mask=arc_mask)):
        dense = log_partition(expand_directional(F), lengths, max_dist=max_dist, **kw)
        compact = log_partition(DirectionalScores(F), lengths, max_dist=max_dist, **kw)
        torch.testing.assert_close(compact, dense)
        (g_dense,) = torch.autograd.grad(dense.sum(), F)
        (g_compact,) = torch.autograd.grad(compact.sum(), F)
        torch.testing.assert_close(g_compact, g_dense)
        # decoding and marginals read the compact form too
        dense_best, compact_best = viterbi(expand_directional(F), lengths, max_dist=max_dist, **kw), viterbi(
            DirectionalScores(F), lengths, max_dist=max_dist, **kw
        )
        assert torch.equal(dense_best.labels, compact_best.labels) and torch.equal(dense_best.heads, compact_best.heads)
        torch.testing.assert_close(dense_best.score, compact_best.score)
        dense_marg = marginals(expand_directional(F), lengths, max_dist=max_dist, **kw)
        compact_marg = marginals(DirectionalScores(F), lengths, max_dist=max_dist, **kw)
        torch.testing.assert_close(compact_marg.labels, dense_marg.labels)
    with pytest.raises(ValueError, match="directional"):
        DirectionalScores(torch.zeros(2, 3, 2, 3, 3))


def test_padding_is_never_read():
    """Scores past a sentence's end hold NaN (padding may hold anything): every result stays finite and
    equals that of the sentence alone, and no gradient reaches the padding."""
    lengths = torch.tensor([6, 2, 0])
    clean = random_scores(lengths.tolist(), 3, seed=30)
    scores = clean.clone()
    for b, n in enumerate(lengths.tolist()):
        scores[b, n + 1 :] = float("nan")
        scores[b, :, n + 1 :] = float("nan")
    scores.requires_grad_(True)
    for max_dist in (None, 2):
        log_z = log_partition(scores, lengths, max_dist=max_dist)
        (grad,) = torch.autograd.grad(log_z.sum(), scores)
        best = viterbi(scores, lengths, max_dist=max_dist)
        assert torch.isfinite(log_z).all() and torch.isfinite(grad).all() and torch.isfinite(best.score).all()
        assert grad[1, 3:].eq(0).all() and grad[1, :, 3:].eq(0).all()
        for b, n in enumerate(lengths.tolist()):
            alone = clean[b : b + 1, : n + 1, : n + 1]
            torch.testing.assert_close(log_z[b : b + 1], log_partition(alone, lengths[b : b + 1], max_dist=max_dist))
            torch.testing.assert_close(best.score[b : b + 1], viterbi(alone, lengths[b : b + 1], max_dist=max_dist).score)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_cuda_matches_cpu():
    lengths = torch.tensor([7, 3, 5])
    scores = random_scores(lengths.tolist(), 4, seed=40, dtype=torch.float32)
    mask = random_label_mask(lengths.tolist(), 4, seed=41)
    for kw in (dict(), dict(max_dist=2, label_mask=mask)):
        gpu_kw = {k: v.cuda() if torch.is_tensor(v) else v for k, v in kw.items()}
        on_gpu = (scores.cuda(), lengths.cuda())
        torch.testing.assert_close(
            log_partition(*on_gpu, **gpu_kw).cpu(), log_partition(scores, lengths, **kw), rtol=1e-5, atol=1e-4
        )
        torch.testing.assert_close(
            viterbi(*on_gpu, **gpu_kw).score.cpu(), viterbi(scores, lengths, **kw).score, rtol=1e-5, atol=1e-4
        )
        torch.testing.assert_close(
            marginals(*on_gpu, **gpu_kw)[1].cpu(), marginals(scores, lengths, **kw)[1], rtol=0, atol=1e-4
        )


@pytest.mark.parametrize("n, std", [(30, 300), (30, 1000), (60, 300), (60, 1000)])
def test_float32_marginals_with_max_dist_at_a_realistic_size(n, std):
    """Issue 12: B=32, random lengths in [1, n], M=17, DirectionalScores, max_dist=3, float32 against
    float64 on the same inputs: label marginals absolute 1e-4, log Z and Viterbi score relative 1e-5.
    Before the tail items T[i] (the root's chain past the longest arc, ~ (n_b - i) * std) were kept
    relative to per-position shifts, their float32 rounding, an ulp of several thousand, put 4.3e-4
    into the marginals here (n=60, std 300)."""
    from spacy_nldm.structs import DirectionalScores, log_partition, marginals, viterbi

    gen = torch.Generator().manual_seed(12 + n + std)
    batch, m = 32, 17
    lengths = torch.randint(1, n + 1, (batch,), generator=gen)
    F = (std * torch.randn(batch, n, 2, m + 1, m, generator=gen)).double()
    results = {}
    for dtype in (torch.float32, torch.float64):
        scores = DirectionalScores(F.to(dtype))
        results[dtype] = (log_partition(scores, lengths, max_dist=3).double(),
                          marginals(scores, lengths, max_dist=3).labels.double(),
                          viterbi(scores, lengths, max_dist=3).score.double())
    (z32, m32, v32), (z64, m64, v64) = results[torch.float32], results[torch.float64]
    np.testing.assert_allclose(z32.numpy(), z64.numpy(), rtol=1e-5)
    np.testing.assert_allclose(v32.numpy(), v64.numpy(), rtol=1e-5)
    assert float((m32 - m64).abs().max()) <= 1e-4


@pytest.mark.parametrize("n, max_dist, seed", [(60, 3, 0), (16, None, 9)])
def test_float32_marginals_at_std_1000(n, max_dist, seed):
    """Issue 12: B=32, random lengths in [1, n], M=17, DirectionalScores at score std 1000, float32 against
    float64 on the same (float32) inputs: label marginals absolute 1e-4, log Z relative 1e-5. Before
    every chart item was kept relative to a float64 shift, the items of width <= max_dist (all of them
    without max_dist) were absolute float32 log values of up to ~1e4 (an ulp of 1e-3 nats), with float32
    shifts in their encodings: 1.2e-4 here with max_dist=3 (n=60), 1.7e-4 without (n=16; 1.5e-4 at n=30,
    seed 0, which takes 5-10 s)."""
    gen = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1, n + 1, (32,), generator=gen)
    F = (1000 * torch.randn(32, n, 2, 18, 17, generator=gen, dtype=torch.float64)).float().double()
    results = {}
    for dtype in (torch.float32, torch.float64):
        scores = DirectionalScores(F.to(dtype))
        marg = marginals(scores, lengths, max_dist=max_dist)
        results[dtype] = (log_partition(scores, lengths, max_dist=max_dist).double(),
                          marg.labels.double(), marg.arcs.double())
    (z32, m32, a32), (z64, m64, a64) = results[torch.float32], results[torch.float64]
    np.testing.assert_allclose(z32.numpy(), z64.numpy(), rtol=1e-5)
    assert float((m32 - m64).abs().max()) <= 1e-4
    assert float((a32 - a64).abs().max()) <= 1e-4  # the gradient (DirectionalScores' arc marginals)
