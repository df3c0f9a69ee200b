"""Linear-chain CRFs of order 1 and 2 against enumeration."""
import itertools

import numpy as np
import pytest
import torch

from brute import enumerate_chain
from spacy_nldm.structs import chain_potentials, crf_log_partition, crf_marginals, crf_viterbi

LENGTHS = [5, 2, 4, 1, 0]


@pytest.mark.parametrize("order", [1, 2])
@pytest.mark.parametrize("masked", [False, True])
def test_chain_against_enumeration(order, masked):
    m, n = 3, max(LENGTHS)
    gen = torch.Generator().manual_seed(order * 10 + masked)
    potentials = torch.randn(len(LENGTHS), n, *((m,) * (order + 1)), generator=gen, dtype=torch.float64)
    lengths = torch.tensor(LENGTHS)
    mask = None
    if masked:
        mask = torch.rand(len(LENGTHS), n, m, generator=gen) < 0.6
        mask[:, :, 1] = True
    log_z = crf_log_partition(potentials, lengths, label_mask=mask)
    best, labels = crf_viterbi(potentials, lengths, label_mask=mask)
    marg = crf_marginals(potentials, lengths, label_mask=mask)
    for b, length in enumerate(LENGTHS):
        if length == 0:
            assert log_z[b].item() == 0.0 and torch.all(labels[b] == 0) and torch.all(marg[b] == 0)
            continue
        ref_z, ref_best, ref_labels, ref_marg = enumerate_chain(
            potentials[b].numpy(), length, None if mask is None else mask[b].numpy()
        )
        assert log_z[b].item() == pytest.approx(ref_z, abs=1e-9)
        assert best[b].item() == pytest.approx(ref_best, abs=1e-9)
        assert labels[b, :length].tolist() == ref_labels.tolist()
        assert torch.all(labels[b, length:] == 0)
        np.testing.assert_allclose(marg[b, :length].numpy(), ref_marg, atol=1e-9)
        np.testing.assert_allclose(marg[b, length:].numpy(), 0.0)


@pytest.mark.parametrize("order", [1, 2])
def test_chain_potentials_from_emissions_and_transitions(order):
    m, lengths = 3, torch.tensor([4, 2])
    gen = torch.Generator().manual_seed(3)
    emissions = torch.randn(2, 4, m, generator=gen, dtype=torch.float64)
    transitions = torch.randn(*((m,) * (order + 1)), generator=gen, dtype=torch.float64)
    start, end = torch.randn(m, generator=gen, dtype=torch.float64), torch.randn(m, generator=gen, dtype=torch.float64)
    pot = chain_potentials(emissions, transitions, lengths, start=start, end=end)
    log_z = crf_log_partition(pot, lengths)
    for b, n in enumerate(lengths.tolist()):
        totals = []
        for y in itertools.product(range(m), repeat=n):
            total = start[y[0]] + end[y[-1]] + sum(emissions[b, t, y[t]] for t in range(n))
            for t in range(1, n):
                # order 2: the label before token 0 is the start state, index 0
                prev = y[t - 1 : t] if order == 1 else ((0,) + y)[t - 1 : t + 1]
                total = total + transitions[prev + (y[t],)]
            totals.append(total)
        assert log_z[b].item() == pytest.approx(torch.logsumexp(torch.stack(totals), 0).item(), abs=1e-9)


def test_gradient_of_log_partition_is_the_marginal():
    gen = torch.Generator().manual_seed(5)
    potentials = torch.randn(2, 6, 4, 4, generator=gen, dtype=torch.float64, requires_grad=True)
    lengths = torch.tensor([6, 3])
    (grad,) = torch.autograd.grad(crf_log_partition(potentials, lengths).sum(), potentials)
    torch.testing.assert_close(grad.sum(dim=2), crf_marginals(potentials, lengths))
    eps = 1e-6
    bumped = potentials.detach().clone()
    bumped[0, 2, 1, 3] += eps
    numeric = (crf_log_partition(bumped, lengths) - crf_log_partition(potentials.detach(), lengths))[0] / eps
    assert grad[0, 2, 1, 3].item() == pytest.approx(numeric.item(), abs=1e-5)


@pytest.mark.parametrize("order", [1, 2])
def test_large_float32_potentials_and_minus_inf_stay_finite(order):
    gen = torch.Generator().manual_seed(9)
    m, lengths = 4, torch.tensor([7, 3, 0])
    potentials = 1e3 * torch.randn(3, 7, *((m,) * (order + 1)), generator=gen)
    potentials[0, 2, ..., 1] = float("-inf")  # label 1 impossible at token 2
    potentials.requires_grad_(True)
    mask = torch.rand(3, 7, m, generator=gen) < 0.7
    mask[:, :, 0] = True
    for kw in (dict(), dict(label_mask=mask)):
        log_z = crf_log_partition(potentials, lengths, **kw)
        (grad,) = torch.autograd.grad(log_z.sum(), potentials)
        assert torch.isfinite(log_z).all() and torch.isfinite(grad).all()
        best, labels = crf_viterbi(potentials, lengths, **kw)
        assert torch.isfinite(best).all() and labels[0, 2] != 1
