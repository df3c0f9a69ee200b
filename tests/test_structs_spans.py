"""Exact span probabilities against enumeration of every label sequence (and every projective tree for the
NLDM): first- and second-order chains in every score form, BIO and BILUO, with and without the scheme's
constraints; the spans of a sentence sum to its expected number of entities."""
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
    crf_marginals,
    crf_span_log_probs,
    entity_labels,
    entity_tags,
    label_marginals,
    span_log_probs,
)

TYPES = ["per", "loc"]
LENGTHS = [4, 2, 3, 1]


def _event(labels, start, end, kind, scheme):
    """Whether label strings ``labels`` make tokens start..end-1 exactly one entity of type ``kind``."""
    if scheme == "BILUO" and end - start == 1:
        return labels[start] == f"U-{kind}"
    want = [f"B-{kind}"] + [f"I-{kind}"] * (end - start - 1)
    if scheme == "BILUO":
        want[-1] = f"L-{kind}"
    if list(labels[start:end]) != want:
        return False
    return scheme == "BILUO" or end == len(labels) or labels[end] != f"I-{kind}"


def _chain_log_weights(potentials, n):
    """{label tuple: score} of every sequence of a chain (potentials (N, M, M[, M]) numpy)."""
    order, m = potentials.ndim - 2, potentials.shape[-1]
    weights = {}
    for seq in itertools.product(range(m), repeat=n):
        padded = (0,) * order + seq
        weights[seq] = sum(potentials[(t,) + padded[t : t + order + 1]] for t in range(n))
    return weights


def _tree_log_weights(scores, n):
    """{label tuple: log of the sum over projective trees} of dense arc scores (N+1, N+1, M, M) numpy."""
    m = scores.shape[-1]
    seqs = np.array(list(itertools.product(range(m), repeat=n)), dtype=int).reshape(-1, n)
    totals = []
    for heads in projective_trees(n):
        total = np.zeros(len(seqs))
        for d, h in enumerate(heads, start=1):
            head_label = seqs[:, h - 1] if h else np.zeros(len(seqs), dtype=int)
            total += scores[h, d, head_label, seqs[:, d - 1]]
        totals.append(total)
    totals = np.stack(totals)
    top = totals.max(0)
    return dict(zip(map(tuple, seqs), top + np.log(np.exp(totals - top).sum(0))))


def _expected(weights, labels, n, scheme):
    """P(event) of every (start, end, type) by enumeration of the {sequence: log weight} dict."""
    seqs = list(weights)
    logw = np.array([weights[s] for s in seqs], dtype=np.float64)
    probs = np.exp(logw - logw.max())
    probs /= probs.sum()
    out = {}
    for start in range(n):
        for end in range(start + 1, n + 1):
            for x, kind in enumerate(TYPES):
                out[start, end, x] = sum(p for p, s in zip(probs, seqs)
                                         if _event([labels[i] for i in s], start, end, kind, scheme))
    return out


def _all_spans(lengths):
    return torch.tensor([(b, s, e, x) for b, n in enumerate(lengths) for s in range(n) for e in range(s + 1, n + 1)
                         for x in range(len(TYPES))], dtype=torch.long)


def _chain(form, m, n, gen):
    batch = len(LENGTHS)
    E = torch.randn(batch, n, m, generator=gen, dtype=torch.float64)
    if form == "ChainScores":
        return ChainScores(E, torch.randn(m, m, generator=gen, dtype=torch.float64),
                           torch.randn(m, generator=gen, dtype=torch.float64),
                           torch.randn(m, generator=gen, dtype=torch.float64))
    if form == "potentials-1":
        return torch.randn(batch, n, m, m, generator=gen, dtype=torch.float64)
    if form == "SecondOrderScores":
        return SecondOrderScores(E, torch.randn(m + 1, m + 1, m, generator=gen, dtype=torch.float64))
    return torch.randn(batch, n, m, m, m, generator=gen, dtype=torch.float64)


@pytest.mark.parametrize("scheme", ["BIO", "BILUO"])
@pytest.mark.parametrize("form,lane", [("ChainScores", "mask"), ("ChainScores", "closed"), ("potentials-1", "mask"),
                                       ("potentials-1", "closed"), ("SecondOrderScores", "mask"),
                                       ("potentials-2", "mask")])
@pytest.mark.parametrize("constrained", [True, False])
def test_chain_spans_match_enumeration(scheme, form, lane, constrained):
    labels = entity_labels(TYPES, scheme)
    m, n = len(labels), max(LENGTHS)
    lengths = torch.tensor(LENGTHS)
    scores = _chain(form, m, n, torch.Generator().manual_seed(7))
    if constrained:
        scores = constrain(scores, allowed_transitions(labels, scheme), lengths)
    spans = _all_spans(LENGTHS)
    got = crf_span_log_probs(scores, lengths, spans, entity_tags(labels, scheme), lane=lane).exp()
    potentials = scores if isinstance(scores, torch.Tensor) else (
        scores.potentials(lengths) if isinstance(scores, ChainScores) else scores.potentials())
    for b, length in enumerate(LENGTHS):
        weights = _chain_log_weights(potentials[b, :length].numpy(), length)
        want = _expected(weights, labels, length, scheme)
        rows = (spans[:, 0] == b).nonzero().squeeze(1)
        for r in rows.tolist():
            _, s, e, x = spans[r].tolist()
            assert got[r].item() == pytest.approx(want[s, e, x], abs=1e-10), (b, s, e, x)


@pytest.mark.parametrize("scheme", ["BIO", "BILUO"])
def test_constrained_spans_sum_to_the_expected_number_of_entities(scheme):
    """Every entity of a valid sequence is one span: the spans' probabilities sum to the expected number of B
    (BIO) or B and U tags (BILUO), read off the token marginals."""
    labels = entity_labels(TYPES, scheme)
    lengths = torch.tensor([7, 5, 1])
    gen = torch.Generator().manual_seed(3)
    m = len(labels)
    scores = ChainScores(3 * torch.randn(3, 7, m, generator=gen, dtype=torch.float64),
                         torch.randn(m, m, generator=gen, dtype=torch.float64))
    scores = constrain(scores, allowed_transitions(labels, scheme), lengths)
    spans = _all_spans(lengths.tolist())
    probs = crf_span_log_probs(scores, lengths, spans, entity_tags(labels, scheme)).exp()
    opening = [i for i, label in enumerate(labels) if label[0] in "BU"]
    expected = crf_marginals(scores, lengths)[:, :, opening].sum((1, 2))
    per_sentence = torch.zeros(3, dtype=torch.float64).index_add(0, spans[:, 0], probs)
    assert torch.allclose(per_sentence, expected, atol=1e-10)


@pytest.mark.parametrize("scheme,n", [("BIO", 4), ("BILUO", 3)])
@pytest.mark.parametrize("directional", [True, False])
def test_nldm_spans_match_enumeration(scheme, n, directional):
    """Summed over labels and trees, invalid sequences included; DirectionalScores on their compiled lane,
    dense scores with max_dist on the reference."""
    labels = entity_labels(TYPES, scheme)
    m = len(labels)
    lengths_list = [n, 2, n - 1]
    lengths = torch.tensor(lengths_list)
    gen = torch.Generator().manual_seed(11)
    F = torch.randn(3, n, 2, m + 1, m, generator=gen, dtype=torch.float64)
    dense = expand_directional(F)
    max_dist = None if directional else 2
    scores = DirectionalScores(F) if directional else dense
    spans = _all_spans(lengths_list)
    got = span_log_probs(scores, lengths, spans, entity_tags(labels, scheme), max_dist=max_dist).exp()
    for b, length in enumerate(lengths_list):
        sub = dense[b, : length + 1, : length + 1].numpy()
        if max_dist is not None:
            far = np.abs(np.arange(length + 1)[:, None] - np.arange(length + 1)[None, :]) > max_dist
            sub = np.where(far[:, :, None, None], -np.inf, sub)
        want = _expected(_tree_log_weights(sub, length), labels, length, scheme)
        for r in (spans[:, 0] == b).nonzero().squeeze(1).tolist():
            _, s, e, x = spans[r].tolist()
            assert got[r].item() == pytest.approx(want[s, e, x], abs=1e-10), (b, s, e, x)


def test_nldm_bio_spans_sum_to_the_expected_number_of_b_tags():
    labels = entity_labels(TYPES, "BIO")
    m = len(labels)
    lengths = torch.tensor([6, 3])
    F = torch.randn(2, 6, 2, m + 1, m, generator=torch.Generator().manual_seed(5), dtype=torch.float64)
    spans = _all_spans(lengths.tolist())
    probs = span_log_probs(DirectionalScores(F), lengths, spans, entity_tags(labels, "BIO")).exp()
    begins = [i for i, label in enumerate(labels) if label.startswith("B-")]
    expected = label_marginals(DirectionalScores(F), lengths)[:, :, begins].sum((1, 2))
    assert torch.allclose(torch.zeros(2, dtype=torch.float64).index_add(0, spans[:, 0], probs), expected, atol=1e-10)


@pytest.mark.parametrize("form,lane", [("ChainScores", "mask"), ("ChainScores", "closed"),
                                       ("SecondOrderScores", "mask")])
def test_span_probs_are_differentiable_under_the_rules(form, lane):
    """Gradients finite where the BILUO rules put -inf (start and end rules included) and equal to finite
    differences."""
    labels = entity_labels(TYPES, "BILUO")
    m = len(labels)
    lengths = torch.tensor([4, 3])
    gen = torch.Generator().manual_seed(9)
    E = torch.randn(2, 4, m, generator=gen, dtype=torch.float64, requires_grad=True)
    table = torch.randn(*((m, m) if form == "ChainScores" else (m + 1, m + 1, m)), generator=gen, dtype=torch.float64)
    tags = entity_tags(labels, "BILUO")
    spans = torch.tensor([[0, 0, 2, 1], [0, 1, 2, 0], [1, 1, 3, 0], [1, 2, 3, 1]])

    def log_p(emissions):
        scores = ChainScores(emissions, table) if form == "ChainScores" else SecondOrderScores(emissions, table)
        ruled = constrain(scores, allowed_transitions(labels, "BILUO"), lengths)
        return crf_span_log_probs(ruled, lengths, spans, tags, lane=lane)

    value = log_p(E)
    assert torch.isfinite(value).all()
    (grad,) = torch.autograd.grad(value.sum(), E)
    assert torch.isfinite(grad).all()
    step = torch.zeros_like(E)
    step[0, 1, 3] = 1e-6
    numeric = (log_p(E + step).sum() - log_p(E - step).sum()) / 2e-6
    assert grad[0, 1, 3].item() == pytest.approx(numeric.item(), abs=1e-6)
    bare = ChainScores(E.detach(), table) if form == "ChainScores" else SecondOrderScores(E.detach(), table)
    ruled = constrain(bare, allowed_transitions(labels, "BILUO"), lengths)
    assert crf_span_log_probs(ruled, lengths, torch.tensor([[0, 3, 4, 0]]), tags).item() > float("-inf")
    with pytest.raises(ValueError, match="span 0"):
        crf_span_log_probs(ruled, lengths, torch.tensor([[1, 2, 4, 0]]), tags, lane=lane)


def test_entity_tags_read_the_scheme():
    labels = entity_labels(["a", "b-c"], "BILUO")
    tags = entity_tags(labels, "BILUO")
    assert tags.types == ("a", "b-c")
    assert [labels[i] for i in tags.last.tolist()] == ["L-a", "L-b-c"]
    assert entity_tags(entity_labels(["a"], "BIO"), "BIO").unit.tolist() == [-1]
    with pytest.raises(ValueError, match="L-a"):
        entity_tags(["O", "B-a", "I-a", "U-a"], "BILUO")

