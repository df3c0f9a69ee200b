"""The compiled one-label lane (spacy_nldm.structs.single_label: log S of the gold labels' arcs) against
enumeration and the torch stages: log Z and the arc marginals, with and without an arc limit, at every score
scale; and the NLDM's loss reads it."""
import numpy as np
import pytest
import torch

from brute import enumerate_tree_model, torch_lane
from spacy_nldm.structs import compiled, log_partition, single_label

pytestmark = pytest.mark.skipif(not compiled.available(), reason="numba is not installed")


def log_z_and_grad(scores, lengths, k):
    leaf = scores.detach().clone().requires_grad_(True)
    log_z = log_partition(leaf, lengths, max_dist=k)
    weights = torch.arange(1, len(lengths) + 1, dtype=log_z.dtype)  # a backward pass scaled per sentence
    (log_z * weights).sum().backward()
    return log_z.detach(), leaf.grad


def random_case(seed, scale, dtype=torch.float64):
    gen = torch.Generator().manual_seed(seed)
    n = int(torch.randint(1, 10, (), generator=gen))
    k = [None, *range(1, n + 1)][int(torch.randint(0, n + 1, (), generator=gen))]
    scores = scale * torch.randn(4, n + 1, n + 1, 1, 1, generator=gen, dtype=torch.float64)
    lengths = torch.randint(0, n + 1, (4,), generator=gen)
    lengths[0] = n
    return scores.to(dtype), lengths, k


@pytest.mark.parametrize("scale", [0.5, 5.0, 500.0, 5e4])
def test_agrees_with_the_torch_stages(scale):
    for seed in range(12):
        scores, lengths, k = random_case(seed, scale)
        got = log_z_and_grad(scores, lengths, k)
        with torch_lane():
            want = log_z_and_grad(scores, lengths, k)
        assert torch.allclose(got[0], want[0], rtol=1e-12, atol=1e-9), (seed, got[0], want[0])
        assert torch.allclose(got[1], want[1], atol=1e-9), (seed, (got[1] - want[1]).abs().max())


@pytest.mark.parametrize("k", [None, 1, 2, 3])
def test_log_z_and_marginals_by_enumeration(k):
    gen = torch.Generator().manual_seed(3)
    n = 6
    scores = torch.randn(1, n + 1, n + 1, 1, 1, generator=gen, dtype=torch.float64)
    log_z, grad = log_z_and_grad(scores, torch.tensor([n]), k)
    want_z, _, _, want_arcs, _ = enumerate_tree_model(scores[0].numpy(), n, max_dist=k)
    assert abs(float(log_z[0]) - want_z) < 1e-10
    np.testing.assert_allclose(grad[0].numpy(), want_arcs, atol=1e-10)


def test_float32_at_a_large_scale_is_exact():
    scores, lengths, k = random_case(5, 1e4, torch.float32)
    got = log_z_and_grad(scores, lengths, k)
    want = log_z_and_grad(scores.double(), lengths, k)
    assert torch.allclose(got[0].double(), want[0], rtol=1e-6)
    assert torch.allclose(got[1].double(), want[1], atol=1e-5)


def test_impossible_arcs_and_non_finite_scores():
    scores, lengths, _ = random_case(1, 1.0)
    scores[0, 0, :, 0, 0] = float("-inf")  # no arc from the root: no tree
    log_z, grad = log_z_and_grad(scores, lengths, None)
    assert log_z[0] == float("-inf") and bool((grad[0] == 0).all()) and bool(torch.isfinite(log_z[1:]).all())
    scores[0, 0, 1, 0, 0] = float("nan")
    with pytest.raises(ValueError, match="NaN|nan"):
        log_partition(scores, lengths)


def test_the_nldm_loss_reads_it(monkeypatch):
    """log S of the NLDM's loss (every label known) goes through the one-label lane."""
    from spacy_nldm.models.structure import LatentTree

    calls = []
    real = single_label.inside_outside
    monkeypatch.setattr(single_label, "inside_outside", lambda *a: calls.append(1) or real(*a))
    gen = torch.Generator().manual_seed(0)
    F = torch.randn(2, 5, 2, 4, 3, generator=gen, requires_grad=True)
    gold = torch.nn.functional.one_hot(torch.randint(0, 3, (2, 5), generator=gen), 3).bool()
    lengths = torch.tensor([5, 3])
    loss = LatentTree(max_dist=3).nll(F, lengths, gold)
    assert calls
    with torch_lane():
        want = LatentTree(max_dist=3).nll(F, lengths, gold)
    assert torch.allclose(loss, want, atol=1e-4)
