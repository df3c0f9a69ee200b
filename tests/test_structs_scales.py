"""The latent tree is exact at every score scale, in float32 and float64, and handles impossible and bad
inputs: against the float64 reference lane (itself checked against enumeration)."""
import numpy as np
import pytest
import torch

from brute import enumerate_tree_model, expand_directional, tree_reference
from spacy_nldm.structs import (
    DirectionalScores,
    LogSemiring,
    MaxSemiring,
    log_partition,
    marginals,
    viterbi,
)

SCALES = [1.0, 10.0, 30.0, 100.0, 300.0, 1000.0]
LENGTHS = [6, 3, 5, 0, 1]
M = 3


def inputs(case, scale, seed):
    gen = torch.Generator().manual_seed(seed)
    n, M = max(LENGTHS), case.get("m", 3)
    lengths = torch.tensor(LENGTHS)
    kw = dict(max_dist=case.get("max_dist"))
    if case.get("label_mask"):
        mask = torch.rand(len(LENGTHS), n + 1, M, generator=gen) < 0.6
        mask[:, :, 1] = True
        kw["label_mask"] = mask
    if case.get("arc_mask"):
        arc_mask = torch.rand(len(LENGTHS), n + 1, n + 1, generator=gen) < 0.7
        arc_mask[:, 0] = True
        kw["arc_mask"] = arc_mask
    if case.get("directional"):
        F = scale * torch.randn(len(LENGTHS), n, 2, M + 1, M, generator=gen, dtype=torch.float64)
        return F, lengths, kw
    return scale * torch.randn(len(LENGTHS), n + 1, n + 1, M, M, generator=gen, dtype=torch.float64), lengths, kw


CASES = [
    dict(m=5),
    dict(m=5, max_dist=2),
    dict(m=5, label_mask=True),
    dict(m=5, arc_mask=True, max_dist=3),
    dict(m=5, directional=True),
    dict(directional=True, max_dist=2, label_mask=True),
    dict(arc_mask=True),
]


@pytest.mark.parametrize("scale", SCALES)
@pytest.mark.parametrize("case", CASES, ids=lambda c: ",".join(f"{k}={v}" for k, v in c.items()) or "plain")
def test_exact_in_float32_and_float64_at_every_scale(case, scale):
    """log Z / log S (relative 1e-5), the Viterbi score (relative 1e-5) and the arc and label marginals
    (absolute 1e-4) in float32, and the same to 1e-10 / 1e-9 in float64, at score std 1 to 1000.
    Before the checked exp-space contractions, float32 log Z was 13.5% off at std 300 (dense, M=4)."""
    raw, lengths, kw = inputs(case, scale, seed=int(scale) + len(case))
    raw = raw.float().double()  # values that float32 holds exactly: one reference for both dtypes
    dense = expand_directional(raw) if case.get("directional") else raw
    ref_z, ref_arcs, ref_best = tree_reference(dense, lengths, **kw)
    for dtype, rel, marg_tol in ((torch.float32, 1e-5, 1e-4), (torch.float64, 1e-10, 1e-9)):
        exact = raw.to(dtype)
        scores = DirectionalScores(exact) if case.get("directional") else exact
        log_z = log_partition(scores, lengths, **kw)
        np.testing.assert_allclose(log_z.double().numpy(), ref_z.numpy(), rtol=rel, atol=rel)
        labels, heads, best = viterbi(scores, lengths, **kw)
        np.testing.assert_allclose(best.double().numpy(), ref_best.numpy(), rtol=rel, atol=rel)
        marg = marginals(scores, lengths, **kw)
        ref_labels = ref_arcs.sum(dim=(1, 3))[:, 1:]
        np.testing.assert_allclose(marg.labels.double().numpy(), ref_labels.numpy(), rtol=0, atol=marg_tol)
        if not case.get("directional"):
            np.testing.assert_allclose(marg.arcs.double().numpy(), ref_arcs.numpy(), rtol=0, atol=marg_tol)
        # the decoded structure scores the best score (a tree, so it is the argmax); none if impossible
        for b, n in enumerate(LENGTHS):
            if ref_best[b] == float("-inf"):
                assert torch.all(labels[b] == 0) and torch.all(heads[b] == 0)
                continue
            y = labels[b, :n].tolist()
            total = sum(
                float(dense[b, h, d, y[h - 1] if h else 0, y[d - 1]])
                for d, h in enumerate(heads[b, :n].tolist(), start=1)
            )
            assert total == pytest.approx(float(ref_best[b]), rel=rel, abs=rel)


@pytest.mark.parametrize("scale", [1.0, 1000.0])
def test_the_reference_agrees_with_enumeration(scale):
    gen = torch.Generator().manual_seed(3)
    scores = scale * torch.randn(2, 5, 5, 2, 2, generator=gen, dtype=torch.float64)
    lengths = torch.tensor([4, 3])
    log_z, arcs, best = tree_reference(scores, lengths)
    for b, n in enumerate([4, 3]):
        ref_z, ref_best, _, ref_arcs, _ = enumerate_tree_model(scores[b].numpy(), n)
        assert log_z[b].item() == pytest.approx(ref_z, rel=1e-12)
        assert best[b].item() == pytest.approx(ref_best, rel=1e-12)
        np.testing.assert_allclose(arcs[b, : n + 1, : n + 1].numpy(), ref_arcs[: n + 1, : n + 1], atol=1e-12)


@pytest.mark.parametrize("directional", [False, True])
def test_impossible_sentences_give_minus_inf_and_zero_marginals(directional):
    """A token that allows no label, or that no arc can reach: log Z = -inf, the best score -inf with
    labels and heads 0, marginals and gradients 0 (never NaN); the other sentences are untouched."""
    gen = torch.Generator().manual_seed(5)
    lengths = torch.tensor([4, 4, 3])
    F = torch.randn(3, 4, 2, M + 1, M, generator=gen)
    scores = expand_directional(F)
    wrap = (lambda t: DirectionalScores(t)) if directional else (lambda t: t)
    tensor = F if directional else scores
    mask = torch.ones(3, 5, M, dtype=torch.bool)
    mask[0, 2] = False  # sentence 0, token 2: no label
    mask[2, 4] = False  # beyond sentence 2: ignored
    leaf = tensor.clone().requires_grad_(True)
    log_z = log_partition(wrap(leaf), lengths, label_mask=mask)
    assert log_z[0].item() == float("-inf") and torch.isfinite(log_z[1:]).all()
    (grad,) = torch.autograd.grad(log_z[1:].sum() + log_z[0] * 0, leaf)
    assert torch.isfinite(grad).all() and torch.all(grad[0] == 0)
    marg = marginals(wrap(tensor), lengths, label_mask=mask)
    assert torch.all(marg.arcs[0] == 0) and torch.all(marg.labels[0] == 0)
    torch.testing.assert_close(marg.labels[1].sum(-1), torch.ones(4))
    decoded = viterbi(wrap(tensor), lengths, label_mask=mask)
    assert decoded.score[0].item() == float("-inf") and torch.all(decoded.labels[0] == 0)
    assert torch.all(decoded.heads[0] == 0) and torch.isfinite(decoded.score[1:]).all()
    # no arc may reach token 4: the same, through the arc mask or -inf scores
    arc_mask = torch.ones(1, 5, 5, dtype=torch.bool)
    arc_mask[0, :, 4] = False
    log_z = log_partition(wrap(tensor), lengths, arc_mask=arc_mask)
    assert torch.all(log_z[:2] == float("-inf")) and torch.isfinite(log_z[2])  # sentence 2 has 3 tokens
    blocked = tensor.clone()
    if directional:
        blocked[1, 3] = float("-inf")  # every arc into token 4
    else:
        blocked[1, :, 4] = float("-inf")
    leaf = blocked.requires_grad_(True)
    log_z = log_partition(wrap(leaf), lengths)
    (grad,) = torch.autograd.grad(log_z.sum(), leaf)
    assert log_z[1].item() == float("-inf") and torch.isfinite(log_z[[0, 2]]).all()
    assert torch.isfinite(grad).all() and torch.all(grad[1] == 0)


def test_bad_inputs_are_rejected_with_a_clear_message():
    scores = torch.randn(2, 4, 4, 2, 2)
    lengths = torch.tensor([3, 2])
    bad = scores.clone()
    bad[1, 1, 2, 0, 1] = float("inf")
    with pytest.raises(ValueError, match=r"sentence 1: the arc 1 -> 2 \(labels 0, 1\) is inf"):
        log_partition(bad, lengths)
    with pytest.raises(ValueError, match="sentence 1"):
        viterbi(bad, lengths)
    with pytest.raises(ValueError, match="sentence 1"):
        marginals(bad, lengths)
    arc_mask = torch.ones(1, 4, 4, dtype=torch.bool)
    arc_mask[0, 1, 2] = False  # a masked arc is never read
    assert torch.isfinite(log_partition(bad, lengths, arc_mask=arc_mask)).all()
    nan = scores.clone()
    nan[0, 3, 1, 1, 0] = float("nan")
    with pytest.raises(ValueError, match="nan"):
        log_partition(nan, lengths)
    ignored = scores.clone()
    ignored[1, 3] = float("inf")  # beyond sentence 1
    ignored[0, 0, 3] = float("nan")  # the root arc 0 -> 3, longer than max_dist
    assert torch.isfinite(log_partition(ignored, lengths, max_dist=2)).all()
    F = torch.randn(2, 3, 2, 3, 2)
    F[0, 1, 1, 2, 0] = float("inf")
    with pytest.raises(ValueError, match=r"DirectionalScores F\[0, 1, 1, 2, 0\]"):
        log_partition(DirectionalScores(F), lengths)
    with pytest.raises(ValueError, match="float32 or float64"):
        log_partition(scores.half(), lengths)
    with pytest.raises(ValueError, match="float32 or float64"):
        viterbi(DirectionalScores(F.bfloat16()), lengths)
    with pytest.raises(TypeError, match="lengths must be an integer torch.Tensor"):
        log_partition(scores, [3, 2])
    with pytest.raises(TypeError, match="integer tensor"):
        marginals(scores, torch.tensor([3.0, 2.0]))
    for max_dist in (0, 1.5, True):
        with pytest.raises(ValueError, match="max_dist"):
            log_partition(scores, lengths, max_dist=max_dist)


def test_a_subclass_of_a_semiring_runs_like_its_parent():
    class MyLog(LogSemiring):
        pass

    gen = torch.Generator().manual_seed(8)
    scores = torch.randn(2, 5, 5, 3, 3, generator=gen, dtype=torch.float64, requires_grad=True)
    lengths = torch.tensor([4, 2])
    for semiring in (MyLog, MyLog()):
        mine = log_partition(scores, lengths, semiring=semiring)
        torch.testing.assert_close(mine, log_partition(scores, lengths))
        torch.testing.assert_close(torch.autograd.grad(mine.sum(), scores)[0], marginals(scores, lengths).arcs)
    # the max semiring's gradient marks the best tree
    best = log_partition(scores, lengths, semiring=MaxSemiring)
    (marks,) = torch.autograd.grad(best.sum(), scores)
    decoded = viterbi(scores, lengths)
    torch.testing.assert_close(best, decoded.score)
    for b, n in enumerate([4, 2]):
        heads = marks[b].sum(dim=(2, 3)).argmax(0)[1 : n + 1]
        assert heads.tolist() == decoded.heads[b, :n].tolist() and marks[b].sum().item() == n
