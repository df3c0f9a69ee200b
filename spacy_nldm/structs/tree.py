"""Labelled projective dependency trees over a label sequence: the NLDM's inside, Viterbi and marginals.

Conventions (shared by every public function here):

- ``scores[b, h, d, a, c]``, shape (B, N+1, N+1, M, M): score of the arc h -> d when the head h
  carries label a and the dependent d carries label c. Position 0 is the root; its label is
  index 0, so of the root's rows only ``scores[:, 0, :, 0, :]`` is read. Arcs into the root
  and self-arcs are never read. Or :class:`DirectionalScores` (B, N, 2, M+1, M), arc scores that
  do not depend on the head's position, read in that compact form.
- ``lengths[b]``: an integer tensor (B,), the number of real tokens (positions 1..lengths[b]);
  scores beyond it are never read and may hold anything.
- ``label_mask`` (B, N+1, M) bool: labels allowed at each position (row 0 is ignored).
- ``max_dist=k``: arcs longer than k are dropped, root arcs included; the incomplete items then
  exist only for spans of width <= k: time O(n k^2 M^2), memory O(n k M^2).
- ``arc_mask`` (B or 1, N+1, N+1) bool: allowed arcs h -> d.

Scores are float32 or float64; -inf marks an impossible arc. A sentence with a position that allows
no label, or without any tree of finite score, is impossible: its log Z and best score are -inf, its
marginals and gradient 0, its decoded labels and heads 0. +inf or NaN in a score that is read raises
a ValueError naming the sentence and the arc. Every result is exact in float32 and float64 at any
score scale (exp-space contractions are checked and redone in log space where they could lose mass,
see :mod:`.contract`).

The algorithm is in :mod:`.inside` (the stages), :mod:`.outside` (the backward passes), :mod:`.charts`
(the chart layouts), :mod:`.contract` (the contractions) and :mod:`.arcs`; docs/algorithm.md maps the
paper's recurrences to the code. On the CPU, log Z of :class:`DirectionalScores` without masks (what the
components train and decode with) runs in :mod:`.compiled` instead: the same recurrences, one compiled
loop per sentence, its outside pass in the same call; so does log Z of dense scores with one label (the
gold labels' arcs, log S), in :mod:`.single_label`. ``compiled.enabled = False`` (or the environment
variable ``SPACY_NLDM_COMPILED=0``) sends everything through the torch stages.
"""
from typing import NamedTuple, Optional, Tuple

import torch

from .arcs import ArcScores, DenseArcs, DirectionalArcs, DirectionalScores
from . import compiled, single_label
from .checks import Decoded, check_label_mask, check_lengths, check_scores, raise_if_not_finite
from .inside import Inside
from .outside import backtrack, outside_by_recomputation, outside_log, outside_log_space
from .semiring import LogSemiring, MaxSemiring, Semiring, as_semiring

Tensor = torch.Tensor


class Marginals(NamedTuple):
    """``arcs``: d log Z / d scores, shaped like the scores given (the dense tensor: P(arc h -> d with
    labels a, c); DirectionalScores: the same summed over the head positions F stands for);
    ``labels`` (B, N, M): P(y_d = c | x) for tokens 1..N. Both 0 beyond lengths."""

    arcs: Tensor
    labels: Tensor


def log_partition(
    scores,
    lengths: Tensor,
    *,
    label_mask: Optional[Tensor] = None,
    max_dist: Optional[int] = None,
    arc_mask: Optional[Tensor] = None,
    semiring=LogSemiring,
) -> Tensor:
    """log of the sum over label sequences and projective trees of exp(tree score), shape (B,).

    With ``label_mask`` set to the gold labels this is log S(x, y); without it, log Z(x).
    Differentiable: its gradient with respect to the scores is the arc marginals. ``semiring`` (an
    instance or a class, see :mod:`.semiring`) may be :class:`~.semiring.BroadcastLogSemiring`, the
    slow reference, or :class:`~.semiring.MaxSemiring` (the best score; its gradient marks the best tree).
    """
    problem = _prepare(scores, lengths, label_mask, arc_mask, max_dist)
    semiring = as_semiring(semiring)
    root = None
    if _compiled_lane(semiring, problem, label_mask):
        factors = _factors(scores, problem)
        if factors is not None:  # token-independent scores: emissions and one table (see DirectionalScores)
            root = _CompiledFactoredInside.apply(*factors, problem.arcs.bias, problem)
        else:
            root = _CompiledInside.apply(problem.arcs.tensor, problem.arcs.bias, problem)
    elif _single_label_lane(semiring, problem, label_mask):
        root = _CompiledSingleLabel.apply(problem.arcs.tensor, problem)
    if root is not None and not bool((torch.isfinite(root) | torch.isneginf(root)).all()):
        root = None  # +inf or NaN read somewhere: the torch stages name it
    if root is None:
        root = _Inside.apply(semiring, problem.arcs.tensor, problem.arcs.bias, problem)
    result = torch.where(problem.impossible, float("-inf"), root)
    raise_if_not_finite(result, lambda b: _bad_arc(problem, b))
    return result


def viterbi(
    scores,
    lengths: Tensor,
    *,
    label_mask: Optional[Tensor] = None,
    max_dist: Optional[int] = None,
    arc_mask: Optional[Tensor] = None,
) -> Decoded:
    """Best joint (labels, tree), the paper's approximate MAP: :class:`~.checks.Decoded` with
    ``labels`` (B, N) label ids of tokens 1..N, ``heads`` (B, N) head positions in 0..N (0 = root)
    and ``score`` (B,)."""
    problem = _prepare(scores, lengths, label_mask, arc_mask, max_dist)
    with torch.no_grad():
        inside = Inside(MaxSemiring(), problem.arcs.detach(), problem.allowed, problem.lengths, problem.limit)
        best = torch.where(problem.impossible, float("-inf"), inside.run())
        raise_if_not_finite(best, lambda b: _bad_arc(problem, b))
        marked = _MarkedArcs(best.shape[0], problem.arcs.shape[1], inside.limit, best.device)
        for w, marks in backtrack(inside, (best > float("-inf")).to(best.dtype)):
            marked.add(w, marks)
        labels, heads = marked.decode(problem.arcs.shape[-1])
    return Decoded(labels, heads, best)


class _MarkedArcs:
    """The arcs the backtrack marks, by dependent: for each position j (B, N+1) and each width w and
    direction, the largest mark of the arcs into j and where it is in the (M, M) label grid. Filled by
    whole slices, one width at a time, and decoded once: nothing waits for the device (a ``nonzero``
    per width would stall a GPU's queue twice per width)."""

    def __init__(self, batch: int, positions: int, limit: int, device):
        # [..., 0, w-1]: the arc (j-w) -> j, from the right; [..., 1, w-1]: the arc (j+w) -> j, from the left
        widths = max(limit, 1)  # limit 0 (no tokens): nothing is marked, every label and head 0
        self.mark = torch.zeros(batch, positions, 2, widths, device=device)
        self.where = torch.zeros(batch, positions, 2, widths, dtype=torch.long, device=device)

    def add(self, w: int, marks) -> None:
        """The marks (:class:`~.arcs.WidthArcs`, (B, S, M, M) [label of s, label of s+w]) of width w."""
        spans = marks.right.shape[1]
        for direction, marked, deps in ((0, marks.right, slice(w, w + spans)), (1, marks.left, slice(0, spans))):
            value, index = marked.flatten(2).max(-1)  # (B, S): a tree has at most one arc per span and direction
            self.mark[:, deps, direction, w - 1] = value
            self.where[:, deps, direction, w - 1] = index

    def decode(self, m: int):
        """labels, heads (B, N): each token's label and head position (0 = the root), 0 where unmarked."""
        widths = self.mark.shape[3]
        value, pick = self.mark.flatten(2).max(-1)  # (B, N+1): the one marked (direction, width)
        index = self.where.flatten(2).gather(2, pick[:, :, None]).squeeze(2)
        direction, width = pick // widths, pick % widths + 1
        position = torch.arange(self.mark.shape[1], device=value.device)
        # from the right, the dependent is s+w: its label is c (index % M); from the left it is s: label a
        heads = torch.where(direction == 0, position - width, position + width)
        labels = torch.where(direction == 0, index % m, index // m)
        marked = value > 0
        return torch.where(marked, labels, 0)[:, 1:], torch.where(marked, heads, 0)[:, 1:]


def marginals(
    scores,
    lengths: Tensor,
    *,
    label_mask: Optional[Tensor] = None,
    max_dist: Optional[int] = None,
    arc_mask: Optional[Tensor] = None,
) -> Marginals:
    """Posterior marginals of arcs and labels (:class:`Marginals`), from the gradient of log Z."""
    arcs, labels, factor = _marginals(scores, lengths, label_mask, max_dist, arc_mask)
    if isinstance(scores, DirectionalScores):
        arcs = arcs * factor[:, :, None, None, None]
    else:
        arcs = arcs * torch.cat([factor.new_zeros(factor.shape[0], 1), factor], 1)[:, None, :, None, None]
    return Marginals(arcs, labels)


def label_marginals(
    scores,
    lengths: Tensor,
    *,
    label_mask: Optional[Tensor] = None,
    max_dist: Optional[int] = None,
    arc_mask: Optional[Tensor] = None,
) -> Tensor:
    """P(y_d = c | x), (B, N, M): :func:`marginals`' ``labels``, without the arc marginals (on the compiled
    lane they are not even written)."""
    if isinstance(scores, DirectionalScores) and label_mask is None and arc_mask is None:
        problem = _prepare(scores, lengths, label_mask, arc_mask, max_dist)
        if _compiled_lane(LogSemiring(), problem, label_mask):
            factors = _factors(scores, problem)
            if factors is not None:
                log_z, packed, _, _, real = compiled.inside_outside_factored(
                    *factors, problem.arcs.bias, problem.lengths, problem.limit, True, with_bias_grad=False)
            else:
                log_z, _, _, packed, real = compiled.inside_outside(scores.F, problem.arcs.bias, problem.lengths,
                                                                   problem.limit, True, with_arcs=False)
            if bool((torch.isfinite(log_z) | torch.isneginf(log_z)).all()):
                labels = torch.zeros(real.shape + (scores.F.shape[-1],), dtype=torch.float64)
                labels[real] = packed
                return (labels * _sum_to_one(labels).unsqueeze(-1)).to(scores.F.dtype)
    return _marginals(scores, lengths, label_mask, max_dist, arc_mask)[1]


def _marginals(scores, lengths, label_mask, max_dist, arc_mask):
    """The arc marginals (unnormalised), the label marginals and each token's normalising factor (B, N)."""
    directional = isinstance(scores, DirectionalScores)
    tensor = scores.F if directional else scores
    check_scores(tensor)
    with torch.enable_grad():
        leaf = tensor.detach().requires_grad_(True)
        bias = scores.distance_bias.detach() if directional and scores.distance_bias is not None else None
        log_z = log_partition(DirectionalScores(leaf, bias, scores.token_independent) if directional else leaf, lengths,
                              label_mask=label_mask,
                              max_dist=max_dist, arc_mask=arc_mask)
        (arcs,) = torch.autograd.grad(log_z.sum(), leaf)
    labels = arcs.sum(dim=(2, 3)) if directional else arcs.sum(dim=(1, 3))[:, 1:]
    factor = _sum_to_one(labels)
    return arcs, labels * factor.unsqueeze(-1), factor


def _sum_to_one(labels: Tensor) -> Tensor:
    """(B, N) the factor that makes each token's label marginals (B, N, M) sum to 1 (0 where they are all 0).
    Every token of a possible sentence has one head and one label, so its marginals sum to 1: dividing by
    the computed sum removes the rounding that tied structures (equal scores, summed in different orders)
    pick up at large scores, ~1e-3 absolute at scores of 1e4 in float32."""
    total = labels.sum(-1)
    return torch.where(total > 0, 1.0 / total, 0.0)


def count_trees(n: int, max_dist: Optional[int] = None) -> int:
    """Number of projective trees over n tokens with a free root (1, 3, 12, 55, 273, ...).

    Runs the inside algorithm on zero scores with one label, so it checks the recurrences too.
    """
    scores = torch.zeros(1, n + 1, n + 1, 1, 1, dtype=torch.float64)
    log_z = log_partition(scores, torch.tensor([n]), max_dist=max_dist)
    return int(round(float(log_z.exp())))


class _Problem(NamedTuple):
    arcs: ArcScores
    allowed: Tensor  # (B, N+1, M) bool: the labels each position may take
    lengths: Tensor  # (B,) long, 0 for impossible sentences
    impossible: Tensor  # (B,) bool
    limit: int  # K, the longest arc


def _prepare(scores, lengths, label_mask, arc_mask, max_dist) -> _Problem:
    """Check the inputs; the arcs, allowed labels and lengths the inside pass reads."""
    bias = None
    if isinstance(scores, DirectionalScores):
        tensor, shape, source = scores.F, scores.shape, DirectionalArcs
        check_scores(tensor, "directional scores")
        if scores.distance_bias is not None:
            check_scores(scores.distance_bias, "distance_bias")
            if not bool(torch.isfinite(scores.distance_bias).all()):
                raise ValueError(f"distance_bias must be finite, got {scores.distance_bias.tolist()}")
            bias = scores.distance_bias.to(device=tensor.device, dtype=tensor.dtype)
    else:
        check_scores(scores)
        if scores.dim() != 5 or scores.shape[1] != scores.shape[2] or scores.shape[3] != scores.shape[4]:
            raise ValueError(f"scores must have shape (B, N+1, N+1, M, M), got {tuple(scores.shape)}")
        tensor, shape, source = scores, tuple(scores.shape), DenseArcs
    batch, n1, _, m, _ = shape
    device = tensor.device
    lengths = check_lengths(lengths, batch, n1 - 1, device)
    if max_dist is not None and (isinstance(max_dist, bool) or int(max_dist) != max_dist or max_dist < 1):
        raise ValueError(f"max_dist must be a positive integer (or None), got {max_dist!r}")
    limit = n1 - 1 if max_dist is None else min(int(max_dist), n1 - 1)
    if arc_mask is not None:
        if arc_mask.dim() != 3 or arc_mask.shape[0] not in (1, batch) or tuple(arc_mask.shape[1:]) != (n1, n1):
            raise ValueError(f"arc_mask must have shape ({batch} or 1, {n1}, {n1}), got {tuple(arc_mask.shape)}")
        arc_mask = arc_mask.to(device=device, dtype=torch.bool)
    mask = check_label_mask(label_mask, (batch, n1, m))
    positions = torch.arange(n1, device=device)
    real = (positions[None, :] >= 1) & (positions[None, :] <= lengths[:, None])  # (B, N+1) tokens
    allowed = real[..., None].expand(batch, n1, m) if mask is None else real[..., None] & mask.to(device)
    impossible = (real & ~allowed.any(-1)).any(-1)  # a token that allows no label
    lengths = torch.where(impossible, 0, lengths)
    allowed = allowed & (positions[None, :] <= lengths[:, None])[..., None]
    root = torch.zeros(m, dtype=torch.bool, device=device)
    root[0] = True
    allowed = torch.cat([root.expand(batch, 1, m), allowed[:, 1:]], dim=1)  # the root carries label 0
    return _Problem(source(tensor, lengths, arc_mask, shape, bias), allowed, lengths, impossible, limit)


class _Inside(torch.autograd.Function):
    """Root items T[0, 0] (B,) in the semiring; the backward pass by the semiring's strategy.

    The forward pass fills the charts stage by stage without an autograd graph; the backward pass goes
    over the stages in reverse and pushes the gradient into the arcs, memory O(B n k M^2).
    """

    @staticmethod
    def forward(ctx, semiring: Semiring, tensor: Tensor, bias: Optional[Tensor], problem: _Problem) -> Tensor:
        """``tensor`` and ``bias`` are ``problem.arcs.tensor`` and ``.bias``, passed so that autograd sees them."""
        inside = Inside(semiring, problem.arcs.detach(), problem.allowed, problem.lengths, problem.limit)
        root = inside.run()
        ctx.inside = inside
        return root

    @staticmethod
    def backward(ctx, grad_root: Tensor):
        inside = ctx.inside
        possible = inside.charts.tail.log[:, 0, 0] > float("-inf")
        grad_root = torch.where(possible, grad_root, 0.0)
        strategy = inside.semiring.backward
        if strategy == "outside":
            grad = outside_log(inside, grad_root) if inside.exp_space else outside_log_space(inside, grad_root)
        elif strategy == "recompute":
            grad = outside_by_recomputation(inside, grad_root)
        else:
            grad = inside.arcs.new_grad(inside.limit)
            for w, marks in backtrack(inside, grad_root):
                inside.arcs.add_grad(grad, w, marks)
        if not bool(possible.all()):  # a sentence without a finite tree: gradient 0, never NaN
            grad = torch.where(possible.reshape(-1, *((1,) * (grad.dim() - 1))), grad, 0.0)
        return None, grad, inside.arcs.bias_grad, None


def _compiled_lane(semiring: Semiring, problem: _Problem, label_mask: Optional[Tensor]) -> bool:
    """Whether :mod:`.compiled` computes this log Z: the log semiring itself, DirectionalScores on the CPU,
    no label or arc mask (anything else, and ``compiled.enabled = False``: the torch stages of :mod:`.inside`;
    a score of +inf or NaN is sent there too, which names it)."""
    return isinstance(problem.arcs, DirectionalArcs) and _compiled_case(semiring, problem, label_mask)


def _single_label_lane(semiring: Semiring, problem: _Problem, label_mask: Optional[Tensor]) -> bool:
    """Whether :mod:`.single_label` computes this log Z: dense scores with one label (M = 1: the gold labels'
    arcs, log S), the log semiring, on the CPU, no label or arc mask."""
    arcs = problem.arcs
    return isinstance(arcs, DenseArcs) and arcs.tensor.shape[-1] == 1 and _compiled_case(semiring, problem, label_mask)


def _compiled_case(semiring: Semiring, problem: _Problem, label_mask: Optional[Tensor]) -> bool:
    """What both compiled loops need: numba (and ``compiled.enabled``), the log semiring itself, the CPU, no
    label or arc mask, an arc limit of at least 1."""
    arcs = problem.arcs
    return (compiled.enabled and compiled.available() and type(semiring) is LogSemiring and label_mask is None
            and arcs.arc_mask is None and arcs.tensor.device.type == "cpu" and problem.limit >= 1)


def _factors(scores, problem: _Problem) -> Optional[Tuple[Tensor, Tensor]]:
    """For token-independent DirectionalScores: (emissions (B, N, M), table (2, M+1, M)) with
    F[b, d, x, a, c] = emissions[b, d, c] + table[x, a, c]: the emissions are F[:, :, 0, 1] (F's dtype, so
    that log Z keeps it) and the table is the first real token's F relative to that row (the difference
    taken in float64, where it is exact). Differentiable functions of F; None otherwise."""
    if not (isinstance(scores, DirectionalScores) and scores.token_independent):
        return None
    filled = (problem.lengths > 0).nonzero()
    if len(filled) == 0:
        return None
    F = problem.arcs.tensor
    first = F[int(filled[0]), 0].to(torch.float64)  # (2, M+1, M)
    return F[:, :, 0, 1], first - first[0, 1]


class _CompiledFactoredInside(torch.autograd.Function):
    """log Z (B,) by the compiled inside pass on emissions (B, N, M) and one table (2, M+1, M); the outside
    pass runs in the same call when a gradient will be asked for (the label marginals for the emissions,
    the summed arc marginals for the table)."""

    @staticmethod
    def forward(ctx, emissions: Tensor, table: Tensor, bias: Optional[Tensor], problem: _Problem) -> Tensor:
        with_grad = any(ctx.needs_input_grad[:3])
        log_z, d_emissions, d_table, d_bias, real = compiled.inside_outside_factored(
            emissions, table, bias, problem.lengths, problem.limit, with_grad)
        ctx.grads, ctx.real, ctx.shape = (d_emissions, d_table, d_bias), real, emissions.shape
        ctx.dtypes = (emissions.dtype, table.dtype, None if bias is None else bias.dtype)
        return log_z.to(emissions.dtype)

    @staticmethod
    def backward(ctx, grad_root: Tensor):
        d_emissions, d_table, d_bias = ctx.grads  # float64; emissions packed over the real tokens
        scale = grad_root.to(torch.float64)
        out_e = out_t = out_b = None
        if ctx.needs_input_grad[0]:
            out_e = torch.zeros(ctx.shape, dtype=torch.float64)
            out_e[ctx.real] = d_emissions * scale[:, None].expand(ctx.real.shape)[ctx.real][:, None]
            out_e = out_e.to(ctx.dtypes[0])
        if ctx.needs_input_grad[1]:
            out_t = (d_table * scale.reshape(-1, 1, 1, 1)).sum(0).to(ctx.dtypes[1])
        if ctx.needs_input_grad[2]:
            out_b = (d_bias * _per_sentence(scale, d_bias)).sum(0).to(ctx.dtypes[2])
        return out_e, out_t, out_b, None


class _CompiledSingleLabel(torch.autograd.Function):
    """log Z (B,) of dense one-label scores (B, N+1, N+1, 1, 1) by :mod:`.single_label`; its outside pass runs
    in the same call when a gradient will be asked for."""

    @staticmethod
    def forward(ctx, tensor: Tensor, problem: _Problem) -> Tensor:
        log_z, grad = single_label.inside_outside(tensor[..., 0, 0], problem.lengths, problem.limit,
                                                  ctx.needs_input_grad[0])
        ctx.grad = grad
        return log_z.to(tensor.dtype)

    @staticmethod
    def backward(ctx, grad_root: Tensor):
        grad = ctx.grad * grad_root.to(torch.float64).reshape(-1, 1, 1)
        return grad[..., None, None].to(grad_root.dtype), None


class _CompiledInside(torch.autograd.Function):
    """log Z (B,) by the compiled inside pass; its outside pass runs in the same call when a gradient
    will be asked for, and the backward pass only scales it."""

    @staticmethod
    def forward(ctx, tensor: Tensor, bias: Optional[Tensor], problem: _Problem) -> Tensor:
        with_grad = any(ctx.needs_input_grad[:2])
        log_z, grad, grad_bias, _, real = compiled.inside_outside(tensor, bias, problem.lengths, problem.limit,
                                                                 with_grad)
        ctx.grads, ctx.real, ctx.shape = (grad, grad_bias), real, tensor.shape
        return log_z.to(tensor.dtype)

    @staticmethod
    def backward(ctx, grad_root: Tensor):
        grad, grad_bias = ctx.grads  # packed over the real tokens, float64
        scale = grad_root.to(torch.float64)
        d_tensor = d_bias = None
        if ctx.needs_input_grad[0]:
            if not bool((scale == 1.0).all()):  # (a loss's sum of log Z: all 1, nothing to scale)
                grad = grad * scale[:, None].expand(ctx.real.shape)[ctx.real].reshape(-1, 1, 1, 1)
            d_tensor = grad_root.new_zeros(ctx.shape)
            d_tensor[ctx.real] = grad.to(grad_root.dtype)
        if ctx.needs_input_grad[1]:
            d_bias = (grad_bias * _per_sentence(scale, grad_bias)).sum(0).to(grad_root.dtype)
        return d_tensor, d_bias, None


def _per_sentence(scale: Tensor, grads: Tensor) -> Tensor:
    """``scale`` (B,) shaped to multiply per-sentence gradients (B, ...)."""
    return scale.reshape(-1, *(1,) * (grads.dim() - 1))


def _bad_arc(problem: _Problem, b: int) -> str:
    """The first arc of sentence b that is read and holds +inf or NaN."""
    arcs = problem.arcs
    for w in range(1, problem.limit + 1):
        for name, raw, ok in zip(("right", "left"), arcs.raw(w, arcs.tensor.detach()), arcs.allowed(w)):
            bad = (torch.isnan(raw[b]) | (raw[b] == float("inf"))) & ok[b][:, None, None]
            if bool(bad.any()):
                s, a, c = bad.nonzero()[0].tolist()
                head, dep = (s, s + w) if name == "right" else (s + w, s)
                head_label, dep_label = (a, c) if name == "right" else (c, a)
                where = (
                    f"DirectionalScores F[{b}, {dep - 1}, {int(head > dep)}, {head_label + 1 if head else 0}, {dep_label}]"
                    if isinstance(arcs, DirectionalArcs) else f"scores[{b}, {head}, {dep}, {head_label}, {dep_label}]"
                )
                return f"the arc {head} -> {dep} (labels {head_label}, {dep_label}) is {raw[b][s, a, c].item()} ({where})"
    return "its result is not finite"
