"""Allowed-transition constraints (BIO, BILUO) against enumeration of the valid label sequences, on every
lane of the first- and second-order chains, with window flags, partial gold masks and large scores."""
import itertools

import numpy as np
import pytest
import torch

from spacy_nldm.structs import (
    SCHEMES,
    ChainScores,
    SecondOrderScores,
    allowed_transitions,
    chain_bounded,
    chain_factored,
    chain_second,
    constrain,
    crf_lane,
    crf_log_partition,
    crf_marginals,
    crf_score,
    crf_viterbi,
    entity_labels,
    valid_decode,
)

LENGTHS = [4, 1, 3, 4, 2, 0]
FIRST = [True, True, False, True, False, True]
LAST = [True, False, True, False, False, True]


def _valid(labels, scheme, first=True, last=True):
    """Whether a sequence of label strings is a sequence of whole spans, read as a parser would (a window
    not first may open inside a span, one not last may end inside one)."""
    inside = None  # the type of the span that must go on
    for t, label in enumerate(labels):
        prefix, _, kind = label.partition("-")
        if t == 0 and not first and prefix in ("I", "L") and scheme == "BILUO":
            inside = kind
        if scheme == "BIO":
            if prefix == "I" and inside != kind and not (t == 0 and not first):
                return False
            inside = kind if prefix in ("B", "I") else None
            continue
        if inside is not None:
            if prefix not in ("I", "L") or kind != inside:
                return False
            inside = kind if prefix == "I" else None
        elif prefix in ("I", "L"):
            return False
        elif prefix == "B":
            inside = kind
    return scheme == "BIO" or inside is None or not last


def _sequences(labels, n, scheme, first, last):
    """Index tuples of every valid sequence of n labels."""
    return [seq for seq in itertools.product(range(len(labels)), repeat=n)
            if _valid([labels[i] for i in seq], scheme, first, last)]


def _order1(seq, emissions, transitions, start, end):
    total = start[seq[0]] + end[seq[-1]] + sum(emissions[t, c] for t, c in enumerate(seq))
    return total + sum(transitions[a, c] for a, c in zip(seq, seq[1:]))


def _order2(seq, emissions, trigram):
    states = (0, 0) + tuple(1 + c for c in seq)
    return sum(emissions[t, c] + trigram[states[t], states[t + 1], c] for t, c in enumerate(seq))


def _enumerate(total, labels, n, scheme, first, last):
    """log Z, the marginals (n, M) and the best sequence over the valid sequences, scored by ``total``."""
    seqs = _sequences(labels, n, scheme, first, last)
    if n == 0:
        return 0.0, np.zeros((0, len(labels))), ()
    scores = np.array([total(seq) for seq in seqs])
    log_z = scores.max() + np.log(np.exp(scores - scores.max()).sum())
    marg = np.zeros((n, len(labels)))
    for p, seq in zip(np.exp(scores - log_z), seqs):
        marg[np.arange(n), list(seq)] += p
    return log_z, marg, seqs[int(scores.argmax())]


def _setup(scheme, order, scale=1.0, dtype=torch.float64, seed=0, types=("PER", "LOC")):
    labels = entity_labels(list(types) if scheme == "BIO" else list(types)[:1], scheme)
    m = len(labels)
    gen = torch.Generator().manual_seed(seed)
    draw = lambda *shape: (scale * torch.randn(*shape, generator=gen, dtype=torch.float64)).to(dtype)  # noqa: E731
    batch, n = len(LENGTHS), max(LENGTHS)
    if order == 1:
        scores = ChainScores(draw(batch, n, m), draw(m, m), draw(m), draw(m))
    else:
        scores = SecondOrderScores(draw(batch, n, m), draw(m + 1, m + 1, m))
    return labels, scores


def _flags():
    return torch.tensor(FIRST), torch.tensor(LAST)


def _total(scores, b, order):
    """The score of an index sequence of sentence b."""
    parts = [x.detach().double().numpy() for x in scores]
    if order == 1:
        emissions, transitions, start, end = parts
        return lambda seq: _order1(seq, emissions[b], transitions, start, end)
    emissions, trigram = parts
    return lambda seq: _order2(seq, emissions[b], trigram)


def test_entity_labels_and_the_rules_in_any_order():
    assert entity_labels(["PER", "LOC"], "BIO") == ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]
    assert entity_labels(["X"], "BILUO") == ["O", "B-X", "I-X", "L-X", "U-X"]
    assert SCHEMES == ("BIO", "BILUO")
    for scheme in SCHEMES:
        labels = entity_labels(["PER", "creative-work"], scheme)
        allowed = allowed_transitions(labels, scheme)
        for a, c in itertools.product(range(len(labels)), repeat=2):  # against the span parser
            assert bool(allowed.transitions[a, c]) == _valid([labels[a], labels[c]], scheme, False, False)
        assert [bool(x) for x in allowed.start] == [_valid([x], scheme, True, False) for x in labels]
        assert [bool(x) for x in allowed.end] == [_valid([x], scheme, False, True) for x in labels]
        order = torch.randperm(len(labels), generator=torch.Generator().manual_seed(1))
        shuffled = allowed_transitions([labels[i] for i in order], scheme)
        assert torch.equal(shuffled.transitions, allowed.transitions[order][:, order])
        assert torch.equal(shuffled.start, allowed.start[order]) and torch.equal(shuffled.end, allowed.end[order])
    with pytest.raises(ValueError, match="'L-PER'"):
        allowed_transitions(["O", "B-PER", "L-PER"], "BIO")
    with pytest.raises(ValueError, match="'PER'"):
        allowed_transitions(["O", "PER"], "BILUO")
    with pytest.raises(ValueError, match="scheme"):
        entity_labels(["PER"], "IOB1")


FORCED = [(1, "factored"), (1, "reference"), (2, "trigram"), (2, "reference")]


@pytest.mark.parametrize("scheme", SCHEMES)
@pytest.mark.parametrize("order,lane", FORCED)
@pytest.mark.parametrize("flagged", [True, False])
def test_every_lane_against_enumeration_of_the_valid_sequences(scheme, order, lane, flagged):
    """With window flags, and without (the start and end rules on every sentence)."""
    labels, scores = _setup(scheme, order)
    lengths = torch.tensor(LENGTHS)
    allowed = allowed_transitions(labels, scheme)
    flags = _flags() if flagged else ()
    constrained = constrain(scores, allowed, lengths, *flags)
    log_z = crf_log_partition(constrained, lengths, lane=lane)
    marg = crf_marginals(constrained, lengths, lane=lane)
    potentials = constrain(scores.potentials(lengths), allowed, lengths, *flags)
    from_potentials = crf_log_partition(potentials, lengths, lane="bounded" if order == 1 else "reference")
    marg_potentials = crf_marginals(potentials, lengths, lane="bounded" if order == 1 else "reference")
    decoders = [crf_viterbi(constrained, lengths), crf_viterbi(potentials, lengths, lane="reference")]
    if order == 1:
        decoders.append(crf_viterbi(constrained, lengths, lane="compiled"))
    for b, n in enumerate(LENGTHS):
        first, last = (FIRST[b], LAST[b]) if flagged else (True, True)
        ref_z, ref_marg, ref_best = _enumerate(_total(scores, b, order), labels, n, scheme, first, last)
        assert log_z[b].item() == pytest.approx(ref_z, abs=1e-10)
        assert from_potentials[b].item() == pytest.approx(ref_z, abs=1e-10)
        for got in (marg, marg_potentials):
            np.testing.assert_allclose(got[b, :n].numpy(), ref_marg, atol=1e-10)
            assert torch.all(got[b, :n][torch.from_numpy(ref_marg == 0)] == 0)  # exactly 0: no valid sequence has it
        for decoded in decoders:
            assert decoded.labels[b, :n].tolist() == list(ref_best)
            assert _valid([labels[i] for i in decoded.labels[b, :n].tolist()], scheme, first, last)
        torch.testing.assert_close(decoders[-1].score, decoders[1].score, rtol=0, atol=1e-12)


@pytest.mark.parametrize("scheme", SCHEMES)
def test_forbidden_transitions_have_exactly_zero_marginals_and_gradients(scheme):
    labels, scores = _setup(scheme, 1)
    lengths = torch.tensor(LENGTHS)
    allowed = allowed_transitions(labels, scheme)
    leaves = [x.requires_grad_(True) for x in scores]
    log_z = crf_log_partition(constrain(ChainScores(*leaves), allowed, lengths, *_flags()), lengths)
    assert crf_lane(constrain(ChainScores(*leaves), allowed, lengths), lengths) == "factored"
    emissions, transitions, start, end = torch.autograd.grad(log_z.sum(), leaves)
    assert torch.all(transitions[~allowed.transitions] == 0) and torch.all(transitions[allowed.transitions] != 0)
    for got in (emissions, transitions, start, end):
        assert bool(torch.isfinite(got).all())
    # the emissions' gradient is the token marginals; start: those of the first tokens of flagged windows
    marg = crf_marginals(constrain(scores, allowed, lengths, *_flags()), lengths)
    torch.testing.assert_close(emissions, marg, rtol=0, atol=1e-12)
    starts = torch.tensor([n > 0 for n in LENGTHS])
    torch.testing.assert_close(start, marg[starts, 0].sum(0), rtol=0, atol=1e-12)
    potentials = constrain(scores.potentials(lengths).detach().requires_grad_(True), allowed, lengths)
    (pair,) = torch.autograd.grad(crf_log_partition(potentials, lengths).sum(), potentials)
    assert torch.all(pair[:, 1:][~allowed.transitions.expand(len(LENGTHS), max(LENGTHS) - 1, -1, -1)] == 0)


@pytest.mark.parametrize("order", [1, 2])
def test_gradients_through_constrain_against_finite_differences(order):
    labels, scores = _setup("BILUO", order)
    lengths = torch.tensor(LENGTHS)
    allowed = allowed_transitions(labels, "BILUO")
    leaves = [x.detach().requires_grad_(True) for x in scores]
    kind = ChainScores if order == 1 else SecondOrderScores

    def log_z(*parts):
        return crf_log_partition(constrain(kind(*parts), allowed, lengths, *_flags()), lengths)

    assert torch.autograd.gradcheck(log_z, leaves)


@pytest.mark.parametrize("order", [1, 2])
def test_partial_gold_masks_give_finite_gradients(order):
    """log S under a gold mask that leaves some tokens unknown: states no valid sequence reaches make
    logsumexp over -inf only; the gradient stays finite, 0 there; an invalid gold makes log S -inf."""
    labels, scores = _setup("BIO", order, seed=2)
    lengths = torch.tensor(LENGTHS)
    allowed = allowed_transitions(labels, "BIO")
    batch, n, m = scores.emissions.shape
    mask = torch.ones(batch, n, m, dtype=torch.bool)
    mask[0, 1] = False
    mask[0, 1, labels.index("I-PER")] = True  # token 1 I-PER: token 0 is B-PER or I-PER
    mask[2, 0] = False
    mask[2, 0, [labels.index("O"), labels.index("I-LOC")]] = True
    mask[3, 0] = False
    mask[3, 0, labels.index("I-LOC")] = True  # a first token of a flagged sentence: no valid sequence
    leaves = [x.detach().requires_grad_(True) for x in scores]
    kind = ChainScores if order == 1 else SecondOrderScores
    lanes = ["factored", "reference"] if order == 1 else ["trigram", "reference"]
    for lane in lanes:
        constrained = constrain(kind(*leaves), allowed, lengths, *_flags())
        log_s = crf_log_partition(constrained, lengths, label_mask=mask, lane=lane)
        assert log_s[3].item() == float("-inf") and bool(torch.isfinite(log_s[[0, 1, 2, 4, 5]]).all())
        grads = torch.autograd.grad(log_s[torch.isfinite(log_s)].sum(), leaves)
        assert all(bool(torch.isfinite(g).all()) for g in grads)
        assert torch.all(grads[0][3] == 0)
        marg = crf_marginals(constrained, lengths, label_mask=mask, lane=lane)
        assert torch.all(marg[0, 0, [labels.index(x) for x in ("O", "B-LOC", "I-LOC")]] == 0)
        torch.testing.assert_close(marg[0, 0].sum(), torch.tensor(1.0, dtype=torch.float64))
    for b in (0, 2):  # the masked sums against enumeration
        total = _total(scores, b, order)
        seqs = [seq for seq in _sequences(labels, LENGTHS[b], "BIO", FIRST[b], LAST[b])
                if all(mask[b, t, c] for t, c in enumerate(seq))]
        values = np.array([total(seq) for seq in seqs])
        assert log_s[b].item() == pytest.approx(values.max() + np.log(np.exp(values - values.max()).sum()), abs=1e-10)


@pytest.mark.parametrize("order", [1, 2])
def test_gold_sequences_score_their_own_sum_and_invalid_ones_minus_infinity(order):
    labels, scores = _setup("BILUO", order, seed=5)
    lengths = torch.tensor(LENGTHS)
    constrained = constrain(scores, allowed_transitions(labels, "BILUO"), lengths, *_flags())
    gold = torch.zeros(len(LENGTHS), max(LENGTHS), dtype=torch.long)
    for b, n in enumerate(LENGTHS):  # a valid sequence of each sentence, and for sentence 0 an invalid one
        seq = _sequences(labels, n, "BILUO", FIRST[b], LAST[b])[-1] if b else (labels.index("B-PER"),) * n
        gold[b, :n] = torch.tensor(seq, dtype=torch.long)
    one_hot = torch.nn.functional.one_hot(gold, len(labels)).bool()
    assert crf_lane(constrained, lengths, label_mask=one_hot) == "gold"
    log_s = crf_log_partition(constrained, lengths, label_mask=one_hot)
    assert log_s[0].item() == float("-inf")
    for b, n in enumerate(LENGTHS[1:], start=1):
        expected = _total(scores, b, order)(tuple(gold[b, :n].tolist())) if n else 0.0
        assert log_s[b].item() == pytest.approx(expected, abs=1e-12)


@pytest.mark.parametrize("scheme", SCHEMES)
@pytest.mark.parametrize("order,lane", FORCED)
@pytest.mark.parametrize("scale", [10.0, 20.0, 100.0])
def test_float32_at_large_scales_matches_float64(scheme, order, lane, scale):
    if lane == "trigram" and scale > 20:
        pytest.skip("a trigram of std 100 spans more than the trigram lane takes")
    labels, scores = _setup(scheme, order, scale=scale, dtype=torch.float32, seed=3, types=("A", "B", "C"))
    lengths = torch.tensor(LENGTHS)
    allowed = allowed_transitions(labels, scheme)
    wide = constrain(type(scores)(*[x.double() for x in scores]), allowed, lengths, *_flags())
    narrow = constrain(scores, allowed, lengths, *_flags())
    expected_z = crf_log_partition(wide, lengths, lane="reference")
    log_z = crf_log_partition(narrow, lengths, lane=lane)
    torch.testing.assert_close(log_z.double(), expected_z, rtol=3e-6, atol=1e-3)
    marg = crf_marginals(narrow, lengths, lane=lane)
    expected_marg = crf_marginals(wide, lengths, lane="reference")
    torch.testing.assert_close(marg.double(), expected_marg, rtol=0, atol=2e-5)
    if order == 1 and lane == "factored" and scale <= 20:  # and the potentials' fast lane (std 100: too wide)
        potentials = constrain(scores.potentials(lengths), allowed, lengths, *_flags())
        torch.testing.assert_close(crf_log_partition(potentials, lengths, lane="bounded").double(), expected_z,
                                   rtol=3e-6, atol=1e-3)
        torch.testing.assert_close(crf_marginals(potentials, lengths, lane="bounded").double(), expected_marg,
                                   rtol=0, atol=2e-5)
    decoded = crf_viterbi(narrow, lengths)
    for b, n in enumerate(LENGTHS):
        assert _valid([labels[i] for i in decoded.labels[b, :n].tolist()], scheme, FIRST[b], LAST[b])
    torch.testing.assert_close(crf_score(wide, decoded.labels, lengths), crf_viterbi(wide, lengths).score)


@pytest.mark.parametrize("scheme", SCHEMES)
def test_valid_decode_is_the_best_valid_sequence_under_summed_token_scores(scheme):
    labels, scores = _setup(scheme, 1, seed=4)
    lengths = torch.tensor(LENGTHS)
    allowed = allowed_transitions(labels, scheme)
    marg = torch.softmax(scores.emissions.detach() * 3, -1)  # label marginals, as the NLDM passes them
    decoded = valid_decode(marg, lengths, allowed, *_flags())
    everywhere = valid_decode(marg, lengths, allowed)
    for b, n in enumerate(LENGTHS):
        for flags, got in (((FIRST[b], LAST[b]), decoded), ((True, True), everywhere)):
            seqs = _sequences(labels, n, scheme, *flags)
            best = max(seqs, key=lambda seq: float(marg[b, torch.arange(n), list(seq)].sum()))
            assert got.labels[b, :n].tolist() == list(best)
            assert got.score[b].item() == pytest.approx(float(marg[b, torch.arange(n), list(best)].sum()), abs=1e-12)


@pytest.mark.parametrize("scheme", SCHEMES)
@pytest.mark.parametrize("scale", [1.0, 10.0])
def test_the_fast_lanes_trust_constrained_sentences(scheme, scale):
    """-inf is a structural zero, not an underflow: the factored, trigram and bounded lanes keep every
    sentence (none is redone on the reference), empty ones included."""
    lengths = torch.tensor(LENGTHS)
    for order in (1, 2):
        labels, scores = _setup(scheme, order, scale=scale, dtype=torch.float32, types=("A", "B", "C"))
        constrained = constrain(scores, allowed_transitions(labels, scheme), lengths, *_flags())
        if order == 2:
            assert bool(chain_second.log_partition(constrained, lengths)[1].all())
            continue
        last = torch.arange(max(LENGTHS))[None, :] == (lengths - 1)[:, None]
        emissions = torch.where(last[:, :, None], constrained.emissions + constrained.end, constrained.emissions)
        fast = chain_factored.fast_path(emissions, constrained.transitions, constrained.start, lengths)
        assert bool(fast.exact.all())
        potentials = constrain(scores.potentials(lengths), allowed_transitions(labels, scheme), lengths, *_flags())
        assert crf_lane(potentials, lengths) == "bounded"
        assert bool(chain_bounded.marginals(potentials, lengths)[2].all())


def test_sentences_a_lane_cannot_vouch_for_are_redone_on_the_reference():
    """Emissions of std 100 (order 2, float64) and of std 30 with transitions of std 7.5 (order 1,
    float32): some products underflow, the lanes' checks hand those sentences to the reference, and log Z,
    its gradients and the marginals are the reference's."""
    labels = entity_labels(["A", "B", "C"], "BIO")
    allowed = allowed_transitions(labels, "BIO")
    m = len(labels)
    gen = torch.Generator().manual_seed(0)
    short = torch.tensor([12, 12, 7, 12, 3, 12, 9, 12])
    second = constrain(SecondOrderScores(100 * torch.randn(8, 12, m, generator=gen, dtype=torch.float64),
                                         torch.randn(m + 1, m + 1, m, generator=gen, dtype=torch.float64)),
                       allowed, short)
    long = torch.full((16,), 40)
    gen = torch.Generator().manual_seed(0)
    first = constrain(ChainScores(30 * torch.randn(16, 40, m, generator=gen), 7.5 * torch.randn(m, m, generator=gen)),
                      allowed, long)
    assert not bool(chain_second.log_partition(second, short)[1].all())
    fast = chain_factored.fast_path(first.emissions, first.transitions, first.start, long)
    assert not bool(fast.exact.all()) and 2 * int((~fast.exact).sum()) <= 16  # some sentences redone, not all
    for scores, lengths, lane, tolerance in ((second, short, "trigram", 1e-9), (first, long, "factored", 1e-4)):
        leaves = [x.detach().requires_grad_(True) for x in scores]
        kind = type(scores)
        log_z = crf_log_partition(kind(*leaves), lengths, lane=lane)
        expected = crf_log_partition(kind(*leaves), lengths, lane="reference")
        torch.testing.assert_close(log_z, expected, rtol=1e-6, atol=tolerance)
        for got, want in zip(torch.autograd.grad(log_z.sum(), leaves), torch.autograd.grad(expected.sum(), leaves)):
            torch.testing.assert_close(got, want, rtol=0, atol=tolerance)
        torch.testing.assert_close(crf_marginals(scores, lengths, lane=lane),
                                   crf_marginals(scores, lengths, lane="reference"), rtol=0, atol=tolerance)


def test_bad_allowed_and_flags_are_rejected():
    labels, scores = _setup("BIO", 1)
    lengths = torch.tensor(LENGTHS)
    allowed = allowed_transitions(labels[:-1], "BIO")
    with pytest.raises(ValueError, match="allowed.start"):
        constrain(scores, allowed, lengths)
    allowed = allowed_transitions(labels, "BIO")
    with pytest.raises(ValueError, match="first and last"):
        constrain(scores, allowed, lengths, first=torch.ones(2, dtype=torch.bool))
