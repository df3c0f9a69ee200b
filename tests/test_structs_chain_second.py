"""The second-order chain on factored scores (structs.SecondOrderScores, lane ``trigram``): exact against
enumeration and against the potentials' lanes, in float32 at any scale the lane takes, gradients against
finite differences, label masks, impossible and empty sentences, and the hand-over of wide trigrams."""
import numpy as np
import pytest
import torch

from brute import enumerate_chain
from spacy_nldm.structs import (
    SecondOrderScores, crf_lane, crf_log_partition, crf_marginals, crf_score, crf_viterbi,
)
from spacy_nldm.structs import chain_second

LENGTHS = [5, 2, 4, 1, 0]


def _scores(scale=1.0, m=3, n=5, batch=len(LENGTHS), seed=0, dtype=torch.float64, trigram_scale=None):
    g = torch.Generator().manual_seed(seed)
    E = torch.randn(batch, n, m, generator=g, dtype=torch.float64) * scale
    W = torch.randn(m + 1, m + 1, m, generator=g, dtype=torch.float64) * (scale if trigram_scale is None else trigram_scale)
    return SecondOrderScores(E.to(dtype).requires_grad_(True), W.to(dtype).requires_grad_(True))


def test_against_enumeration_with_a_label_mask():
    scores, lengths = _scores(), torch.tensor(LENGTHS)
    mask = torch.ones(len(LENGTHS), 5, 3, dtype=torch.bool)
    mask[0, 2, 1:] = False  # token 2 of sentence 0: label 0 only
    mask[2, 0, 0] = False
    assert crf_lane(scores, lengths, label_mask=mask) == "trigram"
    log_z = crf_log_partition(scores, lengths, label_mask=mask)
    marg = crf_marginals(scores, lengths, label_mask=mask)
    found = crf_viterbi(scores, lengths, label_mask=mask)
    potentials = scores.potentials(lengths).detach().numpy()
    for b, n in enumerate(LENGTHS):
        if n == 0:
            assert float(log_z[b]) == 0.0 and float(found.score[b]) == 0.0
            continue
        ref_z, ref_best, ref_labels, ref_marg = enumerate_chain(potentials[b], n, mask[b].numpy())
        assert float(log_z[b].detach()) == pytest.approx(ref_z, rel=1e-12)
        np.testing.assert_allclose(marg[b, :n].numpy(), ref_marg, atol=1e-12)
        assert found.labels[b, :n].tolist() == ref_labels.tolist()
        assert float(found.score[b]) == pytest.approx(ref_best, rel=1e-12)
        assert float(crf_score(scores, found.labels, lengths)[b].detach()) == pytest.approx(ref_best, rel=1e-12)


@pytest.mark.parametrize("scale, trigram_scale", [(0.5, 0.5), (5.0, 5.0), (20.0, 20.0), (1000.0, 20.0)])
def test_float32_matches_the_potentials_lanes_in_float64(scale, trigram_scale):
    """log Z, gradients (emissions and trigram), marginals and Viterbi against the order-2 potentials
    (the reference) in float64; emissions of any scale, trigrams of std up to 20 (spanning ~100 nats,
    inside SPAN)."""
    lengths = torch.randint(1, 21, (12,), generator=torch.Generator().manual_seed(3))
    ref = _scores(scale, m=6, n=20, batch=12, seed=int(scale), trigram_scale=trigram_scale)
    ours = SecondOrderScores(*(x.detach().float().requires_grad_(True) for x in ref))
    assert crf_lane(ours, lengths) == "trigram"
    pot = ref.potentials(lengths)
    assert crf_lane(pot, lengths) == "reference"
    want = crf_log_partition(pot, lengths)
    got = crf_log_partition(ours, lengths)
    torch.testing.assert_close(got.double(), want.detach(), rtol=1e-6, atol=1e-5)
    want_grads = torch.autograd.grad(want.sum(), list(ref))
    got_grads = torch.autograd.grad(got.sum(), list(ours))
    for g, w in zip(got_grads, want_grads):
        torch.testing.assert_close(g.double(), w, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(crf_marginals(ours, lengths).double(), crf_marginals(pot.detach(), lengths),
                               rtol=1e-4, atol=1e-5)
    assert torch.equal(crf_viterbi(ours, lengths).labels, crf_viterbi(pot.detach(), lengths).labels)


def test_gradients_against_finite_differences():
    scores, lengths = _scores(2.0), torch.tensor(LENGTHS)
    assert torch.autograd.gradcheck(lambda E, W: crf_log_partition(SecondOrderScores(E, W), lengths), tuple(scores))


def test_wide_trigrams_go_to_the_potentials_and_agree():
    """A trigram spanning more than SPAN nats takes the reference on its potentials (exact at any
    scale); forcing the trigram lane on it is refused."""
    scores, lengths = _scores(1.0, trigram_scale=200.0, seed=2), torch.tensor(LENGTHS)
    assert not chain_second.takes(scores)
    assert crf_lane(scores, lengths) == "reference"
    with pytest.raises(ValueError, match="spans at most"):
        crf_log_partition(scores, lengths, lane="trigram")
    torch.testing.assert_close(crf_log_partition(scores, lengths), crf_log_partition(scores.potentials(lengths), lengths))
    narrow = _scores(1.0, seed=2)
    torch.testing.assert_close(crf_log_partition(narrow, lengths, lane="trigram"),
                               crf_log_partition(narrow, lengths, lane="reference"))


def test_a_token_without_an_allowed_label_makes_log_z_minus_infinity():
    scores, lengths = _scores(), torch.tensor(LENGTHS)
    mask = torch.ones(len(LENGTHS), 5, 3, dtype=torch.bool)
    mask[1, 1] = False  # sentence 1 (2 tokens): its second token allows nothing
    mask[4, 0] = False  # beyond sentence 4's length (0): no effect
    log_z = crf_log_partition(scores, lengths, label_mask=mask)
    assert float(log_z[1]) == -np.inf and bool(torch.isfinite(log_z[[0, 2, 3]]).all()) and float(log_z[4]) == 0.0
    marg = crf_marginals(scores, lengths, label_mask=mask)
    assert float(marg[1].abs().sum()) == 0.0
    found = crf_viterbi(scores, lengths, label_mask=mask)
    assert float(found.score[1]) == -np.inf and found.labels[1].tolist() == [0] * 5


def test_the_potentials_are_the_order_2_layout():
    """potentials()[b, t, a, p, c] = emissions[b, t, c] + trigram[A, P, c] with A, P the start state (0)
    before the sentence and 1 + label after."""
    E, W = _scores(m=2, n=3, batch=1)
    pot = SecondOrderScores(E, W).potentials()
    for a in range(2):
        for p in range(2):
            for c in range(2):
                assert float(pot[0, 0, a, p, c]) == float(E[0, 0, c] + W[0, 0, c])
                assert float(pot[0, 1, a, p, c]) == float(E[0, 1, c] + W[0, 1 + p, c])
                assert float(pot[0, 2, a, p, c]) == float(E[0, 2, c] + W[1 + a, 1 + p, c])
