"""The factored first-order chain (ChainScores: emissions + one transition matrix) against enumeration, the
potentials' path and float64, at every score scale."""
import numpy as np
import pytest
import torch

from brute import chain_reference, enumerate_chain
from spacy_nldm.structs import (
    ChainScores,
    chain_factored,
    crf_lane,
    crf_log_partition,
    crf_marginals,
    crf_score,
    crf_viterbi,
)

LENGTHS = [5, 2, 4, 1, 5]


def _scores(scale=1.0, dtype=torch.float64, seed=0, batch=len(LENGTHS), n=5, m=3, start_end=True):
    gen = torch.Generator().manual_seed(seed)
    draw = lambda *shape: (scale * torch.randn(*shape, generator=gen, dtype=torch.float64)).to(dtype)  # noqa: E731
    parts = [draw(batch, n, m), draw(m, m)] + ([draw(m), draw(m)] if start_end else [None, None])
    return ChainScores(*[None if p is None else p.requires_grad_(True) for p in parts])


def _fast(scores, lengths):
    """The factored lane's pass over these scores (None where it declines them all)."""
    emissions = scores.emissions.detach()
    if scores.end is not None:  # the end scores onto each sentence's last real token
        last = torch.arange(emissions.shape[1])[None, :] == (lengths - 1)[:, None]
        emissions = emissions + last[:, :, None].to(emissions.dtype) * scores.end.detach()
    start = torch.zeros_like(emissions[0, 0]) if scores.start is None else scores.start.detach()
    return chain_factored.fast_path(emissions, scores.transitions.detach(), start, lengths)


def _took_fast_path(scores, lengths) -> bool:
    return crf_lane(scores, lengths) == "factored" and _fast(scores, lengths) is not None


def _grads(log_z, scores):
    leaves = [p for p in scores if p is not None]
    return torch.autograd.grad(log_z.sum(), leaves)


@pytest.mark.parametrize("start_end", [True, False])
def test_factored_chain_against_enumeration(start_end):
    scores, lengths = _scores(start_end=start_end), torch.tensor(LENGTHS)
    assert _took_fast_path(scores, lengths)
    log_z = crf_log_partition(scores, lengths)
    marg = crf_marginals(scores, lengths)
    labels, _, best = crf_viterbi(scores, lengths)
    potentials = scores.potentials(lengths).detach().numpy()
    for b, length in enumerate(LENGTHS):
        ref_z, ref_best, ref_labels, ref_marg = enumerate_chain(potentials[b], length, None)
        assert log_z[b].item() == pytest.approx(ref_z, abs=1e-9)
        assert best[b].item() == pytest.approx(ref_best, abs=1e-9)
        assert labels[b, :length].tolist() == ref_labels.tolist()
        np.testing.assert_allclose(marg[b, :length].numpy(), ref_marg, atol=1e-9)
        np.testing.assert_allclose(marg[b, length:].numpy(), 0.0)


@pytest.mark.parametrize("scale", [1.0, 10.0, 30.0, 100.0, 300.0, 1000.0])
def test_factored_equals_the_potentials_path_with_gradients_at_every_scale(scale):
    """float64: the factored form gives the potentials' log Z, marginals and gradients (fast path where it
    applies, the general path beyond); float32: within 1e-5 relative (log Z) and 1e-4 (marginals) of float64."""
    lengths = torch.tensor(LENGTHS)
    scores = _scores(scale, m=4, seed=int(scale))
    log_z = crf_log_partition(scores, lengths)
    ref_z = crf_log_partition(scores.potentials(lengths), lengths)
    torch.testing.assert_close(log_z, ref_z, rtol=1e-12, atol=1e-9)
    ref_grads = _grads(ref_z, scores)
    for got, ref in zip(_grads(log_z, scores), ref_grads):
        torch.testing.assert_close(got, ref, rtol=1e-9, atol=1e-9)
    ref_marg = crf_marginals(scores.potentials(lengths).detach(), lengths)
    torch.testing.assert_close(crf_marginals(scores, lengths), ref_marg, rtol=1e-9, atol=1e-9)

    single = ChainScores(*[None if p is None else p.detach().float().requires_grad_(True) for p in scores])
    z32 = crf_log_partition(single, lengths)
    ref_z = ref_z.detach()
    assert float(((z32.detach().double() - ref_z) / ref_z.abs()).abs().max()) <= 1e-5
    assert float((crf_marginals(single, lengths).double() - ref_marg).abs().max()) <= 1e-4
    for got, ref in zip(_grads(z32, single), ref_grads):  # gradients are marginals: absolute error
        assert float((got.double() - ref).abs().max()) <= 1e-4 * max(1.0, float(ref.abs().max()))


def _working_dtype(scores, lengths):
    """The dtype the factored lane computes in, None where it declines."""
    fast = _fast(scores, lengths)
    return None if fast is None else fast.ya.dtype


def test_the_fast_path_applies_at_tagger_scales_and_steps_aside_beyond():
    lengths = torch.tensor(LENGTHS)
    assert _working_dtype(_scores(1.0, torch.float32), lengths) == torch.float32
    assert _working_dtype(_scores(5.0, torch.float32), lengths) == torch.float32
    assert _working_dtype(_scores(50.0, torch.float32), lengths) == torch.float64  # float32 in, float64 arithmetic
    assert _working_dtype(_scores(50.0, torch.float64), lengths) == torch.float64
    assert _working_dtype(_scores(300.0, torch.float32), lengths) is None


@pytest.mark.parametrize("masked", [False, True])
@pytest.mark.parametrize("scale", [1.0, 30.0, 300.0])
def test_every_lane_forced_on_chain_scores(scale, masked):
    """Each lane that takes ChainScores, forced through ``lane=`` (on a GPU the bounded lane is chosen where
    it applies): float64 log Z, gradients of every tensor and marginals equal the log-space lane's, and
    float32 is within 1e-5 relative (log Z) and 1e-4 (marginals, gradients) of them."""
    lengths = torch.tensor(LENGTHS)
    scores = _scores(scale, m=4, seed=int(scale))
    mask = None
    if masked:
        mask = torch.rand(len(LENGTHS), 5, 4, generator=torch.Generator().manual_seed(1)) < 0.6
        mask[:, :, 3] = True
    ref_z = crf_log_partition(scores, lengths, label_mask=mask, lane="reference")
    ref_grads = _grads(ref_z, scores)
    ref_marg = crf_marginals(scores, lengths, label_mask=mask, lane="reference")
    single = ChainScores(*[p.detach().float().requires_grad_(True) for p in scores])
    lanes = ["factored", "reference"] + (["bounded"] if scale < 300 and not masked else [])
    for lane in lanes:
        log_z = crf_log_partition(scores, lengths, label_mask=mask, lane=lane)
        torch.testing.assert_close(log_z, ref_z, rtol=1e-12, atol=1e-9)
        for got, ref in zip(_grads(log_z, scores), ref_grads):
            torch.testing.assert_close(got, ref, rtol=1e-9, atol=1e-9)
        marg = crf_marginals(scores, lengths, label_mask=mask, lane=lane)
        torch.testing.assert_close(marg, ref_marg, rtol=1e-9, atol=1e-9)
        z32 = crf_log_partition(single, lengths, label_mask=mask, lane=lane)
        assert float(((z32.detach().double() - ref_z.detach()) / ref_z.detach().abs()).abs().max()) <= 1e-5
        for got, ref in zip(_grads(z32, single), ref_grads):
            assert float((got.double() - ref).abs().max()) <= 1e-4 * max(1.0, float(ref.abs().max()))
        marg32 = crf_marginals(single, lengths, label_mask=mask, lane=lane)
        assert float((marg32.double() - ref_marg).abs().max()) <= 1e-4
    if scale == 300 and not masked:
        with pytest.raises(ValueError, match="lane 'bounded' cannot take"):
            crf_log_partition(scores, lengths, lane="bounded")


def test_label_masks_gold_scores_and_empty_sentences():
    lengths = torch.tensor([5, 0, 3])
    scores = _scores(batch=3)
    potentials = scores.potentials(lengths)
    gen = torch.Generator().manual_seed(5)
    mask = torch.rand(3, 5, 3, generator=gen) < 0.6
    mask[:, :, 2] = True
    torch.testing.assert_close(crf_log_partition(scores, lengths, label_mask=mask),
                               crf_log_partition(potentials, lengths, label_mask=mask))
    torch.testing.assert_close(crf_marginals(scores, lengths, label_mask=mask),
                               crf_marginals(potentials.detach(), lengths, label_mask=mask))
    gold = torch.randint(3, (3, 5), generator=gen)
    one = torch.nn.functional.one_hot(gold, 3).bool()
    assert crf_lane(scores, lengths, label_mask=one) == "gold"
    got = crf_log_partition(scores, lengths, label_mask=one)
    ref = crf_log_partition(potentials, lengths, label_mask=one)
    torch.testing.assert_close(got, ref)
    torch.testing.assert_close(crf_score(scores, gold, lengths), crf_score(potentials, gold, lengths))
    assert got[1].item() == 0.0
    for a, b in zip(_grads(got, scores), _grads(ref, scores)):
        torch.testing.assert_close(a, b)


def test_a_token_without_an_allowed_label_makes_its_sentence_impossible():
    lengths = torch.tensor(LENGTHS)
    scores = _scores()
    mask = torch.ones(len(LENGTHS), 5, 3, dtype=torch.bool)
    mask[0, 2] = False
    log_z = crf_log_partition(scores, lengths, label_mask=mask)
    assert log_z[0].item() == float("-inf") and bool(torch.isfinite(log_z[1:]).all())
    marg = crf_marginals(scores, lengths, label_mask=mask)
    assert torch.all(marg[0] == 0) and torch.allclose(marg[1, :2].sum(-1), torch.ones(2, dtype=torch.float64))


def test_bad_inputs_are_rejected_with_a_clear_message():
    lengths = torch.tensor(LENGTHS)
    scores = _scores()
    bad = scores.emissions.detach().clone()
    bad[3, 0, 1] = float("nan")
    with pytest.raises(ValueError, match=r"sentence 3: potentials\[3, 0, "):
        crf_log_partition(scores._replace(emissions=bad), lengths)
    with pytest.raises(ValueError, match="transitions must be"):
        crf_log_partition(scores._replace(transitions=torch.zeros(3, 4, dtype=torch.float64)), lengths)
    with pytest.raises(ValueError, match="float32 or float64"):
        crf_log_partition(scores._replace(emissions=scores.emissions.detach().half()), lengths)
    with pytest.raises(TypeError, match="lengths must be an integer torch.Tensor"):
        crf_log_partition(scores, LENGTHS)


def test_forbidden_transitions_keep_the_fast_path_and_its_exactness():
    """-inf transitions (BIO-style constraints) are exact zeros of E, not an underflow."""
    scores, lengths = _scores(m=4, seed=3), torch.tensor(LENGTHS)
    transitions = scores.transitions.detach().clone()
    transitions[0, 2] = transitions[3, 1] = float("-inf")
    scores = scores._replace(transitions=transitions.requires_grad_(True))
    assert _took_fast_path(scores, lengths)
    log_z = crf_log_partition(scores, lengths)
    ref = crf_log_partition(scores.potentials(lengths), lengths)
    torch.testing.assert_close(log_z, ref, rtol=1e-12, atol=1e-12)
    for got, expected in zip(_grads(log_z, scores), _grads(ref, scores)):
        torch.testing.assert_close(got, expected, rtol=1e-12, atol=1e-12)


def _redone_rows(scores, lengths):
    """The sentences the factored lane hands to the potentials (a list), or None if it hands them all."""
    rows = chain_factored.untrusted(_fast(scores, lengths))
    return None if rows is None else rows.tolist()


@pytest.mark.parametrize("scale", [10.0, 12.0, 30.0, 60.0])
def test_mid_scales_take_the_fast_path_exactly(scale):
    """Transitions of std 10 and more span more than -log THETA per column, yet the underflow bound trusts
    every sentence (float32 arithmetic up to std ~12, float64 beyond): float32 log Z and marginals match
    float64, and the gradients of emissions, transitions and start match the potentials' path (float64)
    and finite differences."""
    gen = torch.Generator().manual_seed(int(scale))
    batch, n, m = 16, 20, 9
    lengths = torch.randint(1, n + 1, (batch,), generator=gen)
    shapes = ((batch, n, m), (m, m), (m,), (m,))
    parts = [scale * torch.randn(*shape, generator=gen, dtype=torch.float64) for shape in shapes]
    assert float((parts[1].amax(0) - parts[1].amin(0)).amax()) > 44.0  # the old check would have stepped aside
    scores = ChainScores(*[p.clone().requires_grad_(True) for p in parts])
    single = ChainScores(*[p.float().requires_grad_(True) for p in parts])
    assert _redone_rows(scores, lengths) == [] and _redone_rows(single, lengths) == []
    assert _working_dtype(single, lengths) == (torch.float32 if scale < 20 else torch.float64)

    potentials = scores.potentials(lengths)
    ref_z = crf_log_partition(potentials, lengths)
    ref_grads = _grads(ref_z, scores)
    log_z = crf_log_partition(scores, lengths)
    torch.testing.assert_close(log_z, ref_z, rtol=1e-12, atol=1e-9)
    for got, ref in zip(_grads(log_z, scores), ref_grads):
        torch.testing.assert_close(got, ref, rtol=1e-9, atol=1e-9)

    z32 = crf_log_partition(single, lengths)
    assert float(((z32.detach().double() - ref_z.detach()) / ref_z.detach().abs()).abs().max()) <= 1e-5
    ref_marg = crf_marginals(potentials.detach(), lengths)
    assert float((crf_marginals(single, lengths).double() - ref_marg).abs().max()) <= 1e-4
    for got, ref in zip(_grads(z32, single), ref_grads):
        assert float((got.double() - ref).abs().max()) <= 1e-4 * max(1.0, float(ref.abs().max()))

    few = lengths[:3]  # finite differences on a smaller batch (also all on the fast path)
    assert _redone_rows(ChainScores(parts[0][:3], *parts[1:]), few) == []
    leaves = [parts[0][:3].clone().requires_grad_(True), parts[1].clone().requires_grad_(True),
              parts[2].clone().requires_grad_(True)]
    assert torch.autograd.gradcheck(lambda e, t, s: crf_log_partition(ChainScores(e, t, s, parts[3]), few), leaves)


def test_mixed_scales_on_the_factored_lane():
    """Sentences of very different scales in one batch (emissions of std 1 and 1e3, transitions of std 10):
    log Z, the gradients and the marginals of the factored lane as the reference gives them on the
    potentials, whichever sentences the lane hands to the potentials."""
    scores, lengths = _scores(10.0, m=4, seed=4), torch.tensor(LENGTHS)
    emissions = scores.emissions.detach().clone()
    emissions[1] *= 1e3
    emissions[3] *= 1e3
    scores = scores._replace(emissions=emissions.requires_grad_(True))
    expected_z = crf_log_partition(scores.potentials(lengths), lengths, lane="reference")
    expected_grads = _grads(expected_z, scores)
    log_z = crf_log_partition(scores, lengths, lane="factored")
    torch.testing.assert_close(log_z, expected_z, rtol=1e-12, atol=1e-9)
    for got, ref in zip(_grads(log_z, scores), expected_grads):
        torch.testing.assert_close(got, ref, rtol=1e-9, atol=1e-9)
    torch.testing.assert_close(crf_marginals(scores, lengths, lane="factored"),
                               crf_marginals(scores.potentials(lengths).detach(), lengths, lane="reference"),
                               rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("n, std", [(30, 300), (60, 300)])
def test_float32_marginals_beyond_the_fast_path_at_a_realistic_size(n, std):
    """Issue 12: ChainScores whose transitions span too much for the fast path (std ~150 and more) run the
    general path; B=32, M=17, random lengths, float32 against float64: log Z relative 1e-5, marginals
    absolute 1e-4 (2.7e-4 at n=60 before the general path kept alpha and beta relative to per-token shifts)."""
    gen = torch.Generator().manual_seed(n + std)
    batch, m = 32, 17
    lengths = torch.randint(1, n + 1, (batch,), generator=gen)
    tensors = [std * torch.randn(*shape, generator=gen) for shape in ((batch, n, m), (m, m), (m,), (m,))]
    ref_z, ref_marg = chain_reference(ChainScores(*(x.double() for x in tensors)).potentials(lengths), lengths)
    scores = ChainScores(*tensors)
    np.testing.assert_allclose(crf_log_partition(scores, lengths).double().numpy(), ref_z.numpy(), rtol=1e-5)
    assert float((crf_marginals(scores, lengths).double() - ref_marg).abs().max()) <= 1e-4


@pytest.mark.parametrize("lane", ["compiled", "reference"])
@pytest.mark.parametrize("masked", [False, True])
@pytest.mark.parametrize("start_end", [True, False])
def test_viterbi_lanes_forced_against_enumeration(lane, masked, start_end):
    """Each Viterbi lane, forced: the best labels and score of every sentence (lengths 0 to 5, a label
    mask with a token that allows nothing) against enumeration in float64."""
    lengths = torch.tensor([5, 2, 4, 1, 0, 3])
    scores = _scores(start_end=start_end, batch=6, seed=3, m=4)
    mask = None
    if masked:
        mask = torch.rand(6, 5, 4, generator=torch.Generator().manual_seed(4)) < 0.6
        mask[:, :, 2] = True
        mask[5, 1] = False  # sentence 5: no tree of labels, score -inf
    labels, heads, best = crf_viterbi(scores, lengths, label_mask=mask, lane=lane)
    assert heads is None
    potentials = scores.potentials(lengths).detach().numpy()
    for b, length in enumerate(lengths.tolist()):
        if length == 0:
            assert best[b].item() == 0.0 and torch.all(labels[b] == 0)
            continue
        if mask is not None and not bool(mask[b, :length].any(-1).all()):  # a token allows nothing
            assert best[b].item() == -np.inf and torch.all(labels[b] == 0)
            continue
        _, ref_best, ref_labels, _ = enumerate_chain(potentials[b], length, None if mask is None else mask[b].numpy())
        assert best[b].item() == pytest.approx(ref_best, abs=1e-9)
        assert labels[b, :length].tolist() == ref_labels.tolist()
        assert torch.all(labels[b, length:] == 0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("ties", [False, True])
def test_compiled_viterbi_is_the_reference_bit_for_bit(dtype, ties):
    """At a tagger's size the compiled lane gives the reference's labels and scores exactly, in float32 and
    float64, also when scores tie everywhere (integer scores: the reference's first arg-max wins)."""
    gen = torch.Generator().manual_seed(5)
    batch, n, m = 64, 30, 25
    draw = lambda *shape: (torch.randint(-2, 3, shape, generator=gen).to(dtype) if ties  # noqa: E731
                           else 3.0 * torch.randn(*shape, generator=gen, dtype=dtype))
    scores = ChainScores(draw(batch, n, m), draw(m, m), draw(m), draw(m))
    lengths = torch.randint(0, n + 1, (batch,), generator=gen)
    compiled = crf_viterbi(scores, lengths, lane="compiled")
    reference = crf_viterbi(scores, lengths, lane="reference")
    assert compiled.score.dtype == dtype
    assert torch.equal(compiled.labels, reference.labels)
    assert torch.equal(compiled.score, reference.score)
    assert torch.equal(crf_viterbi(scores, lengths).labels, compiled.labels)  # the default on the CPU


def test_viterbi_lanes_reject_what_they_cannot_take():
    potentials = torch.randn(2, 3, 4, 4)
    with pytest.raises(ValueError, match="compiled"):
        crf_viterbi(potentials, torch.tensor([3, 1]), lane="compiled")
    with pytest.raises(ValueError, match="lane must be one of"):
        crf_viterbi(_scores(), torch.tensor(LENGTHS), lane="bounded")
    nan = _scores()
    with torch.no_grad():
        nan.emissions[1, 1, 2] = float("nan")
    with pytest.raises(ValueError, match="sentence 1"):
        crf_viterbi(nan, torch.tensor(LENGTHS), lane="compiled")
