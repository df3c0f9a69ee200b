"""Scores shaped like a trained tagger's stay on the exp-space fast path, exactly.

A trained tagger's factored scores are an emission per token and label, spread over 30-45 nats, plus
label interactions of a few nats (BENCHMARKS.md, "trained scores"). The tree's contractions sum over
head labels and the chain's forward sums over previous labels, so neither should need its log-space
fallback at any emission scale: these tests count the fallbacks and check the results against float64.
"""
import pytest
import torch

from spacy_nldm.structs import (
    BroadcastLogSemiring,
    DirectionalScores,
    chain_checked,
    chain_potentials,
    crf_lane,
    crf_log_partition,
    crf_marginals,
    log_partition,
    marginals,
)
from spacy_nldm.structs.inside import Inside
from spacy_nldm.structs.semiring import LogSemiring
from spacy_nldm.structs.tree import _prepare

EMISSION_SCALES = [10.0, 30.0, 100.0]
LENGTHS = [12, 9, 5, 1, 12, 7]


def trained_like(emission: float, context: float, m: int = 8, seed: int = 0):
    """F (B, N, 2, M+1, M) = emission[b, t, c] + context[direction, a, c], float64."""
    gen = torch.Generator().manual_seed(seed)
    n = max(LENGTHS)
    emissions = emission * torch.randn(len(LENGTHS), n, 1, 1, m, generator=gen, dtype=torch.float64)
    contexts = context * torch.randn(1, 1, 2, m + 1, m, generator=gen, dtype=torch.float64)
    return emissions + contexts, torch.tensor(LENGTHS)


def recomputed_spans(F, lengths, max_dist):
    problem = _prepare(DirectionalScores(F), lengths, None, None, max_dist)
    inside = Inside(LogSemiring(), problem.arcs, problem.allowed, problem.lengths, problem.limit)
    inside.run()
    stages = inside.inner_rows + inside.right.rows + inside.left.rows + inside.tail.rows
    return sum(len(rows[0]) for rows in stages if rows is not None)


@pytest.mark.parametrize("emission", EMISSION_SCALES)
@pytest.mark.parametrize("max_dist", [None, 3])
def test_tree_on_trained_like_scores_needs_no_log_space(emission, max_dist):
    F, lengths = trained_like(emission, 1.0)
    assert recomputed_spans(F.float(), lengths, max_dist) == 0
    ref = log_partition(DirectionalScores(F), lengths, max_dist=max_dist, semiring=BroadcastLogSemiring)
    got = log_partition(DirectionalScores(F.float()), lengths, max_dist=max_dist)
    assert torch.allclose(got.double(), ref, rtol=1e-6, atol=1e-4)
    ref_labels = marginals(DirectionalScores(F), lengths, max_dist=max_dist).labels
    labels = marginals(DirectionalScores(F.float()), lengths, max_dist=max_dist).labels
    assert float((labels.double() - ref_labels).abs().max()) < 1e-4


@pytest.mark.parametrize("emission", EMISSION_SCALES)
def test_chain_on_trained_like_scores_needs_no_log_space(emission):
    gen = torch.Generator().manual_seed(1)
    n, m = max(LENGTHS), 8
    lengths = torch.tensor(LENGTHS)
    emissions = emission * torch.randn(len(LENGTHS), n, m, generator=gen, dtype=torch.float64)
    transitions = torch.randn(m, m, generator=gen, dtype=torch.float64)
    potentials = chain_potentials(emissions, transitions, lengths, start=torch.randn(m, generator=gen, dtype=torch.float64))
    ref, ref_marg = crf_log_partition(potentials, lengths), crf_marginals(potentials, lengths)
    lane = crf_lane(potentials.float(), lengths)  # exp space: bounded, or checked with no sentence redone
    if lane != "bounded":
        assert lane == "checked" and not chain_checked.recursions(potentials.float(), lengths, True)[2].any()
    leaf = potentials.float().requires_grad_(True)
    got = crf_log_partition(leaf, lengths)
    got.sum().backward()
    marg = crf_marginals(potentials.float(), lengths)
    assert torch.allclose(got.detach().double(), ref, rtol=1e-6, atol=1e-4)
    assert float((marg.double() - ref_marg).abs().max()) < 1e-4
