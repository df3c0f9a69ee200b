"""The distance bias of DirectionalScores: a score per arc direction and length (2, K), read in compact form,
against its definition on the dense arc tensor (by loops), on every lane and at large scales."""
import pytest
import torch

from brute import enumerate_tree_model, expand_directional
from spacy_nldm.structs import DirectionalScores, log_partition, marginals, viterbi

LENGTHS = [5, 2, 6, 1, 4]  # a padded batch, N = 6


def dense_with_bias(F, bias):
    """Definition, by loops: the dense arc scores of F plus bias[0 if h < d else 1, min(|h - d|, K) - 1] on
    every arc h -> d between tokens (root arcs get none)."""
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


def inputs(seed, k, scale=1.0, dtype=torch.float64, m=3):
    gen = torch.Generator().manual_seed(seed)
    F = scale * torch.randn(len(LENGTHS), max(LENGTHS), 2, m + 1, m, generator=gen, dtype=dtype)
    bias = scale * torch.randn(2, k, generator=gen, dtype=dtype)
    return F.requires_grad_(True), bias.requires_grad_(True)


def random_masks(seed, m=3):
    gen = torch.Generator().manual_seed(seed)
    n = max(LENGTHS)
    label_mask = torch.rand(len(LENGTHS), n + 1, m, generator=gen) < 0.6
    label_mask[..., 0] = True  # every position keeps a label
    arc_mask = torch.rand(len(LENGTHS), n + 1, n + 1, generator=gen) < 0.7
    arc_mask[:, 0, 1:] = True  # and a tree
    return label_mask, arc_mask


@pytest.mark.parametrize("max_dist,k", [(None, 2), (None, 6), (1, 1), (2, 3), (3, 3)])
def test_distance_bias_equals_its_dense_definition(max_dist, k):
    """log Z, the gradients of F and of the bias, Viterbi and marginals from the compact form equal those
    of the dense tensor with the bias added arc by arc, with and without masks (without: on the compiled lane
    and on the reference)."""
    lengths = torch.tensor(LENGTHS)
    F, bias = inputs(seed=60 + k, k=k)
    label_mask, arc_mask = random_masks(seed=61)
    for kw in (dict(), dict(arc_mask=arc_mask), dict(label_mask=label_mask), dict(lane="reference")):
        _check_against_dense(F, bias, lengths, max_dist, kw)


def _check_against_dense(F, bias, lengths, max_dist, kw):
    """One comparison of the compact form with the dense definition, with the masks in ``kw``."""
    dense = dense_with_bias(F, bias)
    lane = kw.pop("lane", None)
    want = log_partition(dense, lengths, max_dist=max_dist, **kw)
    got = log_partition(DirectionalScores(F, bias), lengths, max_dist=max_dist, lane=lane, **kw)
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
    marg = marginals(DirectionalScores(F, bias), lengths, max_dist=max_dist, lane=lane, **kw)
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


@pytest.mark.parametrize("lane", ["compiled", "reference"])
@pytest.mark.parametrize("scale", [1.0, 30.0, 300.0])
def test_distance_bias_is_exact_in_float32(scale, lane):
    """float32 against float64, bias and scores at the same scale: log Z relative 1e-5, marginals 1e-4."""
    lengths = torch.tensor(LENGTHS)
    F, bias = inputs(seed=80, k=3, scale=scale)
    want = log_partition(DirectionalScores(F.detach(), bias.detach()), lengths, max_dist=4, lane="reference")
    got = log_partition(DirectionalScores(F.detach().float(), bias.detach().float()), lengths, max_dist=4, lane=lane)
    torch.testing.assert_close(got.double(), want, rtol=1e-5, atol=0)
    want_m = marginals(DirectionalScores(F.detach(), bias.detach()), lengths, max_dist=4, lane="reference").labels
    got_m = marginals(DirectionalScores(F.detach().float(), bias.detach().float()), lengths, max_dist=4,
                      lane=lane).labels
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
    for bad in (torch.zeros(3, 2), torch.zeros(2, 0), torch.zeros(2, 2, 2, 2), torch.zeros(2, 2, 2)):
        with pytest.raises(ValueError, match=r"distance_bias must have shape \(2, K\)"):
            DirectionalScores(F, bad)
    with pytest.raises(ValueError, match="distance_bias must be finite"):
        log_partition(DirectionalScores(F, torch.tensor([[0.0, float("nan")], [0.0, 0.0]])), torch.tensor([3]))
