"""The backward passes of the inside algorithm (:mod:`.inside`), by the semiring's strategy.

All go over the stages in reverse order and keep ``outer`` charts, laid out like the inside charts:
outer[item] = d(result) / d(log value of the item). An item computed as log sum_k exp(u_k + v_k)
passes to each term outer[item] * exp(u_k + v_k - item), its share (for the log semiring: the
posterior of the term, so that outer[item] is the marginal of the item; docs/algorithm.md has these
outside recurrences in the paper's notation).

- ``"outside"``: :func:`outside_log` for exp-space charts (shares from the encodings and the forward
  pass's totals; the spans it recomputed in log space take theirs from autograd over the log-space
  terms), :func:`outside_log_space` for log-space charts (shares from the broadcast terms);
- ``"backtrack"``: :func:`backtrack`, each marked item marks the split and labels that won its max;
- ``"recompute"``: :func:`outside_by_recomputation`, each stage recomputed under autograd.

The arcs' gradients are outer[IR] (arc s -> s+w) and outer[IL] (arc s+w -> s), since IR = inner * arc
in the semiring.
"""
from typing import Iterator, Optional, Tuple

import torch

from .arcs import WidthArcs
from .charts import HeadOperands, band, complete_cells, incomplete_cells, inner_operands, padded
from .contract import (
    HeadTerms,
    head_exp_outside_x,
    head_exp_outside_y,
    head_log,
    inner_exp_outside,
    inner_log,
    inner_terms,
    ratio,
    scaled_pairs,
)
from .inside import HeadStages, Inside
from .semiring import exp_

Tensor = torch.Tensor


class OuterCharts:
    """Zeroed charts of outer values: complete (padded like the inside ones), tail, and incomplete
    ones when something pushes into them (``with_incomplete``)."""

    def __init__(self, ins: Inside, grad_root: Tensor, with_incomplete: bool):
        like, limit = ins.arcs.tensor, ins.limit
        batch, n1, _, m, _ = ins.arcs.shape
        self.right = padded(like, (batch, n1, limit + 1, m), 0.0, limit)
        self.left = padded(like, (batch, n1, limit + 1, m), 0.0, limit)
        self.tail = like.new_zeros(batch, n1, m)
        self.tail[:, 0, 0] = grad_root  # d result / d T[0, 0]
        self.inc_right = self.inc_left = None
        if with_incomplete:
            self.inc_right = like.new_zeros(batch, n1, m, limit, m)
            self.inc_left = like.new_zeros(batch, n1, m, limit, m)
        self._ins = ins

    def of(self, stage: HeadStages) -> Tuple[Optional[Tensor], Tensor]:
        """The outer charts of a head stage's (incomplete, complete) operands."""
        if stage is self._ins.right:
            return self.inc_right, self.right
        if stage is self._ins.left:
            return self.inc_left, self.left
        return self.inc_right, self.tail

    def into(self, stage: HeadStages, key: int) -> HeadOperands:
        """Views of the outer charts where a head stage's operands receive their shares."""
        inc, comp = self.of(stage)
        ops = stage.operands(comp if inc is None else inc, comp, key)
        return HeadOperands(None if inc is None else ops.incomplete, ops.complete)

    def tail_into_complete(self) -> None:
        """Backward of :meth:`Inside.fill_tail`: T[i] was CR[i, n_b]."""
        index = self._ins.tail_index()
        if index is not None:
            b, i, width = index
            self.right[b, i, width] += self.tail[b, i]


def _stage_outer(ins: Inside, stage: HeadStages, outer: OuterCharts, key: int) -> Tensor:
    """The outer values (B, S, F) of a head stage's outputs (0 for the tail rows a sentence skipped)."""
    out = stage.cells(outer.of(stage)[1], key)
    if stage is ins.tail:
        out = out * ins.tail_active(key)[:, None, None]
    return out


# -- the log semiring on exp-space charts -----------------------------------------------------------


def outside_log(ins: Inside, grad_root: Tensor) -> Tensor:
    """Gradient of the root items (weighted by ``grad_root`` (B,)) with respect to ``ins.arcs.tensor``.

    Complete spans push their shares into the narrower complete items at once, but keep outer / total
    per span and head label (charts laid out like the complete ones): an incomplete item's outer value
    is pulled when its own stage comes, as one matrix product over all the spans that used it
    (:func:`_pull_right`, :func:`_pull_left`), which reads the item once instead of once per span. Tail
    rows and spans recomputed in log space push into outer charts of the incomplete items instead.
    """
    C, limit = ins.charts, ins.limit
    recomputed = any(r is not None for stage in (ins.right, ins.left, ins.tail) for r in stage.rows)
    outer = OuterCharts(ins, grad_root, with_incomplete=recomputed or len(ins.tail_order()) > 0)
    share_right, share_left = (padded(C.right.log, C.right.log.shape, 0.0, limit) for _ in range(2))
    grad = ins.arcs.new_grad(limit)

    for i in reversed(ins.tail_order()):  # T[i, a] = log sum_{d, c} exp(IR[i, i+d, a, c] + T[i+d, c])
        _head_outside(ins, ins.tail, i, _stage_outer(ins, ins.tail, outer, i), outer.into(ins.tail, i), pull=False)
    outer.tail_into_complete()

    for w in range(limit, 0, -1):
        for stage, share in ((ins.right, share_right), (ins.left, share_left)):
            # outer[CR[s+d, s+w, c]] += sum_a outer[CR[s, s+w, a]] exp(IR[s, s+d, a, c] + CR[s+d, s+w, c] - CR[s, s+w, a])
            # (and for CL alike); the shares of the incomplete items are pulled below
            span_share = _head_outside(ins, stage, w, _stage_outer(ins, stage, outer, w), outer.into(stage, w), pull=True)
            complete_cells(share, w).copy_(span_share)
        # outer[IR[s, s+w, a, c]] = sum_t outer[CR[s, s+w+t, a]] exp(IR[s, s+w, a, c] + CR[s+w, s+w+t, c] - CR[s, s+w+t, a])
        from_right = _pull_right(ins, share_right, w)  # (B, S, M, M) [a, c]
        from_left = _pull_left(ins, share_left, w)  # [c, a]
        if outer.inc_right is not None:
            pushed_right, pushed_left = incomplete_cells(outer.inc_right, outer.inc_left, w)
            from_right, from_left = from_right + pushed_right, from_left + pushed_left
        from_left = from_left.transpose(-1, -2)
        ins.arcs.add_grad(grad, w, WidthArcs(from_right, from_left))  # d IR / d arc = 1
        # outer[CR[s, s+k, a]] += sum_c (outer[IR] + outer[IL])[a, c] exp(CR[s, s+k, a] + CL[s+k+1, s+w, c] - inner[a, c])
        _inner_outside(ins, w, from_right + from_left, inner_operands(outer.right, outer.left, w))
    return grad


def _head_outside(ins: Inside, stage: HeadStages, key: int, out: Tensor, into: HeadOperands, pull: bool) -> Tensor:
    """Outside step of a head contraction (see :func:`~.contract.head_exp`) with outer values ``out``
    (B, S, F) for its outputs: adds the shares of the complete operands into ``into.complete`` and,
    unless they are left to the pull (``pull``), of the incomplete ones into ``into.incomplete``.
    Returns outer / total per span and head label for the pull (0 for the spans recomputed in log
    space, whose shares come from autograd over the log-space terms)."""
    total, top, rows = stage.cells(stage.total, key), stage.cells(stage.top, key), stage.rows[key]
    enc = stage.operands(stage.incomplete.value, stage.complete.value, key)
    shifts = stage.operands(stage.incomplete.shift, stage.complete.shift, key)
    pair = scaled_pairs(shifts.incomplete.squeeze(2), shifts.complete, total.dtype, top)[0]  # as the forward pass
    terms = HeadTerms(enc.incomplete, enc.complete * exp_(pair.clone()).unsqueeze(-1), top, total, pair)
    share = ratio(out, total)
    if rows is not None:
        share[rows] = 0.0
    into.complete.add_(head_exp_outside_y(terms, share))
    if not pull:
        into.incomplete.add_(head_exp_outside_x(terms, share))
    if rows is not None:  # their shares from the log-space terms and the stored outputs
        ins.incomplete_log(ins.limit if stage is ins.tail else key)
        logs = stage.operands(stage.incomplete.log, stage.complete.log, key)  # relative, as the forward pass
        terms = logs.incomplete[rows] + (logs.complete[rows] + pair[rows].unsqueeze(-1)).unsqueeze(-3)  # (R, F, D, L)
        gx = _shares(terms, stage.low[key][..., None, None], out[rows][..., None, None])
        into.incomplete[rows] += gx
        into.complete[rows] += gx.sum(-3)
    return share


def _inner_outside(ins: Inside, w: int, outer_inner: Tensor, into) -> None:
    """Outside step of inner(s, s+w) (B, S, M, M): shares into CR[s, s+k] and CL[s+k+1, s+w]."""
    C = ins.charts
    rows = ins.inner_rows[w]
    fast = outer_inner
    if rows is not None:
        fast = outer_inner.clone()
        fast[rows] = 0.0
    exp_terms = ins.inner_exp[w]  # the forward pass's terms (scaled operands and totals), read only
    gx, gy = inner_exp_outside(exp_terms, fast)
    into.right.add_(gx)
    into.left.add_(gy)
    if rows is not None:  # their shares from the log-space terms and the stored inner items (relative to top)
        ops = inner_operands(C.right.log, C.left.log, w)
        terms = inner_terms(ops.right[rows] + exp_terms.pair[rows].unsqueeze(-1), ops.left[rows])  # (R, K, A, C)
        share = _shares(terms, ins.inner_values[w].unsqueeze(-3), outer_inner[rows].unsqueeze(-3))
        into.right[rows] += share.sum(-1)
        into.left[rows] += share.sum(-2)


def _pull_right(ins: Inside, share: Tensor, w: int) -> Tensor:
    """outer[IR[s, s+w]] (B, S, M, M) [a, c] from the spans (s, s+w+t), t = 0..K-w, that continued it
    with CR[s+w, s+w+t]: x[a, c] * sum_t share_t[a] exp(sx + sy_t - top_t) y_t[c]."""
    C, n1 = ins.charts, ins.n + 1
    spans, count = n1 - w, ins.limit - w + 1
    x, sx = (incomplete_cells(t, t, w)[0] for t in (C.inc_right.value, C.inc_right.shift))  # (B, S, M[, M])
    y, sy = C.right.value[:, w:, :count], C.right.shift[:, w:, :count]  # CR[s+w, s+w+t]
    span_share, span_top = share[:, :spans, w : w + count], ins.right.top[:, :spans, w : w + count]  # (s, s+w+t)
    exists = torch.arange(spans, device=x.device)[:, None] + w + torch.arange(count, device=x.device) <= ins.n
    return _pull(x, sx, y, sy, span_share, span_top, exists)


def _pull_left(ins: Inside, share: Tensor, w: int) -> Tensor:
    """outer[IL[s, s+w]] (B, S, M, M) [c, a] from the spans (s-t, s+w), t = 0..K-w, that continued it
    with CL[s-t, s]; indexed by t' = K-w-t so that the views have positive strides. They start before
    position 0 for small s: those rows are padding, masked by ``exists``."""
    C, n1 = ins.charts, ins.n + 1
    spans, count = n1 - w, ins.limit - w + 1
    x, sx = (incomplete_cells(t, t, w)[1] for t in (C.inc_left.value, C.inc_left.shift))  # [c, a]
    first = 1 - count  # t' = 0 is t = count - 1
    y, sy = (band(t, spans, count, first, count - 1, 1, -1) for t in (C.left.value, C.left.shift))  # CL[s-t, s]
    span_share, span_top = (band(t, spans, count, first, w + count - 1, 1, -1) for t in (share, ins.left.top))
    exists = torch.arange(spans, device=x.device)[:, None] + first + torch.arange(count, device=x.device) >= 0
    return _pull(x, sx, y, sy, span_share, span_top, exists)


def _pull(x, sx, y, sy, span_share, span_top, exists) -> Tensor:
    """x (B, S, F, L) times sum_t factor[t, f] y[t, l], factor = share_t[f] exp(sx + sy_t - top_t): the
    item's share in each span t, as in :func:`~.contract.head_exp` (sx (B, S, 1); sy, top (B, S, T))."""
    exponent = torch.where(exists, (sx + sy - span_top).to(y.dtype), float("-inf"))  # shifts float64
    factor = span_share * exp_(exponent).unsqueeze(-1)  # (B, S, T, F)
    return torch.matmul(factor.transpose(-1, -2), y).mul_(x)


# -- the log semiring on log-space charts (up to a few labels) ----------------------------------------


def outside_log_space(ins: Inside, grad_root: Tensor) -> Tensor:
    """The outside pass of the log semiring when the charts are in log space: a term u + v of an item
    passes outer[item] * exp(u + v - item) to both u and v, computed from the broadcast terms."""
    C = ins.charts
    outer = OuterCharts(ins, grad_root, with_incomplete=True)
    grad = ins.arcs.new_grad(ins.limit)
    for i in reversed(ins.tail_order()):
        _head_shares(ins.tail, i, _stage_outer(ins, ins.tail, outer, i), outer.into(ins.tail, i), recompute=True)
    outer.tail_into_complete()
    for w in range(ins.limit, 0, -1):
        for stage in (ins.right, ins.left):
            _head_shares(stage, w, _stage_outer(ins, stage, outer, w), outer.into(stage, w))
        right, left = incomplete_cells(outer.inc_right, outer.inc_left, w)
        left = left.transpose(-1, -2)
        ins.arcs.add_grad(grad, w, WidthArcs(right, left))
        ops, into = inner_operands(C.right.log, C.left.log, w), inner_operands(outer.right, outer.left, w)
        terms = inner_terms(ops.right, ops.left)  # (B, S, K, A, C)
        share = _shares(terms, terms.logsumexp(-3).unsqueeze(-3), (right + left).unsqueeze(-3))
        into.right.add_(share.sum(-1))
        into.left.add_(share.sum(-2))
    return grad


def _shares(terms: Tensor, total: Tensor, outer: Tensor) -> Tensor:
    """outer * exp(terms - total), 0 where the total is -inf."""
    return exp_(terms - total.clamp_min(torch.finfo(terms.dtype).min)).mul_(outer)


def _head_shares(stage: HeadStages, key: int, outer: Tensor, into: HeadOperands, recompute: bool = False) -> None:
    """Shares of a head contraction's terms x[f, d, l] + y[d, l]; its log output is read from the chart,
    or recomputed (tail rows: the chart keeps other values for the sentences a row skipped)."""
    ops = stage.operands(stage.incomplete.log, stage.complete.log, key)
    terms = ops.incomplete + ops.complete.unsqueeze(-3)  # (B, S, F, D, L)
    out = terms.flatten(-2).logsumexp(-1) if recompute else stage.cells(stage.complete.log, key)
    share = _shares(terms, out[..., None, None], outer[..., None, None])
    into.incomplete.add_(share)
    into.complete.add_(share.sum(-3))


# -- the max semiring: backtrack through the arg-maxes ------------------------------------------------


def backtrack(ins: Inside, grad_root: Tensor) -> Iterator[Tuple[int, WidthArcs]]:
    """Mark the best structure of each sentence from the arg-maxes recorded in the forward pass; yields
    (w, WidthArcs of marks (B, S, M, M)) for every width, marks weighted by ``grad_root``."""
    outer = OuterCharts(ins, grad_root, with_incomplete=True)
    for i in reversed(ins.tail_order()):
        _mark_head(ins.tail.traces[i], _stage_outer(ins, ins.tail, outer, i), outer.into(ins.tail, i))
    outer.tail_into_complete()
    for w in range(ins.limit, 0, -1):
        for stage in (ins.right, ins.left):
            _mark_head(stage.traces[w], _stage_outer(ins, stage, outer, w), outer.into(stage, w))
        right, left = incomplete_cells(outer.inc_right, outer.inc_left, w)
        left = left.transpose(-1, -2)
        yield w, WidthArcs(right, left)
        # inner: won (B, S, a, c) over the split k; into.right (B, S, K, a), into.left (B, S, K, c)
        won, marks = ins.inner_traces[w], right + left
        into = inner_operands(outer.right, outer.left, w)
        into.right.add_(_scattered(won, marks, into.right.shape[2]).transpose(2, 3))  # summed over c
        into.left.add_(_scattered(won.transpose(2, 3), marks.transpose(2, 3), into.left.shape[2]).transpose(2, 3))


def _mark_head(won: Tensor, out: Tensor, into: HeadOperands) -> None:
    """won (B, S, F): index into the flattened (split d, label l) of the winning term of each output."""
    cells = into.complete.shape[-2] * into.complete.shape[-1]  # (split d, label l)
    into.incomplete.add_(_scattered(won[..., None], out[..., None], cells).view(into.incomplete.shape))
    into.complete.add_(_scattered(won, out, cells).view(into.complete.shape))  # summed over f


def _scattered(index: Tensor, values: Tensor, size: int) -> Tensor:
    """A fresh (..., size) tensor T with T[..., i] = sum of values[..., j] over the j with index[..., j]
    = i (index and values (..., J)). A scatter-add into a contiguous buffer: on a GPU, atomic adds,
    where ``index_put_(accumulate=True)`` sorts its indices first (several times slower)."""
    out = values.new_zeros(*index.shape[:-1], size)
    return out.scatter_add_(-1, index, values)


# -- any semiring: recompute each stage under autograd -----------------------------------------------


def outside_by_recomputation(ins: Inside, grad_root: Tensor) -> Tensor:
    """Generic backward: each stage's outputs recomputed from its (detached) inputs under autograd, last
    stage first; for semirings without an explicit outside pass (the broadcast reference)."""
    C, semiring = ins.charts, ins.semiring
    outer = OuterCharts(ins, grad_root, with_incomplete=True)
    grad = ins.arcs.new_grad(ins.limit)

    def through(function, inputs, into, out_grad):
        inputs = [t.detach().requires_grad_(True) for t in inputs]
        with torch.enable_grad():
            grads = torch.autograd.grad(function(*inputs), inputs, out_grad)
        for view, g in zip(into, grads):
            view.add_(g)

    def head(x, y):
        return head_log(semiring, x, y)

    for i in reversed(ins.tail_order()):
        through(head, ins.tail.operands(C.inc_right.log, C.tail.log, i), outer.into(ins.tail, i),
                _stage_outer(ins, ins.tail, outer, i))
    outer.tail_into_complete()
    for w in range(ins.limit, 0, -1):
        for stage in (ins.right, ins.left):
            through(head, stage.operands(stage.incomplete.log, stage.complete.log, w), outer.into(stage, w),
                    _stage_outer(ins, stage, outer, w))
        right, left = incomplete_cells(outer.inc_right, outer.inc_left, w)
        left = left.transpose(-1, -2)
        ins.arcs.add_grad(grad, w, WidthArcs(right, left))
        through(lambda x, y: inner_log(semiring, x, y), inner_operands(C.right.log, C.left.log, w),
                inner_operands(outer.right, outer.left, w), right + left)
    return grad
