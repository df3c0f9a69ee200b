"""The canonical tree of given labels (structs.canonical_heads): both lanes make the same choices bit for bit,
those of the dense algorithm as first written (tests/dense_trees.py); it is a best tree of the labels and its
score is the sum of its arcs' scores."""
import importlib.util

import pytest
import torch

from dense_trees import dense_canonical_heads, factored_scores
from spacy_nldm.structs import DirectionalScores, canonical_heads, log_partition, MaxSemiring

LANES = ["reference"] + (["compiled"] if importlib.util.find_spec("numba") else [])


@pytest.mark.parametrize("lane", LANES)
@pytest.mark.parametrize("max_dist", [None, 1, 2, 3, 5])
def test_both_lanes_make_the_dense_algorithms_choices_bit_for_bit(lane, max_dist):
    """The banded charts (O(n k) with max_dist) of each lane make the choices of the dense (N+1, N+1) one."""
    generator = torch.Generator().manual_seed(max_dist or 0)
    for kind in ("token", "transition"):
        S, N, M = 40, 19, 3
        F = factored_scores(kind, S, N, M, generator)
        lengths = torch.randint(0, N + 1, (S,), generator=generator)
        lengths[0] = N
        labels = torch.randint(0, M, (S, N), generator=generator)
        heads, scores = canonical_heads(F, labels, lengths, max_dist, lane=lane)
        want_heads, want_scores = dense_canonical_heads(F, labels, lengths, max_dist)
        assert torch.equal(heads, want_heads) and torch.equal(scores, want_scores)


@pytest.mark.parametrize("max_dist", [None, 3])
def test_it_is_a_best_tree_of_the_labels_with_a_distance_bias(max_dist):
    """Its score is the best score of the labels (the max semiring under a one-label mask), bias included,
    on both lanes alike."""
    generator = torch.Generator().manual_seed(4)
    S, N, M = 16, 9, 3
    F = factored_scores("token", S, N, M, generator).double()
    bias = torch.randn(2, 3, generator=generator, dtype=torch.float64)
    lengths = torch.randint(1, N + 1, (S,), generator=generator)
    labels = torch.randint(0, M, (S, N), generator=generator)
    mask = torch.nn.functional.one_hot(torch.cat([labels.new_zeros(S, 1), labels], 1), M).bool()
    best = log_partition(DirectionalScores(F, bias), lengths, label_mask=mask, max_dist=max_dist, semiring=MaxSemiring)
    results = [canonical_heads(F, labels, lengths, max_dist, distance_bias=bias, lane=lane) for lane in LANES]
    for heads, scores in results:
        torch.testing.assert_close(scores, best, rtol=1e-5, atol=1e-5)
        assert torch.equal(heads, results[0][0]) and torch.equal(scores, results[0][1])
        assert max_dist is None or bool(((heads - torch.arange(1, N + 1)).abs() <= max_dist)[heads > 0].all())


def test_a_bad_lane_is_refused():
    with pytest.raises(ValueError, match="lane"):
        canonical_heads(torch.zeros(1, 2, 2, 3, 2), torch.zeros(1, 2, dtype=torch.long), torch.tensor([2]), lane="x")


@pytest.mark.parametrize("max_dist", [None, 2, 3])
def test_factored_scores_give_the_dense_choices_on_both_lanes(max_dist):
    """Scores as their factors (float32 emissions and table, as the models give them), small integers so that
    many trees tie: both lanes return the dense algorithm's tree of the summed scores, and the same scores,
    bit for bit; with a distance bias, the same tree and score on both lanes."""
    generator = torch.Generator().manual_seed(7)
    S, N, M = 30, 13, 4
    emissions = torch.randint(-2, 3, (S, N, M), generator=generator).float()
    table = torch.randint(-2, 3, (2, M + 1, M), generator=generator).float()
    lengths = torch.randint(0, N + 1, (S,), generator=generator)
    lengths[0] = N
    labels = torch.randint(0, M, (S, N), generator=generator)
    full = emissions.double()[:, :, None, None, :] + table.double()
    want_heads, want_scores = dense_canonical_heads(full, labels, lengths, max_dist)
    for lane in LANES:
        heads, scores = canonical_heads(DirectionalScores.from_factors(emissions, table, None), labels, lengths,
                                        max_dist, lane=lane)
        assert torch.equal(heads, want_heads) and torch.equal(scores, want_scores)
    bias = torch.randn(2, 3, generator=generator)
    results = [canonical_heads(DirectionalScores.from_factors(emissions, table, bias), labels, lengths, max_dist,
                               distance_bias=bias, lane=lane) for lane in LANES]
    for heads, scores in results:
        assert torch.equal(heads, results[0][0]) and torch.equal(scores, results[0][1])
