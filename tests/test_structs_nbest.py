"""The k best label sequences against enumeration: first- and second-order chains in every score form and
on both lanes, with label masks and BIO/BILUO constraints, fewer sequences than k; the NLDM's k best by
its marginals with exact probabilities summed over trees."""
import itertools

import numpy as np
import pytest
import torch

from brute import expand_directional, projective_trees
from spacy_nldm.structs import (
    ChainScores,
    DirectionalScores,
    SecondOrderScores,
    allowed_transitions,
    constrain,
    crf_log_partition,
    crf_nbest,
    crf_viterbi,
    entity_labels,
    label_marginals,
    label_nbest,
    log_partition,
)

LENGTHS = [4, 1, 3, 0, 4]


def _scores(form, m, n, gen, dtype=torch.float64):
    batch = len(LENGTHS)
    E = torch.randn(batch, n, m, generator=gen, dtype=dtype)
    if form == "ChainScores":
        return ChainScores(E, torch.randn(m, m, generator=gen, dtype=dtype), torch.randn(m, generator=gen, dtype=dtype),
                           torch.randn(m, generator=gen, dtype=dtype))
    if form == "potentials-1":
        return torch.randn(batch, n, m, m, generator=gen, dtype=dtype)
    if form == "SecondOrderScores":
        return SecondOrderScores(E, torch.randn(m + 1, m + 1, m, generator=gen, dtype=dtype))
    return torch.randn(batch, n, m, m, m, generator=gen, dtype=dtype)


def _potentials(scores, lengths):
    if isinstance(scores, ChainScores):
        return scores.potentials(lengths)
    return scores.potentials() if isinstance(scores, SecondOrderScores) else scores


def _enumerate(potentials, n, mask=None):
    """{sequence: score} of every sequence of finite score (potentials (N, M, M[, M]) numpy)."""
    order, m = potentials.ndim - 2, potentials.shape[-1]
    out = {}
    for seq in itertools.product(range(m), repeat=n):
        if mask is not None and not all(mask[t, c] for t, c in enumerate(seq)):
            continue
        padded = (0,) * order + seq
        total = sum(potentials[(t,) + padded[t : t + order + 1]] for t in range(n))
        if total > -np.inf:
            out[seq] = total
    return out


def _check_against(found, potentials, lengths, k, mask=None):
    for b, n in enumerate(lengths):
        table = _enumerate(potentials[b, :n].numpy(), n, None if mask is None else mask[b, :n].numpy())
        want = sorted(table.values(), reverse=True)[:k]
        got = found.scores[b].tolist()
        assert got[: len(want)] == pytest.approx(want, abs=1e-9)  # the set of the k best scores, in order
        assert all(score == -np.inf for score in got[len(want):])
        seqs = [tuple(found.labels[b, r, :n].tolist()) for r in range(len(want))]
        assert len(set(seqs)) == len(seqs)  # distinct sequences
        for r, seq in enumerate(seqs):
            assert table[seq] == pytest.approx(got[r], abs=1e-9)  # each one's own score
        assert not found.labels[b, :, n:].any() and not found.labels[b, len(want):].any()


@pytest.mark.parametrize("form,lane", [("ChainScores", "compiled"), ("ChainScores", "reference"),
                                       ("potentials-1", "reference"), ("SecondOrderScores", "compiled"),
                                       ("SecondOrderScores", "reference"), ("potentials-2", "reference")])
def test_nbest_matches_enumeration(form, lane):
    m, n, k = 3, max(LENGTHS), 7  # sentence 1 has 3 sequences: fewer than k
    lengths = torch.tensor(LENGTHS)
    scores = _scores(form, m, n, torch.Generator().manual_seed(1))
    found = crf_nbest(scores, lengths, k, lane=lane)
    assert found.labels.shape == (len(LENGTHS), k, n) and found.scores.shape == (len(LENGTHS), k)
    _check_against(found, _potentials(scores, lengths), LENGTHS, k)
    best = crf_viterbi(scores, lengths)
    assert torch.allclose(found.scores[:, 0], best.score, atol=1e-12)


@pytest.mark.parametrize("form", ["ChainScores", "potentials-1", "SecondOrderScores", "potentials-2"])
@pytest.mark.parametrize("scheme", ["BIO", "BILUO"])
def test_nbest_with_constraints_and_a_label_mask(form, scheme):
    labels = entity_labels(["x"], scheme)
    m, n, k = len(labels), max(LENGTHS), 6
    lengths = torch.tensor(LENGTHS)
    gen = torch.Generator().manual_seed(2)
    scores = constrain(_scores(form, m, n, gen), allowed_transitions(labels, scheme), lengths)
    mask = torch.rand(len(LENGTHS), n, m, generator=gen) > 0.3
    mask[:, :, 0] = True  # O everywhere: some sequence stays valid
    found = crf_nbest(scores, lengths, k, label_mask=mask)
    _check_against(found, _potentials(scores, lengths), LENGTHS, k, mask)


def test_compiled_and_reference_lanes_agree_in_float32():
    lengths = torch.tensor([9, 5, 12, 1])
    gen = torch.Generator().manual_seed(3)
    for scores in (ChainScores(torch.randn(4, 12, 6, generator=gen), torch.randn(6, 6, generator=gen)),
                   SecondOrderScores(torch.randn(4, 12, 6, generator=gen), torch.randn(7, 7, 6, generator=gen))):
        fast, ref = crf_nbest(scores, lengths, 5), crf_nbest(scores, lengths, 5, lane="reference")
        assert fast.scores.dtype == torch.float32
        assert torch.allclose(fast.scores, ref.scores, atol=1e-5)
        assert torch.equal(fast.labels, ref.labels)


def test_all_sequences_probabilities_sum_to_one():
    """With k at least the number of sequences, exp(score - log Z) over the k is a distribution."""
    lengths = torch.tensor([3, 2])
    scores = ChainScores(torch.randn(2, 3, 3, dtype=torch.float64), torch.randn(3, 3, dtype=torch.float64))
    found = crf_nbest(scores, lengths, 27)
    probs = (found.scores - crf_log_partition(scores, lengths)[:, None]).exp()
    assert torch.allclose(probs.sum(1), torch.ones(2, dtype=torch.float64), atol=1e-12)
    assert torch.isinf(found.scores[1, 9:]).all()  # 9 sequences of 2 tokens


def test_nbest_refuses_nan_and_bad_k():
    scores = ChainScores(torch.zeros(1, 2, 2), torch.zeros(2, 2))
    with pytest.raises(ValueError, match="k must"):
        crf_nbest(scores, torch.tensor([2]), 0)
    bad = scores._replace(emissions=torch.tensor([[[0.0, float("nan")], [0.0, 0.0]]]))
    for lane in ("compiled", "reference"):
        with pytest.raises(ValueError, match="NaN"):
            crf_nbest(bad, torch.tensor([2]), 2, lane=lane)
    crf_nbest(bad, torch.tensor([0]), 2)  # padding is not read


@pytest.mark.parametrize("form", ["DirectionalScores", "with distance bias", "dense, max_dist 2"])
def test_label_nbest_of_the_nldm(form):
    """The k valid sequences of the largest marginal products, each with its exact log P (summed over
    trees), ordered by it."""
    scheme, n, k = "BIO", 4, 5
    labels = entity_labels(["x"], scheme)
    m = len(labels)
    lengths = torch.tensor([n, 2])
    gen = torch.Generator().manual_seed(4)
    F = torch.randn(2, n, 2, m + 1, m, generator=gen, dtype=torch.float64)
    bias = torch.randn(2, 2, generator=gen, dtype=torch.float64) if form == "with distance bias" else None
    max_dist = 2 if form.startswith("dense") else None
    dense = expand_directional(F)
    for h, d in itertools.product(range(1, n + 1), repeat=2):  # the bias by its definition
        if bias is not None and h != d:
            dense[:, h, d] += bias[0 if h < d else 1, min(abs(h - d), 2) - 1]
    scores = dense if max_dist else DirectionalScores(F, bias)
    found = label_nbest(scores, lengths, k, allowed=allowed_transitions(labels, scheme), max_dist=max_dist)
    marg = label_marginals(scores, lengths, max_dist=max_dist)
    log_z = log_partition(scores, lengths, max_dist=max_dist)
    for b, length in enumerate(lengths.tolist()):
        valid = [seq for seq in itertools.product(range(m), repeat=length)
                 if not any(labels[c] == "I-x" and (t == 0 or labels[seq[t - 1]] == "O") for t, c in enumerate(seq))]
        product = {seq: float(sum(np.log(marg[b, t, c].item()) for t, c in enumerate(seq))) for seq in valid}
        chosen = [tuple(found.labels[b, r, :length].tolist()) for r in range(min(k, len(valid)))]
        assert sorted(product[s] for s in chosen) == pytest.approx(sorted(product.values())[-len(chosen):])
        trees = [heads for heads in projective_trees(length)
                 if max_dist is None or all(abs(h - d) <= max_dist for d, h in enumerate(heads, 1))]
        for r, seq in enumerate(chosen):
            totals = [sum(dense[b, h, d, seq[h - 1] if h else 0, seq[d - 1]].item() for d, h in enumerate(heads, 1))
                      for heads in trees]
            exact = np.log(np.exp(totals).sum()) - log_z[b].item()
            assert found.scores[b, r].item() == pytest.approx(exact, abs=1e-10)
        assert (found.scores[b, :-1] >= found.scores[b, 1:]).all()


@pytest.mark.parametrize("order,lane", [(1, "compiled"), (1, "reference"), (2, "compiled"), (2, "reference")])
def test_nbest_under_ties_gives_distinct_sequences_of_the_exact_scores(order, lane):
    """Every sequence scores 0: any k of them, distinct, each of score 0; k beyond their number: -inf."""
    m, n = 2, 3
    E = torch.zeros(1, n, m, dtype=torch.float64)
    scores = ChainScores(E, torch.zeros(m, m, dtype=torch.float64)) if order == 1 else SecondOrderScores(
        E, torch.zeros(m + 1, m + 1, m, dtype=torch.float64))
    found = crf_nbest(scores, torch.tensor([n]), 10, lane=lane)
    assert found.scores[0].tolist() == [0.0] * 8 + [-np.inf] * 2
    assert len({tuple(seq) for seq in found.labels[0, :8].tolist()}) == 8
