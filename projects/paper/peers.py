"""The structured core against its peers, torch-struct 0.5 and pytorch-crf 0.7.2 (``python -m projects.paper structs --peers``),
and against another checkout of this package (``--baseline PATH``).

Speed: one process, torch threads as given (1 by default), runs alternating between the project and the
peer, each contender building its own potentials from the same raw scores inside the timed call;
process CPU time per call, median over the repeats; ratio = project / peer (below 1: the project is
faster). Accuracy: float32 error against a float64 log-space reference at score standard deviations
1 to 1000 (relative error of log Z, largest absolute error of the marginals).
"""
import atexit
import importlib
import importlib.util
import shutil
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Callable, List, Optional, Tuple

import torch

from spacy_nldm import structs

SCALES = (1.0, 10.0, 30.0, 100.0, 300.0, 1000.0)


def peers_available() -> Optional[str]:
    """None if torch-struct and pytorch-crf import, else why not."""
    missing = [name for name in ("torch_struct", "torchcrf") if importlib.util.find_spec(name) is None]
    if missing:
        return (
            f"{' and '.join(missing)} not installed: install the peers next to the pinned torch with "
            "`pip install --no-deps torch-struct==0.5 pytorch-crf==0.7.2`"
        )
    return None


def alternate(ours: Callable, theirs: Callable, repeats: int, device: str = "cpu") -> Tuple[float, float]:
    """Median seconds of each, runs alternating (one warm-up each first): process CPU time on the CPU,
    wall time between two synchronisations on CUDA (the kernels run asynchronously)."""
    cuda = torch.device(device).type == "cuda"
    clock = time.perf_counter if cuda else time.process_time
    sync = torch.cuda.synchronize if cuda else (lambda: None)

    def timed(fn: Callable) -> float:
        sync()
        start = clock()
        fn()
        sync()
        return clock() - start

    ours(), theirs()
    a, b = [], []
    for _ in range(repeats):
        a.append(timed(ours))
        b.append(timed(theirs))
    return statistics.median(a), statistics.median(b)


def unit(device: str) -> str:
    """What :func:`alternate` measures on this device, for table headings."""
    return "median wall s, synchronised" if torch.device(device).type == "cuda" else "median CPU s"


# -- inputs, as the peers take them -------------------------------------------------------------------


def chain_inputs(batch: int, n: int, m: int, scale: float = 1.0, dtype=torch.float32, device: str = "cpu"):
    """pytorch-crf's CRF module (without pytorch-crf: the same three parameters, so that our rows still
    run), emissions (B, n, m), gold tags, lengths and mask, on ``device`` (drawn on the CPU, so that every
    device gets the same numbers)."""
    gen = torch.Generator().manual_seed(n * 100 + m)
    if importlib.util.find_spec("torchcrf") is not None:
        from torchcrf import CRF

        crf = CRF(m, batch_first=True).to(dtype)
    else:
        crf = _ChainParameters(m, gen).to(dtype)
    emissions = scale * torch.randn(batch, n, m, generator=gen, dtype=dtype)
    if scale != 1.0:
        with torch.no_grad():
            for p in (crf.transitions, crf.start_transitions, crf.end_transitions):
                p.copy_(scale * torch.randn(p.shape, generator=gen, dtype=dtype))
    tags = torch.randint(m, (batch, n), generator=gen)
    return (crf.to(device), emissions.to(device).requires_grad_(True), tags.to(device),
            torch.full((batch,), n, device=device), torch.ones(batch, n, dtype=torch.bool, device=device))


class _ChainParameters(torch.nn.Module):
    """pytorch-crf's CRF parameters, drawn as it draws them (uniform in [-0.1, 0.1]), for runs without it."""

    def __init__(self, m: int, gen: torch.Generator):
        super().__init__()
        self.start_transitions = torch.nn.Parameter(torch.rand(m, generator=gen) * 0.2 - 0.1)
        self.end_transitions = torch.nn.Parameter(torch.rand(m, generator=gen) * 0.2 - 0.1)
        self.transitions = torch.nn.Parameter(torch.rand(m, m, generator=gen) * 0.2 - 0.1)


def our_potentials(crf, emissions, lengths):
    """The chain potentials (``structs.chain_potentials``) of pytorch-crf's parameters and ``emissions``
    (B, n, m): the scores our chain lanes take for the peer's model."""
    return structs.chain_potentials(emissions, crf.transitions, lengths, start=crf.start_transitions,
                                    end=crf.end_transitions)


def _our_factored(crf, emissions):
    return structs.ChainScores(emissions, crf.transitions, crf.start_transitions, crf.end_transitions)


def _torch_struct_chain(crf, emissions, lengths):
    """torch-struct's LinearChainCRF on the same scores: potentials (B, N-1, C, C) indexed [current,
    previous], the first token's emission and start score folded into the first transition, the end
    score into the last."""
    import torch_struct

    edge = emissions[:, 1:, :, None] + crf.transitions.t()
    edge[:, 0] = edge[:, 0] + (emissions[:, 0] + crf.start_transitions)[:, None, :]
    edge[:, -1] = edge[:, -1] + crf.end_transitions[:, None]
    return torch_struct.LinearChainCRF(edge, lengths=lengths)


def _tree_inputs(batch: int, n: int, scale: float = 1.0, dtype=torch.float32, device: str = "cpu"):
    """Unlabelled arc scores in torch-struct's layout: (B, n, n), S[h-1, d-1] for h -> d, root on the diagonal."""
    gen = torch.Generator().manual_seed(n)
    S = scale * torch.randn(batch, n, n, generator=gen, dtype=dtype)
    return S.to(device).requires_grad_(True), torch.full((batch,), n, device=device)


def _our_tree(S: torch.Tensor) -> torch.Tensor:
    """The same scores in this project's layout (B, n+1, n+1, 1, 1)."""
    batch, n, _ = S.shape
    scores = S.new_zeros(batch, n + 1, n + 1)
    scores[:, 1:, 1:] = S
    scores[:, 0, 1:] = S.diagonal(0, 1, 2)
    return scores[..., None, None]


# -- speed ------------------------------------------------------------------------------------------


def speed_rows(batch: int, repeats: int, device: str = "cpu") -> List[Tuple[str, float, float]]:
    """(row, project s, peer s) for each comparison of issue 12's table, on ``device``."""
    import torch_struct

    rows = []
    for m in (17, 25):
        crf, em, tags, lengths, mask = chain_inputs(batch, 30, m, device=device)
        gold = torch.nn.functional.one_hot(tags, m).bool()

        def log_z():
            structs.crf_log_partition(our_potentials(crf, em, lengths), lengths).sum().backward()

        def their_log_z():
            crf._compute_normalizer(em.transpose(0, 1), mask.t()).sum().backward()

        def nll():
            pot = our_potentials(crf, em, lengths)
            (structs.crf_log_partition(pot, lengths) - structs.crf_log_partition(pot, lengths, label_mask=gold)).sum().backward()

        def their_nll():
            (-crf(em, tags, mask)).backward()

        def factored_log_z():  # emissions and pytorch-crf's own transition parameters, no potentials built
            structs.crf_log_partition(_our_factored(crf, em), lengths).sum().backward()

        def factored_nll():
            scores = _our_factored(crf, em)
            (structs.crf_log_partition(scores, lengths) - structs.crf_log_partition(scores, lengths, label_mask=gold)).sum().backward()

        def decode():
            with torch.no_grad():
                structs.crf_viterbi(our_potentials(crf, em, lengths), lengths)

        def their_decode():
            with torch.no_grad():
                crf.decode(em, mask)

        def their_struct_log_z():
            _torch_struct_chain(crf, em, lengths).partition.sum().backward()

        rows.append((f"chain-1 log Z fwd+bwd, n=30, M={m}, vs pytorch-crf normaliser", *alternate(log_z, their_log_z, repeats, device)))
        rows.append((f"chain-1 NLL fwd+bwd, n=30, M={m}, vs pytorch-crf CRF.forward", *alternate(nll, their_nll, repeats, device)))
        rows.append((f"chain-1 log Z fwd+bwd, n=30, M={m}, ChainScores, vs pytorch-crf normaliser",
                     *alternate(factored_log_z, their_log_z, repeats, device)))
        rows.append((f"chain-1 NLL fwd+bwd, n=30, M={m}, ChainScores, vs pytorch-crf CRF.forward",
                     *alternate(factored_nll, their_nll, repeats, device)))
        rows.append((f"chain-1 Viterbi, n=30, M={m}, vs pytorch-crf CRF.decode", *alternate(decode, their_decode, repeats, device)))
        rows.append((f"chain-1 log Z fwd+bwd, n=30, M={m}, vs torch-struct LinearChainCRF.partition",
                     *alternate(log_z, their_struct_log_z, repeats, device)))
    for n in (30, 60):
        S, lengths = _tree_inputs(batch, n, device=device)

        def tree_log_z():
            structs.log_partition(_our_tree(S), lengths).sum().backward()

        def their_tree_log_z():
            torch_struct.DependencyCRF(S, lengths=lengths, multiroot=True).partition.sum().backward()

        def tree_decode():
            with torch.no_grad():
                structs.viterbi(_our_tree(S), lengths)

        def their_tree_decode():
            torch_struct.DependencyCRF(S, lengths=lengths, multiroot=True).argmax

        rows.append((f"tree M=1 log Z fwd+bwd, n={n}, vs torch-struct DependencyCRF.partition",
                     *alternate(tree_log_z, their_tree_log_z, repeats, device)))
        rows.append((f"tree M=1 Viterbi, n={n}, vs torch-struct DependencyCRF.argmax",
                     *alternate(tree_decode, their_tree_decode, repeats, device)))
    return rows


def drawer(device: str):
    """(draw, gen): draw(*shape) gives random scores of std 1, float32, on ``device``, that require grad, from
    the seeded generator gen (which the caller may draw other values from)."""
    gen = torch.Generator().manual_seed(0)
    return (lambda *shape: torch.randn(*shape, generator=gen).to(device).requires_grad_(True)), gen


def fwd_bwd(fn, leaves):
    """A call that runs ``fn`` and its backward pass (of the sum), then clears the leaves' gradients."""
    def run():
        fn().sum().backward()
        for leaf in leaves:
            leaf.grad = None
    return run


def lane_rows(batch: int, repeats: int, device: str = "cpu") -> List[Tuple[str, str, str, str, float, float]]:
    """(structure, call, shape, lane, lane s, reference s): every lane of the tree and the chain forced on an
    input it takes, against the reference lane on the same input,
    random scores of std 1, float32, on ``device`` (the compiled lanes: CPU only)."""
    rows = []
    draw, gen = drawer(device)

    cpu = torch.device(device).type == "cpu"
    for n, m in ((20, 17), (30, 17), (30, 25)):
        lengths = torch.full((batch,), n, device=device)
        F = draw(batch, n, 2, m + 1, m)
        shape = f"n={n}, M={m}"

        def tree(lane):
            return structs.log_partition(structs.DirectionalScores(F), lengths, lane=lane)

        if cpu:
            rows.append(("tree", "log Z fwd+bwd, DirectionalScores", shape, "compiled",
                         *alternate(fwd_bwd(lambda: tree("compiled"), [F]), fwd_bwd(lambda: tree("reference"), [F]),
                                    repeats, device)))
            e, table = draw(batch, n, m), draw(2, m + 1, m)

            def factored(lane):
                return structs.log_partition(structs.DirectionalScores(e[:, :, None, None, :] + table, None, True),
                                             lengths, lane=lane)

            rows.append(("tree", "log Z fwd+bwd, token-independent DirectionalScores", shape, "factored",
                         *alternate(fwd_bwd(lambda: factored("factored"), [e, table]),
                                    fwd_bwd(lambda: factored("reference"), [e, table]), repeats, device)))
            def best(lane):
                with torch.no_grad():
                    return structs.viterbi(structs.DirectionalScores(F.detach()), lengths, lane=lane).score

            rows.append(("tree", "Viterbi, DirectionalScores", shape, "compiled",
                         *alternate(lambda: best("compiled"), lambda: best("reference"), repeats, device)))
            labels = torch.randint(m, (batch, n), generator=gen).to(device)

            def canonical(lane):
                return structs.canonical_heads(F.detach(), labels, lengths, lane=lane)

            rows.append(("tree", "canonical tree of given labels", shape, "compiled",
                         *alternate(lambda: canonical("compiled"), lambda: canonical("reference"), repeats, device)))
    if cpu:
        for n in (12, 30, 40, 60):
            arcs = draw(batch, n + 1, n + 1, 1, 1)
            lengths = torch.full((batch,), n, device=device)
            rows.append(("tree", "log S fwd+bwd, dense one-label (gold arcs)", f"n={n}, M=1", "compiled",
                         *alternate(fwd_bwd(lambda: structs.log_partition(arcs, lengths, lane="compiled"), [arcs]),
                                    fwd_bwd(lambda: structs.log_partition(arcs, lengths, lane="reference"), [arcs]),
                                    repeats, device)))
    for m in (17, 25):
        n = 30
        lengths = torch.full((batch,), n, device=device)
        em, trans, start, end = draw(batch, n, m), draw(m, m), draw(m), draw(m)
        factors = [em, trans, start, end]

        def chain(lane, form):
            if form == "ChainScores":
                scores = structs.ChainScores(em, trans, start, end)
            else:
                scores = structs.chain_potentials(em, trans, lengths, start=start, end=end)
            return structs.crf_log_partition(scores, lengths, lane=lane)

        shape = f"n={n}, M={m}"
        rows.append(("chain-1", "log Z fwd+bwd, potentials", shape, "bounded",
                     *alternate(fwd_bwd(lambda: chain("bounded", "potentials"), factors),
                                fwd_bwd(lambda: chain("reference", "potentials"), factors), repeats, device)))
        rows.append(("chain-1", "log Z fwd+bwd, ChainScores", shape, "factored",
                     *alternate(fwd_bwd(lambda: chain("factored", "ChainScores"), factors),
                                fwd_bwd(lambda: chain("reference", "ChainScores"), factors), repeats, device)))
        gold = torch.nn.functional.one_hot(torch.randint(m, (batch, n), generator=gen), m).bool().to(device)

        def gold_score(lane):
            return structs.crf_log_partition(structs.ChainScores(em, trans, start, end), lengths, label_mask=gold,
                                             lane=lane)

        rows.append(("chain-1", "log S fwd+bwd (gold labels), ChainScores", shape, "gold",
                     *alternate(fwd_bwd(lambda: gold_score("gold"), factors), fwd_bwd(lambda: gold_score("reference"), factors),
                                repeats, device)))
        if cpu:
            def decode(lane):
                with torch.no_grad():
                    scores = structs.ChainScores(em.detach(), trans.detach(), start.detach(), end.detach())
                    return structs.crf_viterbi(scores, lengths, lane=lane).score

            rows.append(("chain-1", "Viterbi, ChainScores", shape, "compiled",
                         *alternate(lambda: decode("compiled"), lambda: decode("reference"), repeats, device)))
        trigram = draw(m + 1, m + 1, m)

        def second(lane, form):
            scores = structs.SecondOrderScores(em, trigram)
            return structs.crf_log_partition(scores if form == "factors" else scores.potentials(lengths), lengths,
                                             lane=lane)

        rows.append(("chain-2", "log Z fwd+bwd, SecondOrderScores", shape, "trigram",
                     *alternate(fwd_bwd(lambda: second("trigram", "factors"), [em, trigram]),
                                fwd_bwd(lambda: second("reference", "factors"), [em, trigram]), repeats, device)))
    return rows


def constraint_rows(batch: int, repeats: int, device: str = "cpu") -> List[Tuple[str, str, float, float]]:
    """(call, shape, constrained s, unconstrained s): each chain call on the same random scores (std 1,
    float32, on ``device``), with the constraints of 6 entity types, BIO (M = 13) and BILUO (M = 25),
    applied by :func:`structs.constrain` inside the timed call (start and end rules on every sentence),
    and without."""
    rows = []
    draw, gen = drawer(device)

    for scheme, n in (("BIO", 20), ("BIO", 40), ("BILUO", 20), ("BILUO", 40)):
        labels = structs.entity_labels([f"T{k}" for k in range(6)], scheme)
        allowed = structs.Transitions(*(x.to(device) for x in structs.allowed_transitions(labels, scheme)))
        m = len(labels)
        lengths = torch.randint(n // 2, n + 1, (batch,), generator=gen).to(device)
        lengths[0] = n
        em, trans, start, end, trigram = draw(batch, n, m), draw(m, m), draw(m), draw(m), draw(m + 1, m + 1, m)
        shape = f"n<={n}, M={m} ({scheme})"

        def first(constrained: bool):
            scores = structs.ChainScores(em, trans, start, end)
            scores = structs.constrain(scores, allowed, lengths) if constrained else scores
            return structs.crf_log_partition(scores, lengths)

        def potentials(constrained: bool):
            scores = structs.chain_potentials(em, trans, lengths, start=start, end=end)
            scores = structs.constrain(scores, allowed, lengths) if constrained else scores
            return structs.crf_log_partition(scores, lengths)

        def second(constrained: bool):
            scores = structs.SecondOrderScores(em, trigram)
            scores = structs.constrain(scores, allowed, lengths) if constrained else scores
            return structs.crf_log_partition(scores, lengths)

        rows.append(("chain-1 log Z fwd+bwd, ChainScores", shape,
                     *alternate(fwd_bwd(lambda: first(True), [em, trans, start, end]),
                                fwd_bwd(lambda: first(False), [em, trans, start, end]), repeats, device)))
        rows.append(("chain-1 log Z fwd+bwd, potentials", shape,
                     *alternate(fwd_bwd(lambda: potentials(True), [em, trans, start, end]),
                                fwd_bwd(lambda: potentials(False), [em, trans, start, end]), repeats, device)))
        rows.append(("chain-2 log Z fwd+bwd, SecondOrderScores", shape,
                     *alternate(fwd_bwd(lambda: second(True), [em, trigram]),
                                fwd_bwd(lambda: second(False), [em, trigram]), repeats, device)))

        def decode(constrained: bool):
            with torch.no_grad():
                scores = structs.ChainScores(em.detach(), trans.detach(), start.detach(), end.detach())
                scores = structs.constrain(scores, allowed, lengths) if constrained else scores
                return structs.crf_viterbi(scores, lengths).score

        rows.append(("chain-1 Viterbi, ChainScores", shape,
                     *alternate(lambda: decode(True), lambda: decode(False), repeats, device)))
    return rows


def scale_rows(batch: int, repeats: int, peers: bool, device: str = "cpu") -> List[Tuple[float, List[str]]]:
    """Per score std: forward+backward seconds of the tree's log Z (dense, n=30, M=17) and the chain's
    (n=30, M=17; potentials, then ChainScores), and their ratios to pytorch-crf at the same scale
    (alternating, each against its own peer runs), on ``device``."""
    rows = []
    for scale in (1.0, 10.0, 30.0, 100.0):
        gen = torch.Generator().manual_seed(int(scale))
        scores = (scale * torch.randn(batch, 31, 31, 17, 17, generator=gen)).to(device).requires_grad_(True)
        lengths = torch.full((batch,), 30, device=device)

        def tree():
            structs.log_partition(scores, lengths).sum().backward()
            scores.grad = None

        tree_s, _ = alternate(tree, lambda: None, max(1, repeats // 3), device)
        crf, em, _, cl, mask = chain_inputs(batch, 30, 17, scale, device=device)

        def chain():
            structs.crf_log_partition(our_potentials(crf, em, cl), cl).sum().backward()

        def factored():
            structs.crf_log_partition(_our_factored(crf, em), cl).sum().backward()

        def theirs():
            crf._compute_normalizer(em.transpose(0, 1), mask.t()).sum().backward()

        chain_s, peer_s = alternate(chain, theirs if peers else (lambda: None), repeats, device)
        factored_s, peer_s2 = alternate(factored, theirs if peers else (lambda: None), repeats, device)
        cells = [f"{tree_s:.3f}", f"{chain_s * 1e3:.2f}", f"{factored_s * 1e3:.2f}"]
        if peers:
            cells += [f"{peer_s * 1e3:.2f}", f"{chain_s / peer_s:.2f}", f"{factored_s / peer_s2:.2f}"]
        rows.append((scale, cells))
    return rows


# -- accuracy -----------------------------------------------------------------------------------------


def _host64(t: torch.Tensor) -> torch.Tensor:
    return t.detach().cpu().double()


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = _host64(a), _host64(b)
    return float(((a - b).abs() / b.abs().clamp_min(1e-300)).max())


def _abs(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((_host64(a) - _host64(b)).abs().max())


def accuracy_rows(peers: bool, device: str = "cpu") -> List[Tuple[float, List[str]]]:
    """Per scale: float32 errors on ``device`` against float64 references on the CPU, as table cells."""

    def on(t: torch.Tensor) -> torch.Tensor:  # a float32 copy on the device under test
        return t.detach().float().to(device)

    rows = []
    for scale in SCALES:
        cells = []
        # the NLDM's labelled tree, dense scores, B=4, n=8, M=4: reference = the reference lane in float64
        gen = torch.Generator().manual_seed(int(scale))
        scores = (scale * torch.randn(4, 9, 9, 4, 4, generator=gen)).double()
        lengths = torch.tensor([8, 6, 8, 3])
        ref = structs.log_partition(scores, lengths, lane="reference")
        ref_marg = structs.marginals(scores, lengths).labels  # float64: exact (tested against the reference)
        dl = lengths.to(device)
        got = structs.log_partition(on(scores), dl)
        cells += [f"{_rel(got, ref):.1e}", f"{_abs(structs.marginals(on(scores), dl).labels, ref_marg):.1e}"]
        # unlabelled tree (M=1), B=4, n=12
        S = (scale * torch.randn(4, 12, 12, generator=gen)).double()
        tl = torch.full((4,), 12)
        ref_tree = structs.log_partition(_our_tree(S), tl, lane="reference")
        ref_tree_marg = structs.marginals(_our_tree(S), tl).arcs
        dtl = tl.to(device)
        cells += [f"{_rel(structs.log_partition(_our_tree(on(S)), dtl), ref_tree):.1e}",
                  f"{_abs(structs.marginals(_our_tree(on(S)), dtl).arcs, ref_tree_marg):.1e}"]
        if peers:
            import torch_struct

            # torch-struct fails on a leaf that does not require grad
            dist = torch_struct.DependencyCRF(on(S).requires_grad_(True), lengths=dtl, multiroot=True)
            theirs = dist.partition
            their_marg = _our_tree(dist.marginals.detach())  # same layout as ours, but for the self-arcs:
            their_marg.diagonal(0, 1, 2).zero_()  # their diagonal (the root's arcs) was copied there too
            cells += [f"{_rel(theirs, ref_tree):.1e}", f"{_abs(their_marg, ref_tree_marg):.1e}"]
        # first-order chain, B=4, n=30, M=17: reference = our log-space chain in float64 (torch-struct and
        # pytorch-crf in float64 agree with it to 1e-12)
        crf, em, _, cl, mask = chain_inputs(4, 30, 17, scale, torch.float64)
        dcl = cl.to(device)
        with torch.no_grad():
            pot = our_potentials(crf, em, cl)
            ref_chain = structs.crf_log_partition(pot, cl)
            ref_chain_marg = structs.crf_marginals(pot, cl)
            cells += [f"{_rel(structs.crf_log_partition(on(pot), dcl), ref_chain):.1e}",
                      f"{_abs(structs.crf_marginals(on(pot), dcl), ref_chain_marg):.1e}"]
            factored32 = structs.ChainScores(*(on(x) for x in (em, crf.transitions, crf.start_transitions,
                                                               crf.end_transitions)))
            cells += [f"{_rel(structs.crf_log_partition(factored32, dcl), ref_chain):.1e}",
                      f"{_abs(structs.crf_marginals(factored32, dcl), ref_chain_marg):.1e}"]
        if peers:
            crf32 = crf.float().to(device)
            em32 = on(em).requires_grad_(True)
            z = crf32._compute_normalizer(em32.transpose(0, 1), mask.to(device).t())
            (marg,) = torch.autograd.grad(z.sum(), em32)
            cells += [f"{_rel(z, ref_chain):.1e}", f"{_abs(marg, ref_chain_marg):.1e}"]
            dist = _torch_struct_chain(crf32, on(em).requires_grad_(True), dcl)
            edge_marg = dist.marginals.detach()  # (B, N-1, C, C) [current, previous]
            labels = torch.cat([edge_marg[:, :1].sum(2), edge_marg.sum(3)], 1)
            cells += [f"{_rel(dist.partition, ref_chain):.1e}", f"{_abs(labels, ref_chain_marg):.1e}"]
        rows.append((scale, cells))
    return rows


def accuracy_header(peers: bool) -> str:
    columns = ["NLDM tree M=4 log Z", "label marg.", "tree M=1 log Z", "arc marg."]
    if peers:
        columns += ["torch-struct tree log Z", "arc marg."]
    columns += ["chain-1 log Z", "marg.", "ChainScores log Z", "marg."]
    if peers:
        columns += ["pytorch-crf log Z", "marg.", "torch-struct chain log Z", "marg."]
    return "| score std | " + " | ".join(columns) + " |\n|---|" + "---|" * len(columns)


# -- another checkout ------------------------------------------------------------------------------


def load_baseline(path: Path):
    """``path/spacy_nldm/structs`` imported as a separate package (its modules import each other
    relatively), so that it runs in this process beside the current one."""
    source = Path(path) / "spacy_nldm" / "structs"
    if not (source / "__init__.py").exists():
        raise FileNotFoundError(f"no spacy_nldm/structs package under {path}")
    root = Path(tempfile.mkdtemp(prefix="nldm-baseline-"))
    atexit.register(shutil.rmtree, root, True)
    shutil.copytree(source, root / "baseline_structs")
    sys.path.insert(0, str(root))
    try:
        return importlib.import_module("baseline_structs")
    finally:
        sys.path.remove(str(root))


def baseline_rows(baseline, batch: int, shapes: List[Tuple[int, int, Optional[int]]], repeats: int,
                  device: str = "cpu"):
    """(row, project s, baseline s) on ``device``, random scores of std 1: per shape (n, M, max_dist), the
    tree's log Z forward+backward and its Viterbi (the same structure asserted); per M, the factored
    chain's (ChainScores, n) log Z forward+backward."""
    rows = []
    for n, m, k in shapes:
        gen = torch.Generator().manual_seed(0)
        scores = torch.randn(batch, n + 1, n + 1, m, m, generator=gen).to(device).requires_grad_(True)
        lengths = torch.full((batch,), n, device=device)

        def ours(module=structs):
            module.log_partition(scores, lengths, max_dist=k).sum().backward()
            scores.grad = None

        def decode(module=structs):
            return module.viterbi(scores.detach(), lengths, max_dist=k)

        mine, theirs = decode(), decode(baseline)
        if not (torch.equal(mine.labels, theirs.labels) and torch.equal(mine.heads, theirs.heads)):
            raise AssertionError(f"Viterbi differs from the baseline's at n={n}, M={m}, max_dist={k}")
        shape = f"B={batch}, n={n}, M={m}, max_dist={k}"
        rows.append((f"tree log Z fwd+bwd, {shape}", *alternate(ours, lambda: ours(baseline), repeats, device)))
        rows.append((f"tree Viterbi, {shape}", *alternate(decode, lambda: decode(baseline), repeats, device)))
    for n, m in sorted({(n, m) for n, m, _ in shapes}):
        gen = torch.Generator().manual_seed(m)
        parts = [torch.randn(batch, n, m, generator=gen)] + [torch.randn(*shape, generator=gen) for shape in ((m, m), (m,), (m,))]
        leaves = [p.to(device).requires_grad_(True) for p in parts]
        lengths = torch.full((batch,), n, device=device)

        def chain(module=structs):
            module.crf_log_partition(module.ChainScores(*leaves), lengths).sum().backward()

        rows.append((f"ChainScores log Z fwd+bwd, B={batch}, n={n}, M={m}",
                     *alternate(chain, lambda: chain(baseline), repeats, device)))
    return rows


def quiet():
    """The peers warn about deprecated calls on every use."""
    warnings.filterwarnings("ignore", module="torch_struct")
    warnings.filterwarnings("ignore", module="torchcrf")
    warnings.filterwarnings("ignore", message=".*arg_constraints.*")
    warnings.filterwarnings("ignore", message=".*uint8 condition.*")
