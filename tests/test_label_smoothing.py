"""Label smoothing of the structured losses (spacy_nldm.models.smoothing): off is the plain loss, without
interactions it is spaCy's smoothed cross-entropy, the uniform term is what it says, gradients are right."""
import itertools
import math

import numpy
import pytest
import torch
from thinc.api import SequenceCategoricalCrossentropy

from brute import projective_trees
from spacy_nldm import structs
from spacy_nldm.models.smoothing import mixture_weight
from spacy_nldm.models.structure import Chain, LatentTree

STRUCTURES = {
    "crf1": lambda bias: Chain(order=1),
    "crf2": lambda bias: Chain(order=2),
    "nldm": lambda bias: LatentTree(max_dist=None, distance_bias=bias),
    "nldm_k2": lambda bias: LatentTree(max_dist=2, distance_bias=bias),
}


def _random_bias(name, k, m, **kw):
    """The bias the tests give a structure: None for the chains, (2, k) for the NLDM."""
    if not name.startswith("nldm"):
        return None
    return torch.randn(2, k, dtype=torch.float64, **kw)


def _shape(name: str, m: int):
    if name.startswith("nldm"):
        return (2, m + 1, m)
    return (1, m + 1, m) if name == "crf1" else (m + 1, m + 1, m)


def _batch(name, lengths, m, seed=0, scale=1.0, interactions=True, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    S, L = len(lengths), max(lengths)
    if interactions:
        F = torch.randn(S, L, *_shape(name, m), generator=g, dtype=dtype) * scale
    else:  # every context scores a label alike: F = emission only
        F = (torch.randn(S, L, m, generator=g, dtype=dtype) * scale)[:, :, None, None, :].expand(
            S, L, *_shape(name, m)).clone()
    gold = torch.randint(0, m, (S, L), generator=g)
    mask = torch.nn.functional.one_hot(gold, m).bool()
    return F, torch.tensor(lengths), mask, gold


@pytest.mark.parametrize("name", sorted(STRUCTURES))
def test_off_is_the_plain_loss_exactly(name):
    F, lengths, mask, _ = _batch(name, [4, 2, 3], 3, dtype=torch.float32)
    structure = STRUCTURES[name](None)
    assert torch.equal(structure.nll(F, lengths, mask), structure.nll(F, lengths, mask, smoothing=0.0))


@pytest.mark.parametrize("name", sorted(STRUCTURES))
@pytest.mark.parametrize("alpha", [0.05, 0.3])
def test_without_interactions_it_is_spacys_smoothed_cross_entropy(name, alpha):
    """Every context scoring a label alike (F = emissions e), the loss and its gradient with respect to e
    are those of spaCy's tagger: softmax of e, thinc's smoothed targets (gold 1 - a, others a / (M - 1))."""
    m, lengths = 4, [5, 1, 3]
    emissions = torch.randn(len(lengths), max(lengths), m, generator=torch.Generator().manual_seed(1),
                            dtype=torch.float64, requires_grad=True)
    F = emissions[:, :, None, None, :].expand(len(lengths), max(lengths), *_shape(name, m))
    gold = torch.randint(0, m, (len(lengths), max(lengths)), generator=torch.Generator().manual_seed(2))
    mask = torch.nn.functional.one_hot(gold, m).bool()
    ours = STRUCTURES[name](None).nll(F, torch.tensor(lengths), mask, smoothing=mixture_weight(alpha, m))
    ours.backward()
    names = [str(i) for i in range(m)]
    loss_fn = SequenceCategoricalCrossentropy(names=names, normalize=False, label_smoothing=alpha)
    expected = 0.0
    for s, n in enumerate(lengths):
        guesses = torch.softmax(emissions[s, :n].detach(), -1).numpy()
        d_guesses = loss_fn.get_grad([guesses], [[names[int(c)] for c in gold[s, :n]]])[0]  # guesses - targets
        targets = numpy.full((n, m), alpha / (m - 1))
        targets[numpy.arange(n), gold[s, :n].numpy()] = 1 - alpha
        numpy.testing.assert_allclose(guesses - d_guesses, targets, atol=1e-6)  # thinc's are float32
        numpy.testing.assert_allclose(emissions.grad[s, :n].numpy(), guesses - targets, atol=1e-12)
        expected = expected + float(-(targets * numpy.log(guesses)).sum())
    assert float(ours) == pytest.approx(expected, rel=1e-12)


def _enumerate_uniform_ce(name, F, n, bias, max_dist):
    """-mean over all label sequences (and, for the tree, E over uniform trees of the joint score
    minus log #trees) by brute force, for one segment."""
    m = F.shape[-1]
    if name.startswith("nldm"):
        log_z = structs.log_partition(structs.DirectionalScores(F[None, :n], bias), torch.tensor([n]),
                                      max_dist=max_dist)[0]
        trees = _projective_trees(n, max_dist)
        total = 0.0
        for labels in itertools.product(range(m), repeat=n):
            for heads in trees:
                score = 0.0
                for d, h in enumerate(heads, start=1):
                    a = 0 if h == 0 else labels[h - 1] + 1
                    score += float(F[d - 1, 0 if h < d else 1, a, labels[d - 1]])
                    if bias is not None and h != 0:
                        score += float(bias[0 if h < d else 1, min(abs(h - d), bias.shape[1]) - 1])
                total += score
        expected = total / (m ** n * len(trees))
        return float(log_z) - expected - math.log(len(trees))
    pot = STRUCTURES[name](None).expand(F[None, :n])
    log_z = structs.crf_log_partition(pot, torch.tensor([n]))[0]
    scores = [float(structs.crf_score(pot, torch.tensor([labels]), torch.tensor([n]))[0])
              for labels in itertools.product(range(m), repeat=n)]
    return float(log_z) - sum(scores) / len(scores)


def _projective_trees(n, max_dist):
    """All projective trees (brute.projective_trees: several root children allowed) with arcs at most
    ``max_dist`` long (the root sits at position 0, so its arcs are limited too)."""
    return [heads for heads in projective_trees(n)
            if max_dist is None or all(abs(h - d) <= max_dist for d, h in enumerate(heads, start=1))]


@pytest.mark.parametrize("name", sorted(STRUCTURES))
def test_uniform_term_against_enumeration(name):
    m, n = 2, 3
    F, _, _, _ = _batch(name, [n], m, seed=2)
    bias = _random_bias(name, 2, m)
    structure = STRUCTURES[name](bias)
    max_dist = getattr(structure, "max_dist", None)
    expected = _enumerate_uniform_ce(name, F[0], n, bias, max_dist)
    # b = 1: the loss is the uniform term alone, whatever the (known) gold labels
    gold = torch.nn.functional.one_hot(torch.tensor([[1, 0, 1]]), m).bool()
    ours = structure.nll(F, torch.tensor([n]), gold, smoothing=1.0)
    assert float(ours) == pytest.approx(expected, rel=1e-9, abs=1e-9)


@pytest.mark.parametrize("name", sorted(STRUCTURES))
def test_gradients_against_finite_differences(name):
    m = 3
    F, lengths, mask, _ = _batch(name, [4, 2], m, seed=3)
    mask[1, 0] = True  # one token with an unknown label
    F.requires_grad_(True)
    bias = _random_bias(name, 3, m, requires_grad=True)
    inputs = (F,) if bias is None else (F, bias)

    def loss(*args):
        s = STRUCTURES[name](args[1] if len(args) > 1 else None)
        return s.nll(args[0], lengths, mask, smoothing=0.2)

    assert torch.autograd.gradcheck(loss, inputs, eps=1e-6, atol=1e-6)


def test_mixture_weight_matches_spacy_and_checks_its_range():
    assert mixture_weight(0.0, 17) == 0.0
    assert mixture_weight(0.05, 17) == pytest.approx(0.05 * 17 / 16)
    with pytest.raises(ValueError, match="label_smoothing"):
        mixture_weight(0.9, 2)
    with pytest.raises(ValueError, match="label_smoothing"):
        mixture_weight(-0.1, 5)


def test_smoothing_makes_the_marginals_less_confident():
    """Trained to convergence on one sentence with free scores, the CRF's marginals match its target's (a
    log-linear model's optimum matches the target's expected features): 1 unsmoothed, and the mixture
    (1 - b) * gold + b * uniform's (1 - b) + b / m on each gold label with smoothing b."""
    m, n = 4, 5
    gold = torch.tensor([[0, 1, 2, 3, 0]])
    mask = torch.nn.functional.one_hot(gold, m).bool()
    peaks = []
    for smoothing in (0.0, 0.2):
        F = torch.zeros(1, n, 1, m + 1, m, dtype=torch.float64, requires_grad=True)
        opt = torch.optim.Adam([F], lr=0.1)
        for _ in range(300):
            opt.zero_grad()
            Chain(order=1).nll(F, torch.tensor([n]), mask, smoothing=smoothing).backward()
            opt.step()
        probs = structs.crf_marginals(Chain(order=1).expand(F.detach()), torch.tensor([n]))
        peaks.append(probs.gather(-1, gold[..., None]).squeeze(-1)[0].tolist())
    assert min(peaks[0]) > 0.99
    assert peaks[1] == pytest.approx([1 - 0.2 + 0.2 / m] * n, abs=1e-6)


@pytest.mark.parametrize("name", sorted(STRUCTURES))
def test_segments_with_unknown_labels_keep_the_plain_likelihood(name):
    """As spaCy's tagger leaves tokens without a label out of its loss (smoothing included), a segment with an
    unknown label is not smoothed; a fully labelled one is."""
    F, lengths, mask, _ = _batch(name, [4, 3], 3, seed=5)
    mask[1, 1] = True  # segment 1 has a token with an unknown label
    structure = STRUCTURES[name](None)
    smoothed = structure.nll(F, lengths, mask, smoothing=0.3)
    plain_second = structure.nll(F[1:], lengths[1:], mask[1:])
    smoothed_first = structure.nll(F[:1], lengths[:1], mask[:1], smoothing=0.3)
    assert float(smoothed) == pytest.approx(float(smoothed_first + plain_second), rel=1e-10)
    nothing_known = torch.ones_like(mask)
    assert float(structure.nll(F, lengths, nothing_known, smoothing=0.3)) == pytest.approx(0.0, abs=1e-9)
