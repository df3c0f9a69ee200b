"""The CUDA path: the structured core and the spaCy components on a GPU give what they give on the CPU.

Skipped where torch sees no CUDA device (CI). On a GPU machine: ``python -m pytest tests/test_cuda.py``
(``projects/paper/scripts/gpu_checks.sh`` runs it with the other GPU checks). The core is compared in float32 with the
CPU's float32 (same inputs, drawn on the CPU, where the compiled lanes run), at score scales 1 to 300; the
components are trained on the GPU through thinc's CuPy ops, saved,
and loaded on the CPU, where they must tag alike.
"""
import random

import pytest
import torch

from nldm_fixtures import TWITTER
from spacy_nldm.structs import (
    ChainScores,
    DirectionalScores,
    crf_log_partition,
    crf_marginals,
    crf_viterbi,
    log_partition,
    marginals,
    viterbi,
)

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")

LENGTHS = [9, 4, 1, 7, 0]


def _close(gpu: torch.Tensor, cpu: torch.Tensor, scale: float) -> None:
    torch.testing.assert_close(gpu.cpu(), cpu, rtol=1e-5, atol=1e-4 * max(1.0, scale))


def _alike_on_cuda(parts, scale: float, log_z_of, labels_of=None) -> None:
    """log Z of ``parts`` (each a leaf on the device), its gradients with respect to them and (``labels_of``)
    the label marginals, on the CPU and on CUDA: log Z to :func:`_close` at ``scale``, the gradients and
    marginals (probabilities, and sums of them) to 1e-4. ``log_z_of(leaves, device)`` and
    ``labels_of(detached leaves, device)`` compute them."""
    results = []
    for device in ("cpu", "cuda"):
        leaves = [part.to(device).requires_grad_(True) for part in parts]
        log_z = log_z_of(leaves, device)
        grads = torch.autograd.grad(log_z.sum(), leaves)
        labels = [labels_of([leaf.detach() for leaf in leaves], device)] if labels_of else []
        results.append([t.detach().cpu() for t in (log_z, *grads, *labels)])
    (cpu_z, *cpu_rest), (gpu_z, *gpu_rest) = results
    _close(gpu_z, cpu_z, scale)
    for gpu, cpu in zip(gpu_rest, cpu_rest):
        torch.testing.assert_close(gpu, cpu, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("order", [1, 2])
@pytest.mark.parametrize("scale", [1.0, 30.0, 300.0])
def test_chain_on_cuda_matches_cpu(order, scale):
    m, n = 5, max(LENGTHS)
    gen = torch.Generator().manual_seed(order * 1000 + int(scale))
    potentials = scale * torch.randn(len(LENGTHS), n, *((m,) * (order + 1)), generator=gen)
    lengths = torch.tensor(LENGTHS)
    mask = torch.rand(len(LENGTHS), n, m, generator=gen) < 0.7
    mask[..., 0] = True
    for kw in ({}, {"label_mask": mask}):
        on_gpu = {k: v.cuda() for k, v in kw.items()}
        _close(crf_log_partition(potentials.cuda(), lengths.cuda(), **on_gpu),
               crf_log_partition(potentials, lengths, **kw), scale)
        torch.testing.assert_close(crf_marginals(potentials.cuda(), lengths.cuda(), **on_gpu).cpu(),
                                   crf_marginals(potentials, lengths, **kw), rtol=0, atol=1e-4)
        gpu_labels, _, gpu_best = crf_viterbi(potentials.cuda(), lengths.cuda(), **on_gpu)
        cpu_labels, _, cpu_best = crf_viterbi(potentials, lengths, **kw)
        _close(gpu_best, cpu_best, scale)
        assert torch.equal(gpu_labels.cpu(), cpu_labels)


@pytest.mark.parametrize("scale", [1.0, 100.0])
def test_factored_chain_on_cuda_matches_cpu_with_gradients(scale):
    m, n = 6, max(LENGTHS)
    gen = torch.Generator().manual_seed(7 + int(scale))
    parts = [scale * torch.randn(len(LENGTHS), n, m, generator=gen), scale * torch.randn(m, m, generator=gen),
             scale * torch.randn(m, generator=gen), scale * torch.randn(m, generator=gen)]
    lengths = torch.tensor(LENGTHS)
    _alike_on_cuda(parts, scale, lambda leaves, device: crf_log_partition(ChainScores(*leaves), lengths.to(device)))


@pytest.mark.parametrize("max_dist", [None, 3])
@pytest.mark.parametrize("scale", [1.0, 30.0, 300.0])
def test_directional_tree_on_cuda_matches_cpu(max_dist, scale):
    """The factored layout the NLDM tagger trains with: (B, N, 2, M+1, M) edge scores."""
    m, n = 4, max(LENGTHS)
    gen = torch.Generator().manual_seed(11 + int(scale))
    F = scale * torch.randn(len(LENGTHS), n, 2, m + 1, m, generator=gen)
    lengths = torch.tensor(LENGTHS)
    results = []
    for device in ("cpu", "cuda"):
        leaf = F.to(device).requires_grad_(True)
        scores, dl = DirectionalScores(leaf), lengths.to(device)
        log_z = log_partition(scores, dl, max_dist=max_dist)
        (grad,) = torch.autograd.grad(log_z.sum(), leaf)
        best = viterbi(DirectionalScores(leaf.detach()), dl, max_dist=max_dist)
        labels = marginals(DirectionalScores(leaf.detach()), dl, max_dist=max_dist).labels
        results.append([t.detach().cpu() for t in (log_z, grad, best.score, best.labels, labels)])
    (cz, cg, cs, cl, cm), (gz, gg, gs, gl, gm) = results
    _close(gz, cz, scale)
    torch.testing.assert_close(gg, cg, rtol=0, atol=1e-4)
    torch.testing.assert_close(gm, cm, rtol=0, atol=1e-4)
    _close(gs, cs, scale)
    assert torch.equal(gl, cl)


@pytest.mark.parametrize("scale", [1.0, 30.0])
def test_tree_with_distance_scores_on_cuda_matches_cpu_with_gradients(scale):
    """The distance bias the NLDM trains with (``distance_bias``): log Z, its gradients with respect to F and
    the bias, and the label marginals."""
    m, n, k = 4, max(LENGTHS), 3
    gen = torch.Generator().manual_seed(23 + int(scale))
    F = scale * torch.randn(len(LENGTHS), n, 2, m + 1, m, generator=gen)
    bias = torch.randn(2, k, generator=gen)
    lengths = torch.tensor(LENGTHS)
    _alike_on_cuda(
        [F, bias], scale,
        lambda leaves, device: log_partition(DirectionalScores(*leaves), lengths.to(device), max_dist=k),
        lambda leaves, device: marginals(DirectionalScores(*leaves), lengths.to(device), max_dist=k).labels)


def _tweets(name: str, limit: int):
    from spacy_nldm.corpora.ark import read_ark

    return [(s.words, s.tags) for s in read_ark(TWITTER / name)][:limit]


@pytest.fixture
def on_gpu():
    """thinc's ops on CuPy for the test (as ``spacy train --gpu-id 0``), the CPU again afterwards."""
    pytest.importorskip("cupy")
    from thinc.api import require_cpu, require_gpu, set_gpu_allocator

    set_gpu_allocator("pytorch")
    require_gpu(0)
    yield
    require_cpu()


@pytest.mark.parametrize("factory, model, settings", [
    ("nldm_tagger", {"max_dist": 3}, {}),
    ("nldm_tagger", {"edge_scorer": "trilinear"}, {"loss": "max"}),
    ("crf_tagger", {"order": 1}, {}),
    ("crf_tagger", {"order": 2}, {}),
])
def test_component_trained_on_gpu_learns_and_tags_alike_on_the_cpu(on_gpu, factory, model, settings):
    """The default components, and other settings (``model``: architecture, ``settings``: component)."""
    import spacy
    from spacy.tokens import Doc
    from spacy.training import Example
    from thinc.api import Adam, fix_random_seed, require_cpu, require_gpu

    train, held_out = _tweets("oct27.train", 60), _tweets("oct27.test", 30)
    fix_random_seed(0)
    nlp = spacy.blank("en")
    nlp.add_pipe(factory, config={"model": model, **settings})
    examples = [Example.from_dict(Doc(nlp.vocab, words=w), {"tags": t}) for w, t in train]
    nlp.initialize(lambda: examples)
    assert "Cupy" in type(nlp.get_pipe(factory).model.ops).__name__
    optimizer, rng, losses = Adam(0.01), random.Random(0), []
    for _ in range(4):
        rng.shuffle(examples)
        epoch = {}
        for i in range(0, len(examples), 10):
            nlp.update(examples[i:i + 10], sgd=optimizer, losses=epoch)
        losses.append(epoch[factory])
    assert losses[-1] < 0.5 * losses[0], losses
    docs = [Doc(nlp.vocab, words=w) for w, _ in held_out]
    gpu_tags = [[t.tag_ for t in doc] for doc in nlp.pipe(docs)]
    data = nlp.to_bytes()
    require_cpu()
    try:
        on_cpu = spacy.blank("en")
        on_cpu.add_pipe(factory, config={"model": model, **settings})
        on_cpu.from_bytes(data)
        cpu_tags = [[t.tag_ for t in doc] for doc in on_cpu.pipe([Doc(on_cpu.vocab, words=w) for w, _ in held_out])]
    finally:
        require_gpu(0)
    assert cpu_tags == gpu_tags
    gold = [t for _, tags in held_out for t in tags]
    predicted = [t for tags in gpu_tags for t in tags]
    assert sum(p == g for p, g in zip(predicted, gold)) / len(gold) > 0.5
