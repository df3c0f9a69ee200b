"""Labelled projective dependency trees over a label sequence: the NLDM's inside, Viterbi and marginals.

Conventions (shared by every public function here):

- ``scores[b, h, d, a, c]``, shape (B, N+1, N+1, M, M): score of the arc h -> d when the head h
  carries label a and the dependent d carries label c. Position 0 is the root; its label is
  index 0, so of the root's rows only ``scores[:, 0, :, 0, :]`` is read. Arcs into the root
  and self-arcs are never read.
- ``lengths[b]``: number of real tokens (positions 1..lengths[b]); scores beyond it are ignored.
- ``label_mask`` (B, N+1, M) bool: labels allowed at each position (row 0 is ignored).
- ``max_dist=k``: arcs longer than k are dropped, root arcs included; the incomplete items then
  exist only for spans of width <= k, which cuts the work from O(n^3 M^2) to O(n^2 k M^2).
- ``arc_mask`` (B or 1, N+1, N+1) bool: allowed arcs h -> d.

The recurrences are the labelled Eisner algorithm of DESIGN.md, evaluated in stages that are
vectorised over sentences and spans and generic in the semiring, so the same code gives log Z
(log semiring) and the best tree (max semiring):

- for widths w = 1..k (k = max_dist, or n): the incomplete items of width w, then the complete
  ones, all spans of that width at once;
- with max_dist, the right-complete spans wider than k row by row (start i from n-k-1 down to 0),
  every span end at once: they need only incomplete items of width <= k and rows below, so each
  row is one matrix product. Left-complete spans wider than k are never needed.

The pieces live in their own modules: :mod:`.arcs` (arc scores read one width at a time, dense or
:class:`DirectionalScores`), :mod:`.charts` (the charts, incomplete items stored by width up to k:
memory O(B n k M^2), and the strided views the stages read), :mod:`.stages` (one stage of the inside
pass) and :mod:`.outside` (the backward passes: an explicit outside pass for the log semiring
(marginals), a backtrack through the argmax recorded in the forward pass for Viterbi, and, for any
other semiring (the broadcast reference), one stage at a time recomputed under autograd).
"""
from typing import Optional, Tuple

import torch

from .arcs import ArcScores, DenseArcs, DirectionalArcs, DirectionalScores
from .charts import Charts
from .outside import backtrack_max, outside_by_recomputation, outside_log
from .semiring import NEG, LogSemiring, TracingMaxSemiring, decode
from .stages import run_stage, stages

Tensor = torch.Tensor


def log_partition(
    scores: Tensor,
    lengths: Tensor,
    *,
    label_mask: Optional[Tensor] = None,
    max_dist: Optional[int] = None,
    arc_mask: Optional[Tensor] = None,
    semiring=LogSemiring,
) -> Tensor:
    """log of the sum over label sequences and projective trees of exp(tree score), shape (B,).

    With ``label_mask`` set to the gold labels this is log S(x, y); without it, log Z(x).
    Differentiable: its gradient with respect to ``scores`` is the arc marginals. ``semiring`` may be
    :class:`~.semiring.BroadcastLogSemiring`, the slow reference. ``scores`` may also be
    :class:`DirectionalScores` (the gradient then flows to its tensor ``F``).
    """
    arcs, base = _prepare(scores, lengths, label_mask, arc_mask)
    return _inside(semiring, arcs, base, lengths, max_dist)


def viterbi(
    scores: Tensor,
    lengths: Tensor,
    *,
    label_mask: Optional[Tensor] = None,
    max_dist: Optional[int] = None,
    arc_mask: Optional[Tensor] = None,
) -> Tuple[Tensor, Tensor, Tensor]:
    """Best joint (labels, tree): the paper's approximate MAP.

    Returns ``best`` (B,) its score, ``labels`` (B, N) label ids of tokens 1..N and
    ``heads`` (B, N) head positions in 0..N (0 = root); both are 0 beyond ``lengths``.
    """
    _check_dense(scores, "viterbi")
    with torch.enable_grad():
        leaf = scores.detach().requires_grad_(True)
        arcs, base = _prepare(leaf, lengths, label_mask, arc_mask)
        best = _inside(TracingMaxSemiring(), arcs, base, lengths, max_dist)
        (chosen,) = torch.autograd.grad(best.sum(), leaf)
    labels, heads = _structure(chosen, lengths)
    return best.detach(), labels, heads


def marginals(
    scores: Tensor,
    lengths: Tensor,
    *,
    label_mask: Optional[Tensor] = None,
    max_dist: Optional[int] = None,
    arc_mask: Optional[Tensor] = None,
) -> Tuple[Tensor, Tensor]:
    """Posterior marginals: ``arc`` like ``scores`` (P of arc h->d with labels a, c) and
    ``label`` (B, N, M), P(y_d = c | x) for tokens 1..N (0 beyond ``lengths``)."""
    _check_dense(scores, "marginals")
    with torch.enable_grad():
        leaf = scores.detach().requires_grad_(True)
        log_z = log_partition(leaf, lengths, label_mask=label_mask, max_dist=max_dist, arc_mask=arc_mask)
        (arc,) = torch.autograd.grad(log_z.sum(), leaf)
    label = arc.sum(dim=(1, 3))[:, 1:]
    return arc, label


def _check_dense(scores, name: str) -> None:
    if not isinstance(scores, Tensor):
        raise TypeError(f"{name} takes the dense (B, N+1, N+1, M, M) score tensor, got {type(scores).__name__}")


def count_trees(n: int, max_dist: Optional[int] = None) -> int:
    """Number of projective trees over n tokens with a free root (1, 3, 12, 55, 273, ...).

    Runs the inside algorithm on zero scores with one label, so it checks the recurrences too.
    """
    scores = torch.zeros(1, n + 1, n + 1, 1, 1, dtype=torch.float64)
    log_z = log_partition(scores, torch.tensor([n]), max_dist=max_dist)
    return int(round(float(log_z.exp())))


def _prepare(
    scores, lengths: Tensor, label_mask: Optional[Tensor], arc_mask: Optional[Tensor]
) -> Tuple[ArcScores, Tensor]:
    """Check shapes; gather the arc masks and padding into ``ArcScores``; build the base items (B, N+1, M).
    ``scores`` is the dense (B, N+1, N+1, M, M) tensor or :class:`DirectionalScores`."""
    source = DirectionalArcs if isinstance(scores, DirectionalScores) else DenseArcs
    if source is DirectionalArcs:
        shape, scores = scores.shape, scores.F
    elif not isinstance(scores, Tensor):
        raise TypeError(f"scores must be a tensor or DirectionalScores, got {type(scores).__name__}")
    elif scores.dim() != 5 or scores.shape[1] != scores.shape[2] or scores.shape[3] != scores.shape[4]:
        raise ValueError(f"scores must have shape (B, N+1, N+1, M, M), got {tuple(scores.shape)}")
    else:
        shape = tuple(scores.shape)
    if not scores.is_floating_point():
        raise ValueError(f"scores must be a floating point tensor, got {scores.dtype}")
    batch, n1, _, n_labels, _ = shape
    lengths = torch.as_tensor(lengths, device=scores.device)
    if lengths.shape != (batch,):
        raise ValueError(f"lengths must have shape ({batch},), got {tuple(lengths.shape)}")
    if batch and (int(lengths.min()) < 0 or int(lengths.max()) > n1 - 1):
        raise ValueError(f"lengths must lie in 0..{n1 - 1} (the number of positions - 1), got {lengths.tolist()}")
    positions = torch.arange(n1, device=scores.device)
    real = positions[None, :] <= lengths[:, None]  # (B, N+1), the root included
    real_pair = real[:, :, None] & real[:, None, :]
    allowed = positions[None, :, None] != positions[None, None, :]
    allowed = allowed & (positions[None, None, :] != 0)  # no arc into the root
    if arc_mask is not None:
        if arc_mask.dim() != 3 or arc_mask.shape[0] not in (1, batch) or arc_mask.shape[1:] != (n1, n1):
            raise ValueError(f"arc_mask must have shape ({batch} or 1, {n1}, {n1}), got {tuple(arc_mask.shape)}")
        allowed = allowed & arc_mask.to(device=scores.device, dtype=torch.bool)
    neg = torch.full((), NEG, dtype=scores.dtype, device=scores.device)
    zero = torch.zeros((), dtype=scores.dtype, device=scores.device)

    if label_mask is None:
        label_ok = torch.ones(batch, n1, n_labels, dtype=torch.bool, device=scores.device)
    else:
        if label_mask.shape != (batch, n1, n_labels):
            raise ValueError(
                f"label_mask must have shape ({batch}, {n1}, {n_labels}), got {tuple(label_mask.shape)}"
            )
        label_ok = label_mask.to(device=scores.device, dtype=torch.bool).clone()
    label_ok[:, 0, :] = False
    label_ok[:, 0, 0] = True  # the root carries label 0
    # Every label choice of a position passes through its width-0 items, so masking them suffices.
    base = torch.where(label_ok, zero, neg)
    return source(scores, real_pair & allowed, shape), base


class _Inside(torch.autograd.Function):
    """Root items CR[0, w, root label] for every width w, (B, N+1), in log space.

    Forward fills the charts stage by stage without recording a graph. Backward goes over the
    stages in reverse (outside pass, backtrack or recomputation, by semiring) and pushes the
    gradient of each stage's items into the chart regions it read, so memory stays O(B n k M^2).
    """

    @staticmethod
    def forward(ctx, semiring, tensor: Tensor, arcs: ArcScores, base: Tensor, limit: int) -> Tensor:
        """``tensor`` is ``arcs.tensor``, passed so that autograd sees it."""
        arcs = arcs.detach()
        charts = Charts(arcs.shape, limit, tensor, with_shift=semiring is LogSemiring, zeros=False)
        charts.set_base(semiring.encode(base, 1))
        for stage, key in stages(arcs.shape[1] - 1, limit):
            out = run_stage(semiring, charts, stage, key, limit, arcs)
            cells = charts.cells(stage, key, limit)
            shift_cells = charts.cells(stage, key, limit, shift=True) if charts.right_shift is not None else {}
            for name, item in out.items():
                if isinstance(item, tuple):  # encoded already
                    cells[name].copy_(item[0])
                    shift_cells[name].copy_(item[1])
                else:
                    semiring.encode_into(item, cells[name], shift_cells.get(name))
        ctx.semiring, ctx.limit, ctx.charts, ctx.arcs = semiring, limit, charts, arcs
        return _root_values(charts)

    @staticmethod
    def backward(ctx, grad_root: Tensor):
        if ctx.semiring is LogSemiring:
            grad = outside_log(ctx.charts, ctx.arcs, ctx.limit, grad_root)
        elif isinstance(ctx.semiring, TracingMaxSemiring):
            grad = backtrack_max(ctx.semiring.traces, ctx.arcs, ctx.limit, grad_root)
        else:
            grad = outside_by_recomputation(ctx.semiring, ctx.charts, ctx.arcs, ctx.limit, grad_root)
        return None, grad, None, None, None


def _root_values(charts: Charts) -> Tensor:
    shift = None if charts.right_shift is None else charts.right_shift[:, 0, :]
    return decode((charts.right[:, 0, :, 0], shift), 0)


def _inside(semiring, arcs: ArcScores, base: Tensor, lengths: Tensor, max_dist: Optional[int]) -> Tensor:
    """Labelled Eisner in ``semiring``; returns the root item CR[0, n, 0] of each sentence, (B,)."""
    n = arcs.shape[1] - 1
    if max_dist is not None and max_dist < 1:
        raise ValueError(f"max_dist must be at least 1 (or None), got {max_dist}")
    limit = n if max_dist is None else max(1, min(int(max_dist), n))
    root_by_length = _Inside.apply(semiring, arcs.tensor, arcs, base, limit)  # (B, N+1)
    return root_by_length.gather(1, lengths.to(root_by_length.device).long()[:, None]).squeeze(1)


def _structure(chosen: Tensor, lengths: Tensor) -> Tuple[Tensor, Tensor]:
    """One-hot arcs (B, N+1, N+1, M, M) -> labels (B, N) and heads (B, N), 0 beyond lengths."""
    labels = chosen.sum(dim=(1, 3)).argmax(-1)[:, 1:]
    heads = chosen.sum(dim=(3, 4)).argmax(1)[:, 1:]
    n = chosen.shape[1] - 1
    real = torch.arange(1, n + 1, device=chosen.device)[None, :] <= lengths.to(chosen.device)[:, None]
    return labels * real, heads * real
