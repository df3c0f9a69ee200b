"""Linear-chain CRFs of order 1 and 2 against enumeration."""
import itertools

import numpy as np
import pytest
import torch

from brute import chain_reference, enumerate_chain
from spacy_nldm.structs import (
    ChainScores,
    chain_potentials,
    crf_lane,
    crf_log_partition,
    crf_marginals,
    crf_viterbi,
)

LENGTHS = [5, 2, 4, 1, 0]


def random_chain(order, masked, seed, m=3):
    """float64 potentials (len(LENGTHS), max(LENGTHS), M, ..., M) of the given order, the lengths, and a random
    label mask (label 1 always allowed) or None."""
    gen = torch.Generator().manual_seed(seed)
    n = max(LENGTHS)
    potentials = torch.randn(len(LENGTHS), n, *((m,) * (order + 1)), generator=gen, dtype=torch.float64)
    mask = None
    if masked:
        mask = torch.rand(len(LENGTHS), n, m, generator=gen) < 0.6
        mask[:, :, 1] = True
    return potentials, torch.tensor(LENGTHS), mask


@pytest.mark.parametrize("order", [1, 2])
@pytest.mark.parametrize("masked", [False, True])
def test_chain_against_enumeration(order, masked):
    potentials, lengths, mask = random_chain(order, masked, seed=order * 10 + masked)
    log_z = crf_log_partition(potentials, lengths, label_mask=mask)
    labels, _, best = crf_viterbi(potentials, lengths, label_mask=mask)
    marg = crf_marginals(potentials, lengths, label_mask=mask)
    for b, length in enumerate(LENGTHS):
        if length == 0:
            assert log_z[b].item() == 0.0 and torch.all(labels[b] == 0) and torch.all(marg[b] == 0)
            continue
        ref_z, ref_best, ref_labels, ref_marg = enumerate_chain(
            potentials[b].numpy(), length, None if mask is None else mask[b].numpy()
        )
        assert log_z[b].item() == pytest.approx(ref_z, abs=1e-9)
        assert best[b].item() == pytest.approx(ref_best, abs=1e-9)
        assert labels[b, :length].tolist() == ref_labels.tolist()
        assert torch.all(labels[b, length:] == 0)
        np.testing.assert_allclose(marg[b, :length].numpy(), ref_marg, atol=1e-9)
        np.testing.assert_allclose(marg[b, length:].numpy(), 0.0)


@pytest.mark.parametrize("order", [1, 2])
@pytest.mark.parametrize("masked", [False, True])
def test_every_lane_forced_against_enumeration_and_the_log_space_reference(order, masked):
    """Each lane that takes the scores, forced through ``lane=``: log Z, its gradient and the marginals
    against enumeration (float64, lengths 5, 2, 4, 1 and 0) and against the log-space lane."""
    potentials, lengths, mask = random_chain(order, masked, seed=order * 10 + masked + 100)
    leaf = potentials.clone().requires_grad_(True)
    ref_z = crf_log_partition(leaf, lengths, label_mask=mask, lane="reference")
    (ref_grad,) = torch.autograd.grad(ref_z.sum(), leaf)
    ref_marg = crf_marginals(potentials, lengths, label_mask=mask, lane="reference")
    lanes = ["reference"] + (["bounded"] if order == 1 and not masked else [])
    assert crf_lane(potentials, lengths, label_mask=mask) in lanes
    for lane in lanes:
        log_z = crf_log_partition(leaf, lengths, label_mask=mask, lane=lane)
        (grad,) = torch.autograd.grad(log_z.sum(), leaf)
        marg = crf_marginals(potentials, lengths, label_mask=mask, lane=lane)
        torch.testing.assert_close(log_z, ref_z, rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(grad, ref_grad, rtol=1e-10, atol=1e-12)
        torch.testing.assert_close(marg, ref_marg, rtol=1e-10, atol=1e-12)
        for b, length in enumerate(LENGTHS):
            if length == 0:
                assert log_z[b].item() == 0.0 and torch.all(marg[b] == 0) and torch.all(grad[b] == 0)
                continue
            allowed = None if mask is None else mask[b].numpy()
            ref, _, _, enumerated = enumerate_chain(potentials[b].numpy(), length, allowed)
            assert log_z[b].item() == pytest.approx(ref, abs=1e-9)
            np.testing.assert_allclose(marg[b, :length].numpy(), enumerated, atol=1e-9)
            token_grad = grad[b].sum(dim=tuple(range(1, order + 1)))[:length]
            np.testing.assert_allclose(token_grad.numpy(), enumerated, atol=1e-9)


@pytest.mark.parametrize("order", [1, 2])
def test_chain_potentials_from_emissions_and_transitions(order):
    m, lengths = 3, torch.tensor([4, 2])
    gen = torch.Generator().manual_seed(3)
    emissions = torch.randn(2, 4, m, generator=gen, dtype=torch.float64)
    transitions = torch.randn(*((m,) * (order + 1)), generator=gen, dtype=torch.float64)
    start, end = torch.randn(m, generator=gen, dtype=torch.float64), torch.randn(m, generator=gen, dtype=torch.float64)
    pot = chain_potentials(emissions, transitions, lengths, start=start, end=end)
    log_z = crf_log_partition(pot, lengths)
    for b, n in enumerate(lengths.tolist()):
        totals = []
        for y in itertools.product(range(m), repeat=n):
            total = start[y[0]] + end[y[-1]] + sum(emissions[b, t, y[t]] for t in range(n))
            for t in range(1, n):
                # order 2: the label before token 0 is the start state, index 0
                prev = y[t - 1 : t] if order == 1 else ((0,) + y)[t - 1 : t + 1]
                total = total + transitions[prev + (y[t],)]
            totals.append(total)
        assert log_z[b].item() == pytest.approx(torch.logsumexp(torch.stack(totals), 0).item(), abs=1e-9)


def test_gradient_of_log_partition_is_the_marginal():
    gen = torch.Generator().manual_seed(5)
    potentials = torch.randn(2, 6, 4, 4, generator=gen, dtype=torch.float64, requires_grad=True)
    lengths = torch.tensor([6, 3])
    (grad,) = torch.autograd.grad(crf_log_partition(potentials, lengths).sum(), potentials)
    torch.testing.assert_close(grad.sum(dim=2), crf_marginals(potentials, lengths))
    eps = 1e-6
    bumped = potentials.detach().clone()
    bumped[0, 2, 1, 3] += eps
    numeric = (crf_log_partition(bumped, lengths) - crf_log_partition(potentials.detach(), lengths))[0] / eps
    assert grad[0, 2, 1, 3].item() == pytest.approx(numeric.item(), abs=1e-5)


@pytest.mark.parametrize("order", [1, 2])
def test_large_float32_potentials_and_minus_inf_stay_finite(order):
    gen = torch.Generator().manual_seed(9)
    m, lengths = 4, torch.tensor([7, 3, 0])
    potentials = 1e3 * torch.randn(3, 7, *((m,) * (order + 1)), generator=gen)
    potentials[0, 2, ..., 1] = float("-inf")  # label 1 impossible at token 2
    potentials.requires_grad_(True)
    mask = torch.rand(3, 7, m, generator=gen) < 0.7
    mask[:, :, 0] = True
    for kw in (dict(), dict(label_mask=mask)):
        log_z = crf_log_partition(potentials, lengths, **kw)
        (grad,) = torch.autograd.grad(log_z.sum(), potentials)
        labels, _, best = crf_viterbi(potentials, lengths, **kw)
        assert labels[0, 2] != 1 and torch.all(grad[2] == 0) and log_z[2].item() == 0.0
        for b, n in enumerate(lengths.tolist()[:2]):  # against enumeration of the same float32 scores in float64
            label_mask = kw.get("label_mask")
            ref_z, ref_best, _, ref_marg = enumerate_chain(
                potentials.detach()[b].double().numpy(), n, None if label_mask is None else label_mask[b].numpy())
            assert log_z[b].item() == pytest.approx(ref_z, rel=1e-5)
            assert best[b].item() == pytest.approx(ref_best, rel=1e-5)
            np.testing.assert_allclose(grad[b].sum(dim=tuple(range(1, order + 1)))[:n].double().numpy(), ref_marg,
                                       rtol=0, atol=1e-4)


SCALES = [1.0, 10.0, 30.0, 100.0, 300.0, 1000.0]


@pytest.mark.parametrize("lane", [None, "bounded", "reference"])
@pytest.mark.parametrize("order", [1, 2])
@pytest.mark.parametrize("scale", SCALES)
def test_exact_in_float32_and_float64_at_every_scale(order, scale, lane):
    """log Z, log S (partial label mask), Viterbi score and marginals at score standard deviations 1-1000,
    float32 and float64, against enumeration in float64: relative error <= 1e-5 on scores, absolute <= 1e-4
    on marginals (float64: 1e-10 and 1e-9); the lane chosen, and each lane forced where it applies.
    Before the log-space fallback, float32 log Z was 7.4% off at std 50."""
    m, lengths = 3, [5, 3, 4, 0]
    gen = torch.Generator().manual_seed(int(scale) + order)
    potentials = scale * torch.randn(len(lengths), 5, *((m,) * (order + 1)), generator=gen, dtype=torch.float64)
    mask = torch.rand(len(lengths), 5, m, generator=gen) < 0.7
    mask[:, :, 2] = True
    for dtype, rel, abs_marg in ((torch.float32, 1e-5, 1e-4), (torch.float64, 1e-10, 1e-9)):
        pot = potentials.to(dtype).requires_grad_(True)
        for label_mask in (None, mask):
            if lane == "bounded" and (label_mask is not None or crf_lane(pot, torch.tensor(lengths)) != "bounded"):
                continue  # the bounded lane takes unmasked order-1 scores spanning at most 354 nats per token
            log_z = crf_log_partition(pot, torch.tensor(lengths), label_mask=label_mask, lane=lane)
            (grad,) = torch.autograd.grad(log_z.sum(), pot)
            labels, _, best = crf_viterbi(pot, torch.tensor(lengths), label_mask=label_mask)
            marg = crf_marginals(pot, torch.tensor(lengths), label_mask=label_mask, lane=lane)
            for b, n in enumerate(lengths):
                if n == 0:
                    assert log_z[b].item() == 0.0 and torch.all(marg[b] == 0) and torch.all(grad[b] == 0)
                    continue
                exact = pot.detach()[b].double().numpy()  # the float32 scores, enumerated in float64
                ref_z, ref_best, _, ref_marg = enumerate_chain(
                    exact, n, None if label_mask is None else label_mask[b].numpy()
                )
                assert log_z[b].item() == pytest.approx(ref_z, rel=rel, abs=rel)
                assert best[b].item() == pytest.approx(ref_best, rel=rel, abs=rel)
                np.testing.assert_allclose(marg[b, :n].double().numpy(), ref_marg, rtol=0, atol=abs_marg)
                np.testing.assert_allclose(grad[b].sum(dim=tuple(range(1, order + 1)))[:n].double().numpy(), ref_marg,
                                           rtol=0, atol=abs_marg)
                if label_mask is not None:
                    assert all(label_mask[b, t, c] for t, c in enumerate(labels[b, :n].tolist()))


@pytest.mark.parametrize("order", [1, 2])
def test_a_token_without_an_allowed_label_makes_its_sentence_impossible(order):
    m, lengths = 3, torch.tensor([4, 4, 2])
    gen = torch.Generator().manual_seed(7)
    pot = torch.randn(3, 4, *((m,) * (order + 1)), generator=gen, requires_grad=True)
    mask = torch.ones(3, 4, m, dtype=torch.bool)
    mask[0, 2] = False  # sentence 0, token 2: no label allowed
    mask[2, 3] = False  # beyond sentence 2's length: ignored
    log_z = crf_log_partition(pot, lengths, label_mask=mask)
    assert log_z[0].item() == float("-inf") and torch.isfinite(log_z[1:]).all()
    (grad,) = torch.autograd.grad(log_z[1:].sum() + 0 * log_z[0], pot)
    assert torch.isfinite(grad).all() and torch.all(grad[0] == 0)
    marg = crf_marginals(pot, lengths, label_mask=mask)
    assert torch.all(marg[0] == 0) and torch.allclose(marg[1].sum(-1), torch.ones(4))
    labels, _, best = crf_viterbi(pot, lengths, label_mask=mask)
    assert best[0].item() == float("-inf") and torch.all(labels[0] == 0) and torch.isfinite(best[1:]).all()
    # -inf potentials everywhere into one token: the same, without a mask
    blocked = pot.detach().clone()
    blocked[1, 1] = float("-inf")
    log_z = crf_log_partition(blocked.requires_grad_(True), lengths)
    (grad,) = torch.autograd.grad(log_z.sum(), blocked)
    assert log_z[1].item() == float("-inf") and torch.all(grad[1] == 0) and torch.isfinite(grad).all()


def test_bad_inputs_are_rejected_with_a_clear_message():
    pot = torch.randn(2, 3, 2, 2)
    lengths = torch.tensor([3, 2])
    bad = pot.clone()
    bad[1, 1, 0, 1] = float("inf")
    with pytest.raises(ValueError, match=r"sentence 1: potentials\[1, 1, 0, 1\] is inf"):
        crf_log_partition(bad, lengths)
    with pytest.raises(ValueError, match="sentence 1"):
        crf_marginals(bad, lengths)
    nan = pot.clone()
    nan[0, 0, 0, 1] = float("nan")
    with pytest.raises(ValueError, match="nan"):
        crf_viterbi(nan, lengths)
    bad[1, 2] = float("inf")  # beyond sentence 1's length: ignored
    bad[1, 1] = 0.0
    assert torch.isfinite(crf_log_partition(bad, lengths)).all()
    with pytest.raises(ValueError, match="float32 or float64"):
        crf_log_partition(pot.half(), lengths)
    with pytest.raises(TypeError, match="lengths must be an integer torch.Tensor"):
        crf_log_partition(pot, [3, 2])
    with pytest.raises(TypeError, match="integer tensor"):
        crf_log_partition(pot, torch.tensor([3.0, 2.0]))
    with pytest.raises(ValueError, match="lengths must lie in"):
        crf_log_partition(pot, torch.tensor([4, 2]))


def test_gold_labels_score_equals_the_masked_dynamic_program():
    gen = torch.Generator().manual_seed(11)
    for order in (1, 2):
        pot = torch.randn(3, 5, *((4,) * (order + 1)), generator=gen, dtype=torch.float64, requires_grad=True)
        lengths = torch.tensor([5, 2, 0])
        labels = torch.randint(4, (3, 5), generator=gen)
        gold = torch.nn.functional.one_hot(labels, 4).bool()
        assert crf_lane(pot, lengths, label_mask=gold) == "gold"
        fast = crf_log_partition(pot, lengths, label_mask=gold)  # one label per token: read off
        (fast_grad,) = torch.autograd.grad(fast.sum(), pot)
        for lane in ("reference",):  # the dynamic program on the masked potentials
            slow = crf_log_partition(pot, lengths, label_mask=gold, lane=lane)
            torch.testing.assert_close(fast, slow)
            torch.testing.assert_close(fast_grad, torch.autograd.grad(slow.sum(), pot)[0])


@pytest.mark.parametrize("order, m, std",
                         [(1, 17, 30), (1, 17, 100), (1, 17, 300), (1, 17, 1000), (2, 8, 100), (2, 8, 300)])
def test_float32_marginals_at_a_realistic_size(order, m, std):
    """Issue 12: B=32, n=30, random lengths, float32 against float64: log Z relative 1e-5, marginals
    absolute 1e-4. Before alpha and beta were kept relative to per-token shifts, the marginals were off
    by up to 6.5e-4 (order 1, M=17, std 300) and 2.8e-4 (order 2, M=8, std 1000): alpha_t ~ t * std
    rounded by an ulp of several thousand in float32."""
    gen = torch.Generator().manual_seed(12 + order + std)
    batch, n = 32, 30
    lengths = torch.randint(1, n + 1, (batch,), generator=gen)
    potentials = (std * torch.randn(batch, n, *((m,) * (order + 1)), generator=gen)).double()
    ref_z, ref_marg = chain_reference(potentials, lengths)
    for dtype, rel, tol in ((torch.float32, 1e-5, 1e-4), (torch.float64, 1e-10, 1e-9)):
        log_z = crf_log_partition(potentials.to(dtype), lengths)
        np.testing.assert_allclose(log_z.double().numpy(), ref_z.numpy(), rtol=rel)
        marg = crf_marginals(potentials.to(dtype), lengths)
        assert float((marg.double() - ref_marg).abs().max()) <= tol
        leaf = potentials.to(dtype).requires_grad_(True)
        (grad,) = torch.autograd.grad(crf_log_partition(leaf, lengths).sum(), leaf)
        assert float((grad.sum(dim=tuple(range(2, grad.dim() - 1))).double() - ref_marg).abs().max()) <= tol
        best = crf_viterbi(potentials.to(dtype), lengths).score
        ref_best = crf_viterbi(potentials, lengths).score
        np.testing.assert_allclose(best.double().numpy(), ref_best.numpy(), rtol=rel)


@pytest.mark.parametrize("m, std", [(17, 1.0), (17, 5.0), (25, 1.0), (3, 0.3), (1, 1.0), (17, 10.0), (17, 30.0)])
def test_bounded_lane_at_a_realistic_size(m, std):
    """Issue 12, seventh session: order-1 potentials whose tokens span at most -log(THETA) nats run the bounded
    exp-space lane (no underflow check, one rescaling per K tokens, marginals as products; float32 tokens spanning
    more than 43.7 nats, std 10 and 30 here, run it in float64). Against a float64 logsumexp forward pass and
    autograd: float64 log Z 1e-12 relative, marginals 1e-11; float32 1e-6 and 1e-6. Padding holding NaN is
    ignored, empty sentences have log Z 0; a token spanning more than 354 nats sends the call to the general lanes."""
    gen = torch.Generator().manual_seed(m + int(10 * std))
    batch, n = 32, 30
    lengths = torch.randint(0, n + 1, (batch,), generator=gen)
    lengths[:2] = torch.tensor([n, 0])
    potentials = std * torch.randn(batch, n, m, m, generator=gen, dtype=torch.float64)
    potentials[2] += 1000.0  # large scores, spanning little: their differences must be taken exactly
    potentials = potentials.float().double()  # float32-representable: the float32 run sees the same scores
    ref_z, ref_marg = chain_reference(potentials, lengths)
    padding = torch.arange(n)[None, :] >= lengths[:, None]
    potentials[padding] = float("nan")
    # float64 marginals 1e-11: the reference's absolute log values round by an ulp of log Z (4e-12 at 3e4)
    for dtype, rel, tol in ((torch.float32, 1e-6, 1e-6), (torch.float64, 1e-12, 1e-11)):
        pot = potentials.to(dtype)
        assert crf_lane(pot, lengths) == "bounded"
        log_z = crf_log_partition(pot, lengths)
        np.testing.assert_allclose(log_z.double().numpy(), ref_z.numpy(), rtol=rel, atol=rel)
        marg = crf_marginals(pot, lengths)
        assert float((marg.double() - ref_marg).abs().max()) <= tol
        leaf = pot.clone().requires_grad_(True)
        (grad,) = torch.autograd.grad(crf_log_partition(leaf, lengths).sum(), leaf)
        assert float((grad.sum(2).double() - ref_marg).abs().max()) <= tol
        assert torch.all(grad[padding] == 0)
    if m > 1:  # one token spanning more than -log(THETA) = 354 nats in float64
        wide = potentials.float().clone()
        wide[0, 3, 0, 1] = 400.0
        assert crf_lane(wide, lengths) == "reference"


def test_bounded_lane_leaves_other_inputs_to_the_general_lanes():
    gen = torch.Generator().manual_seed(4)
    lengths = torch.tensor([4, 2])
    pot = torch.randn(2, 4, 3, 3, generator=gen)
    assert crf_lane(pot, lengths) == "bounded"
    for value in (float("inf"), float("nan")):
        bad = pot.clone()
        bad[1, 1, 0, 2] = value
        assert crf_lane(bad, lengths) == "reference"
        with pytest.raises(ValueError, match="lane 'bounded' cannot take"):
            crf_log_partition(bad, lengths, lane="bounded")
    forbidden = pot.clone()  # -inf: a structural zero, which the lane takes
    forbidden[1, 1, 0, 2] = float("-inf")
    assert crf_lane(forbidden, lengths) == "bounded"
    torch.testing.assert_close(crf_log_partition(forbidden, lengths),
                               crf_log_partition(forbidden, lengths, lane="reference"))
    order2 = torch.randn(2, 4, 3, 3, 3, generator=gen)
    assert crf_lane(order2, lengths) == "reference"
    assert crf_lane(300.0 * pot, lengths) == "reference"  # std 300: tokens span ~1000 nats
    mask = torch.ones(2, 4, 3, dtype=torch.bool)
    mask[0, 1, 2] = False
    assert crf_lane(pot, lengths, label_mask=mask) == "reference"
    for bad_lane, scores in (("bounded", order2), ("bounded", 300.0 * pot), ("factored", pot), ("gold", pot)):
        with pytest.raises(ValueError, match=f"lane '{bad_lane}' cannot take"):
            crf_log_partition(scores, lengths, lane=bad_lane)
    with pytest.raises(ValueError, match="lane must be one of"):
        crf_log_partition(pot, lengths, lane="fast")
    with pytest.raises(ValueError, match="log Z only"):
        crf_marginals(pot, lengths, lane="gold")


@pytest.mark.parametrize("dtype,tiny", [(torch.float64, 1e-310), (torch.float32, 1e-45)])
def test_bounded_lane_with_subnormal_spans(dtype, tiny):
    """Tokens whose potentials differ by a subnormal amount (budget / span overflows) run the lane with one
    rescaling per sentence (no OverflowError): log Z = n log M."""
    pot = torch.zeros(1, 3, 2, 2, dtype=dtype)
    pot[0, 1, 0, 1] = tiny
    log_z = crf_log_partition(pot, torch.tensor([3]))
    assert log_z.item() == pytest.approx(3 * np.log(2), rel=1e-6)  # 2^3 label sequences, each of score ~0


def test_bounded_lane_backward_twice_through_a_retained_graph():
    """The bounded lane's backward turns E_t into the marginals in place; a second backward recomputes it."""
    gen = torch.Generator().manual_seed(6)
    pot = torch.randn(3, 5, 4, 4, generator=gen, dtype=torch.float64, requires_grad=True)
    lengths = torch.tensor([5, 3, 0])
    assert crf_lane(pot, lengths) == "bounded"
    log_z = crf_log_partition(pot, lengths)
    (first,) = torch.autograd.grad(log_z.sum(), pot, retain_graph=True)
    (second,) = torch.autograd.grad((2 * log_z).sum(), pot)
    torch.testing.assert_close(second, 2 * first)
    torch.testing.assert_close(first.sum(2), crf_marginals(pot.detach(), lengths))


@pytest.mark.parametrize("order", [1, 2])
@pytest.mark.parametrize("batch,n", [(0, 5), (2, 0), (0, 0)])
def test_empty_batches_and_zero_length_padding(order, batch, n):
    """A batch without sentences, or whose sentences are all empty (N = 0), gives empty or zero results of
    the right shapes, not a reshape error (a spaCy pipe can hand the model an empty batch)."""
    m = 4
    potentials = torch.randn(batch, n, *((m,) * (order + 1)), requires_grad=True)
    lengths = torch.zeros(batch, dtype=torch.long)
    log_z = crf_log_partition(potentials, lengths)
    assert log_z.shape == (batch,) and torch.all(log_z == 0)
    log_z.sum().backward()
    assert potentials.grad.shape == potentials.shape and torch.all(potentials.grad == 0)
    mask = torch.ones(batch, n, m, dtype=torch.bool)
    assert crf_log_partition(potentials, lengths, label_mask=mask).shape == (batch,)
    assert crf_marginals(potentials, lengths).shape == (batch, n, m)
    labels, _, best = crf_viterbi(potentials, lengths)
    assert labels.shape == (batch, n) and torch.all(best == 0)
    if order == 1:
        emissions = torch.randn(batch, n, m, requires_grad=True)
        scores = ChainScores(emissions, torch.randn(m, m))
        assert torch.all(crf_log_partition(scores, lengths) == 0)
        assert crf_marginals(scores, lengths).shape == (batch, n, m)
        assert crf_viterbi(scores, lengths).labels.shape == (batch, n)
