"""The NLDM with the chain factor (structs.tree_chain): log Z, label marginals and the chain's expected pair
counts against enumeration over labels and trees; with a zero chain, the NLDM's log Z; the structure's loss."""
import itertools

import numpy as np
import pytest
import torch

from spacy_nldm import structs
from spacy_nldm.models.structure import LatentTree
from spacy_nldm.structs.tree_chain import (
    chain_gold_score, tree_chain_label_marginals, tree_chain_log_partition,
)

from brute import projective_trees


def enumerate_tree_chain(F, trans, n, max_dist, bias):
    """One sentence: (log Z, label marginals (n, M), expected pair counts like trans) by enumeration."""
    M = F.shape[-1]
    totals, labelings = [], []
    for labels in itertools.product(range(M), repeat=n):
        chain = sum(trans[0 if t == 0 else labels[t - 1] + 1, labels[t]] for t in range(n))
        for heads in projective_trees(n):
            if max_dist is not None and any(abs(h - d) > max_dist for d, h in enumerate(heads, start=1)):
                continue
            score = chain
            for d, h in enumerate(heads, start=1):
                score += F[d - 1, 0 if h < d else 1, 0 if h == 0 else labels[h - 1] + 1, labels[d - 1]]
                if bias is not None and h > 0:
                    score += bias[0 if h < d else 1, min(abs(h - d), bias.shape[1]) - 1]
            totals.append(score)
            labelings.append(labels)
    totals = np.array(totals)
    log_z = totals.max() + np.log(np.exp(totals - totals.max()).sum())
    probs = np.exp(totals - log_z)
    marginals, pairs = np.zeros((n, M)), np.zeros_like(trans)
    for p, labels in zip(probs, labelings):
        for t, label in enumerate(labels):
            marginals[t, label] += p
            pairs[0 if t == 0 else labels[t - 1] + 1, label] += p
    return log_z, marginals, pairs


CASES = [(None, False), (2, True), (3, False), (1, True)]


@pytest.mark.parametrize("max_dist,with_bias", CASES)
def test_against_enumeration(max_dist, with_bias):
    torch.manual_seed(0)
    B, N, M = 4, 4, 3 if max_dist != 2 else 2
    F = torch.randn(B, N, 2, M + 1, M, dtype=torch.float64)
    trans = torch.randn(M + 1, M, dtype=torch.float64, requires_grad=True)
    bias = torch.randn(2, 2, dtype=torch.float64) if with_bias else None
    lengths = torch.tensor([1, 2, 3, 4])
    log_z = tree_chain_log_partition(F, trans, lengths, max_dist=max_dist, distance_bias=bias)
    marginals = tree_chain_label_marginals(F, trans, lengths, max_dist=max_dist, distance_bias=bias)
    for b, n in enumerate(lengths.tolist()):
        ref_z, ref_marginals, ref_pairs = enumerate_tree_chain(
            F[b].numpy(), trans.detach().numpy(), n, max_dist, None if bias is None else bias.numpy())
        assert float(log_z[b].detach()) == pytest.approx(ref_z, abs=1e-10)
        assert np.allclose(marginals[b, :n].numpy(), ref_marginals, atol=1e-10)
        assert np.allclose(marginals[b, n:].numpy(), 0.0)
        (pairs,) = torch.autograd.grad(log_z[b], trans, retain_graph=True)  # expected counts of the pairs
        assert np.allclose(pairs.numpy(), ref_pairs, atol=1e-10)


@pytest.mark.parametrize("max_dist", [None, 1, 3])
def test_zero_chain_is_the_nldm(max_dist):
    torch.manual_seed(1)
    B, N, M = 3, 9, 4
    F = torch.randn(B, N, 2, M + 1, M, dtype=torch.float64) * 3
    bias = torch.randn(2, 3, dtype=torch.float64)
    lengths = torch.tensor([9, 5, 1])
    ours = tree_chain_log_partition(F, torch.zeros(M + 1, M, dtype=torch.float64), lengths, max_dist=max_dist,
                                    distance_bias=bias)
    nldm = structs.log_partition(structs.DirectionalScores(F, bias), lengths, max_dist=max_dist)
    assert torch.allclose(ours, nldm, atol=1e-9, rtol=0)


def test_large_scores():
    """Scores of std 30 (beyond a trained model's): the shifted exp-space contractions lose no mass (a zero
    chain gives the NLDM's exact log Z) and the marginals stay distributions."""
    torch.manual_seed(2)
    F = torch.randn(2, 12, 2, 6, 5) * 30
    lengths = torch.tensor([12, 7])
    ours = tree_chain_log_partition(F, torch.zeros(6, 5), lengths, max_dist=3)
    nldm = structs.log_partition(structs.DirectionalScores(F.double()), lengths, max_dist=3)
    assert torch.allclose(ours, nldm, rtol=1e-9, atol=0)
    trans = torch.randn(6, 5) * 30
    assert torch.isfinite(tree_chain_log_partition(F, trans, lengths, max_dist=3)).all()
    marginals = tree_chain_label_marginals(F, trans, lengths, max_dist=3)
    assert torch.allclose(marginals.sum(-1)[0], torch.ones(12), atol=1e-5)


def test_structure_loss_with_the_chain():
    """LatentTree's loss with the chain: a zero chain gives the NLDM's loss (with label smoothing too), and the
    chain's gradient matches finite differences of the loss."""
    torch.manual_seed(3)
    S, L, M = 3, 6, 4
    F = torch.randn(S, L, 2, M + 1, M, dtype=torch.float64)
    lengths = torch.tensor([6, 4, 2])
    gold = torch.nn.functional.one_hot(torch.randint(0, M, (S, L)), M).bool()
    bias = torch.randn(2, 3, dtype=torch.float64)
    for smoothing in (0.0, 0.2):
        plain = LatentTree(max_dist=3, distance_bias=bias).nll(F, lengths, gold, smoothing=smoothing)
        zero = LatentTree(max_dist=3, distance_bias=bias, chain=torch.zeros(M + 1, M, dtype=torch.float64))
        assert float(zero.nll(F, lengths, gold, smoothing=smoothing)) == pytest.approx(float(plain), abs=1e-9)
    chain = torch.randn(M + 1, M, dtype=torch.float64, requires_grad=True)
    loss = LatentTree(max_dist=3, distance_bias=bias, chain=chain).nll(F, lengths, gold, smoothing=0.2)
    (grad,) = torch.autograd.grad(loss, chain)
    eps = 1e-6
    for index in [(0, 1), (2, 3), (4, 0)]:
        step = torch.zeros_like(chain)
        step[index] = eps
        up = LatentTree(max_dist=3, distance_bias=bias, chain=chain.detach() + step).nll(
            F, lengths, gold, smoothing=0.2)
        down = LatentTree(max_dist=3, distance_bias=bias, chain=chain.detach() - step).nll(
            F, lengths, gold, smoothing=0.2)
        assert float(grad[index]) == pytest.approx(float(up - down) / (2 * eps), abs=1e-6)


def test_gold_score_and_refusals():
    trans = torch.arange(12.0).reshape(4, 3)
    labels = torch.tensor([[2, 0, 1], [1, 1, 0]])
    expected = torch.stack([trans[0, 2] + trans[3, 0] + trans[1, 1], trans[0, 1] + trans[2, 1]])
    assert torch.equal(chain_gold_score(trans, labels, torch.tensor([3, 2])), expected)
    tree = LatentTree(max_dist=3, chain=torch.zeros(4, 3))
    F = torch.randn(1, 3, 2, 4, 3)
    with pytest.raises(ValueError, match="posterior"):
        tree.decode(F, torch.tensor([3]), posterior=False)
    from spacy_nldm.models.scorers import make_scorer
    with pytest.raises(ValueError, match="distance_labels"):
        make_scorer("bilinear", n_dirs=2, label_dim=4, rank=4, distance_lengths=3, distance_labels=True,
                    chain_factor=True)
    partial = torch.ones(1, 3, 3, dtype=torch.bool)
    with pytest.raises(ValueError, match="fully labelled"):
        tree.nll(F, torch.tensor([3]), partial)
