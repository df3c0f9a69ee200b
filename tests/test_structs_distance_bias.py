"""The distance bias of DirectionalScores: a score per arc direction and length (2, K), or per direction,
length and label pair (2, K, M, M), read in compact form, against its definition on the dense arc tensor (by
loops), in both chart spaces and at large scales."""
import contextlib

import pytest
import torch

from brute import enumerate_tree_model, expand_directional, torch_lane
from spacy_nldm.structs import DirectionalScores, log_partition, marginals, viterbi

LENGTHS = [5, 2, 6, 1, 4]  # a padded batch, N = 6


def dense_with_bias(F, bias):
    """Definition, by loops: the dense arc scores of F plus bias[0 if h < d else 1, min(|h - d|, K) - 1] on
    every arc h -> d between tokens (root arcs get none); a label-pair bias adds its [.., a, c] to the arc's
    scores[b, h, d, a, c]."""
    scores = expand_directional(F)
    k, m = bias.shape[1], F.shape[-1]
    n = F.shape[1]
    rows = []
    for h in range(n + 1):
        row = []
        for d in range(n + 1):
            if h == 0 or d == 0 or h == d:
                row.append(bias.new_zeros(m, m))
            else:
                row.append(bias[0 if h < d else 1, min(abs(h - d), k) - 1].expand(m, m))
        rows.append(torch.stack(row))
    return scores + torch.stack(rows)[None]


def inputs(seed, k, scale=1.0, dtype=torch.float64, m=3, labelled=False):
    gen = torch.Generator().manual_seed(seed)
    F = scale * torch.randn(len(LENGTHS), max(LENGTHS), 2, m + 1, m, generator=gen, dtype=dtype)
    bias = scale * torch.randn(2, k, *((m, m) if labelled else ()), generator=gen, dtype=dtype)
    return F.requires_grad_(True), bias.requires_grad_(True)


def random_masks(seed, m=3):
    gen = torch.Generator().manual_seed(seed)
    n = max(LENGTHS)
    label_mask = torch.rand(len(LENGTHS), n + 1, m, generator=gen) < 0.6
    label_mask[..., 0] = True  # every position keeps a label
    arc_mask = torch.rand(len(LENGTHS), n + 1, n + 1, generator=gen) < 0.7
    arc_mask[:, 0, 1:] = True  # and a tree
    return label_mask, arc_mask


@pytest.mark.parametrize("labelled", [False, True])
@pytest.mark.parametrize("max_dist,k", [(None, 2), (None, 6), (1, 1), (2, 3), (3, 3)])
def test_distance_bias_equals_its_dense_definition(max_dist, k, labelled, space):
    """log Z, the gradients of F and of the bias, Viterbi and marginals from the compact form equal those
    of the dense tensor with the bias added arc by arc, with and without masks (without: on the compiled lane
    and on the torch stages)."""
    lengths = torch.tensor(LENGTHS)
    F, bias = inputs(seed=60 + k, k=k, labelled=labelled)
    label_mask, arc_mask = random_masks(seed=61)
    as_dispatched = contextlib.nullcontext  # the lane log_partition picks; torch_lane: the torch stages
    for lane, kw in ((as_dispatched, dict()), (as_dispatched, dict(arc_mask=arc_mask)),
                     (as_dispatched, dict(label_mask=label_mask)), (torch_lane, dict())):
        with lane():
            _check_against_dense(F, bias, lengths, max_dist, kw)


def _check_against_dense(F, bias, lengths, max_dist, kw):
    """One comparison of the compact form with the dense definition, with the masks in ``kw``."""
    dense = dense_with_bias(F, bias)
    want = log_partition(dense, lengths, max_dist=max_dist, **kw)
    got = log_partition(DirectionalScores(F, bias), lengths, max_dist=max_dist, **kw)
    torch.testing.assert_close(got, want)
    want_grads = torch.autograd.grad(want.sum(), (F, bias))
    got_grads = torch.autograd.grad(got.sum(), (F, bias))
    for g, w in zip(got_grads, want_grads):
        torch.testing.assert_close(g, w)
    best_dense = viterbi(dense.detach(), lengths, max_dist=max_dist, **kw)
    best = viterbi(DirectionalScores(F, bias), lengths, max_dist=max_dist, **kw)
    torch.testing.assert_close(best.score, best_dense.score)
    assert torch.equal(best.labels, best_dense.labels) and torch.equal(best.heads, best_dense.heads)
    marg_dense = marginals(dense.detach(), lengths, max_dist=max_dist, **kw)
    marg = marginals(DirectionalScores(F, bias), lengths, max_dist=max_dist, **kw)
    torch.testing.assert_close(marg.labels, marg_dense.labels)


def test_distance_bias_log_partition_against_enumeration():
    """log Z with a bias, against the sum over every labelled projective tree (a bias that only the
    short arcs of one direction carry changes log Z: the test would see a bias read in the wrong place)."""
    F, _ = inputs(seed=70, k=2, m=2)
    bias = torch.tensor([[1.5, -2.0], [0.3, 0.7]], dtype=torch.float64)
    lengths = torch.tensor(LENGTHS)
    got = log_partition(DirectionalScores(F, bias), lengths, max_dist=3)
    dense = dense_with_bias(F, bias).detach()
    for b, n in enumerate(LENGTHS):
        log_z = enumerate_tree_model(dense[b, : n + 1, : n + 1].numpy(), n, max_dist=3)[0]
        assert abs(float(got[b]) - float(log_z)) < 1e-9
    assert not torch.allclose(got, log_partition(DirectionalScores(F), lengths, max_dist=3))


@pytest.mark.parametrize("labelled", [False, True])
@pytest.mark.parametrize("scale", [1.0, 30.0, 300.0])
def test_distance_bias_is_exact_in_float32(scale, labelled, space):
    """float32 against float64, bias and scores at the same scale: log Z relative 1e-5, marginals 1e-4."""
    lengths = torch.tensor(LENGTHS)
    F, bias = inputs(seed=80, k=3, scale=scale, labelled=labelled)
    want = log_partition(DirectionalScores(F.detach(), bias.detach()), lengths, max_dist=4)
    got = log_partition(DirectionalScores(F.detach().float(), bias.detach().float()), lengths, max_dist=4)
    torch.testing.assert_close(got.double(), want, rtol=1e-5, atol=0)
    want_m = marginals(DirectionalScores(F.detach(), bias.detach()), lengths, max_dist=4).labels
    got_m = marginals(DirectionalScores(F.detach().float(), bias.detach().float()), lengths, max_dist=4).labels
    torch.testing.assert_close(got_m.double(), want_m, rtol=0, atol=1e-4)


def test_distance_bias_cancels_without_label_interactions():
    """With scores that ignore the head label and direction (emissions only), every label sequence has
    the same trees, so the bias cancels: the label marginals are a softmax over the emissions."""
    gen = torch.Generator().manual_seed(90)
    emissions = torch.randn(len(LENGTHS), max(LENGTHS), 3, generator=gen, dtype=torch.float64)
    F = emissions[:, :, None, None, :].expand(-1, -1, 2, 4, -1).contiguous()
    bias = torch.tensor([[2.0, -1.0, 0.5], [-3.0, 1.0, 0.0]], dtype=torch.float64)
    lengths = torch.tensor(LENGTHS)
    probs = marginals(DirectionalScores(F, bias), lengths, max_dist=3).labels
    for b, n in enumerate(LENGTHS):
        torch.testing.assert_close(probs[b, :n], emissions[b, :n].softmax(-1))


def test_distance_bias_checks():
    F = torch.zeros(1, 3, 2, 3, 2)
    for bad in (torch.zeros(3, 2), torch.zeros(2, 0), torch.zeros(2, 2, 3, 3), torch.zeros(2, 2, 2)):
        with pytest.raises(ValueError, match=r"distance_bias must have shape \(2, K\) or \(2, K, M, M\)"):
            DirectionalScores(F, bad)
    DirectionalScores(F, torch.zeros(2, 2, 2, 2))
    with pytest.raises(ValueError, match="distance_bias must be finite"):
        log_partition(DirectionalScores(F, torch.tensor([[0.0, float("nan")], [0.0, 0.0]])), torch.tensor([3]))


@pytest.mark.parametrize("lane", [contextlib.nullcontext, torch_lane])
def test_label_pair_bias_log_partition_against_enumeration(lane, space):
    """log Z and its gradient with a label-pair bias, against the sum over every labelled projective tree
    (each label pair of each length and direction scored apart: a bias read with its labels swapped, or in
    the other direction, would change log Z), on the compiled lane and the torch stages."""
    with lane():
        _label_pair_bias_against_enumeration()


def _label_pair_bias_against_enumeration():
    F, _ = inputs(seed=71, k=2, m=2)
    gen = torch.Generator().manual_seed(72)
    bias = (2 * torch.randn(2, 2, 2, 2, generator=gen, dtype=torch.float64)).requires_grad_(True)
    lengths = torch.tensor(LENGTHS)
    got = log_partition(DirectionalScores(F, bias), lengths, max_dist=3)
    dense = dense_with_bias(F, bias).detach()
    for b, n in enumerate(LENGTHS):
        log_z = enumerate_tree_model(dense[b, : n + 1, : n + 1].numpy(), n, max_dist=3)[0]
        assert abs(float(got[b].detach()) - float(log_z)) < 1e-9
    swapped = bias.detach().transpose(-1, -2).contiguous()
    assert not torch.allclose(got, log_partition(DirectionalScores(F, swapped), lengths, max_dist=3))
    # the gradient of the bias against finite differences
    (grad,) = torch.autograd.grad(got.sum(), bias)
    eps = 1e-6
    for index in [(0, 0, 0, 1), (1, 1, 1, 0), (1, 0, 0, 0), (0, 1, 1, 1)]:
        step = torch.zeros_like(bias)
        step[index] = eps
        up = log_partition(DirectionalScores(F.detach(), bias.detach() + step), lengths, max_dist=3).sum()
        down = log_partition(DirectionalScores(F.detach(), bias.detach() - step), lengths, max_dist=3).sum()
        assert float(grad[index]) == pytest.approx(float(up - down) / (2 * eps), abs=1e-6)


@pytest.mark.parametrize("lane", [contextlib.nullcontext, torch_lane])
def test_a_label_pair_bias_equal_for_every_pair_is_the_length_bias(lane, space):
    """A (2, K, M, M) bias with one value per length and direction gives what the (2, K) bias gives: log Z,
    marginals and Viterbi; its gradient, summed over the label pairs, is the (2, K) bias's."""
    with lane():
        _equal_pairs_are_the_length_bias()


def _equal_pairs_are_the_length_bias():
    lengths = torch.tensor(LENGTHS)
    F, bias = inputs(seed=73, k=3)
    wide = bias.detach()[:, :, None, None].expand(2, 3, 3, 3).clone().requires_grad_(True)
    plain = log_partition(DirectionalScores(F, bias), lengths, max_dist=3)
    labelled = log_partition(DirectionalScores(F, wide), lengths, max_dist=3)
    torch.testing.assert_close(labelled, plain)
    torch.testing.assert_close(torch.autograd.grad(labelled.sum(), wide)[0].sum((-1, -2)),
                               torch.autograd.grad(plain.sum(), bias)[0])
    best, best_wide = (viterbi(DirectionalScores(F, b), lengths, max_dist=3) for b in (bias, wide))
    assert torch.equal(best.labels, best_wide.labels) and torch.equal(best.heads, best_wide.heads)
    torch.testing.assert_close(marginals(DirectionalScores(F, wide), lengths, max_dist=3).labels,
                               marginals(DirectionalScores(F, bias), lengths, max_dist=3).labels)
