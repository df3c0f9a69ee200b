"""The backward passes of the inside algorithm (:mod:`.inside`), one per strategy of the semiring.

All three go over the stages in reverse order and keep ``outer`` charts, laid out like the inside
charts: outer[item] = d(result) / d(log value of the item). For an item computed as
log sum_k exp(u_k + v_k), each term passes on outer[item] * exp(u_k + v_k - item), its share: for the
log semiring that share is the posterior of the term, and outer[item] is the marginal of the item.

- :func:`outside_log` (``backward = "outside"``): explicit shares from the exp-space terms (spans that
  the forward pass recomputed in log space take their shares from autograd over the log-space terms);
- :func:`backtrack` (``"backtrack"``): each marked item marks the split and labels that won its max;
- :func:`outside_by_recomputation` (``"recompute"``): each stage recomputed under autograd.

The arcs' gradients are outer[IR] (arc s -> s+w) and outer[IL] (arc s+w -> s), since
IR = inner * arc in the semiring.
"""
from typing import Callable, Optional, Tuple

import torch

from .arcs import WidthArcs
from .charts import (
    band,
    complete_cells,
    incomplete_cells,
    inner_operands,
    left_operands,
    padded,
    right_operands,
    tail_operands,
)
from .contract import (
    LOG,
    HeadTerms,
    head_exp_outside_x,
    head_exp_outside_y,
    head_log,
    inner_exp,
    inner_exp_outside,
    inner_log,
    inner_terms,
    ratio,
)
from .inside import Inside

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
        self.tail[:, 0, 0] = grad_root
        self.inc_right = self.inc_left = None
        if with_incomplete:
            self.inc_right = like.new_zeros(batch, n1, m, limit, m)
            self.inc_left = like.new_zeros(batch, n1, m, limit, m)

    def tail_into_complete(self, ins: Inside) -> None:
        """Backward of :meth:`Inside.fill_tail`: T[i] was CR[i, n_b]."""
        index = ins.tail_index()
        if index is not None:
            b, i, width = index
            self.right[b, i, width] += self.tail[b, i]


# -- the log semiring: explicit outside pass --------------------------------------------------------


def outside_log(ins: Inside, grad_root: Tensor) -> Tensor:
    """Gradient of the root items (weighted by ``grad_root`` (B,)) with respect to ``ins.arcs.tensor``.

    Complete spans push their shares into the narrower complete items at once, but keep outer / total
    per span and head label (and the forward pass keeps ``top`` per span) (charts laid out like the complete ones): an incomplete item's
    outer value is pulled when its own stage comes, as one matrix product over all the spans that used
    it (:func:`_pull_right`, :func:`_pull_left`), which reads the item once instead of once per span.
    Tail rows and spans recomputed in log space push into outer charts of the incomplete items instead.
    """
    C, limit = ins.charts, ins.limit
    fallbacks = any(r is not None for r in ins.right_rows + ins.left_rows + ins.tail_rows)
    outer = OuterCharts(ins, grad_root, with_incomplete=fallbacks or len(ins.tail_order()) > 0)
    shape = C.right.log.shape
    share_right, share_left = (padded(C.right.log, shape, 0.0, limit) for _ in range(2))
    grad = ins.arcs.new_grad(ins.limit)

    for i in reversed(ins.tail_order()):  # T[i, a] from IR[i, i+d, a, c] and T[i+d, c]
        out = (outer.tail[:, i] * ins.tail_active(i)[:, None])[:, None]  # (B, 1, M)
        into = tail_operands(outer.inc_right, outer.tail, i)
        terms = (ins.tail_total[:, i : i + 1], ins.tail_top[:, i : i + 1])
        _head_outside(tail_operands, C.inc_right, C.tail, i, out, terms, ins.tail_rows[i], into.incomplete, into.complete)
    outer.tail_into_complete(ins)

    for w in range(limit, 0, -1):
        for operands, inc, comp, outer_inc, outer_comp, share, rows, total, top in (
            (right_operands, C.inc_right, C.right, outer.inc_right, outer.right, share_right, ins.right_rows[w],
             ins.right_total, ins.right_top),
            (left_operands, C.inc_left, C.left, outer.inc_left, outer.left, share_left, ins.left_rows[w],
             ins.left_total, ins.left_top),
        ):
            into_inc = None if outer_inc is None else operands(outer_inc, outer_comp, w).incomplete
            into_comp = operands(outer_comp, outer_comp, w).complete
            terms = (complete_cells(total, w), complete_cells(top, w))
            span_share = _head_outside(
                operands, inc, comp, w, complete_cells(outer_comp, w), terms, rows, into_inc, into_comp, pull=True
            )
            complete_cells(share, w).copy_(span_share)

        from_right = _pull_right(ins, share_right, ins.right_top, w)  # (B, S, M, M) [a, c]
        from_left = _pull_left(ins, share_left, ins.left_top, w)  # [c, a]
        if outer.inc_right is not None:
            pushed_right, pushed_left = incomplete_cells(outer.inc_right, outer.inc_left, w)
            from_right, from_left = from_right + pushed_right, from_left + pushed_left
        from_left = from_left.transpose(-1, -2)
        ins.arcs.add_grad(grad, w, WidthArcs(from_right, from_left))
        _inner_outside(ins, w, from_right + from_left, inner_operands(outer.right, outer.left, w))
    return grad


def _head_outside(operands: Callable, inc, comp, key: int, out: Tensor, terms: Tuple[Tensor, Tensor], rows,
                  into_inc: Optional[Tensor], into_comp: Tensor, pull: bool = False) -> Tensor:
    """Outside step of a head contraction (see :func:`~.contract.head_exp`) with outer values ``out``
    (B, S, F) for its outputs and the forward pass's (total, top): adds the shares of the complete
    operands into ``into_comp`` and, unless they are left to the pull (``pull``), of the incomplete
    ones into ``into_inc``. Returns outer / total per span and head label for the pull (0 for the
    spans recomputed in log space, whose shares come from autograd over the log-space terms)."""
    total, top = terms
    enc, shifts = operands(inc.value, comp.value, key), operands(inc.shift, comp.shift, key)
    pair = shifts.incomplete.squeeze(2) + shifts.complete
    y = enc.complete * pair.sub_(top.unsqueeze(-1)).exp_().unsqueeze(-1)
    terms = HeadTerms(enc.incomplete, y, top, total)
    share = ratio(out, total)
    if rows is not None:
        share[rows] = 0.0
    into_comp.add_(head_exp_outside_y(terms, share))
    if not pull:
        into_inc.add_(head_exp_outside_x(terms, share))
    if rows is not None:
        logs = operands(inc.log, comp.log, key)
        x, y = logs.incomplete[rows].requires_grad_(True), logs.complete[rows].requires_grad_(True)
        with torch.enable_grad():
            gx, gy = torch.autograd.grad(head_log(LOG, x, y), (x, y), out[rows])
        into_inc[rows] += gx
        into_comp[rows] += gy
    return share


def _inner_outside(ins: Inside, w: int, outer_inner: Tensor, into) -> None:
    """Outside step of inner(s, s+w) (B, S, M, M): shares into CR[s, s+k] and CL[s+k+1, s+w]."""
    C = ins.charts
    enc, shifts = inner_operands(C.right.value, C.left.value, w), inner_operands(C.right.shift, C.left.shift, w)
    rows = ins.inner_rows[w]
    fast = outer_inner
    if rows is not None:
        fast = outer_inner.clone()
        fast[rows] = 0.0
    gx, gy = inner_exp_outside(inner_exp(enc.right, shifts.right, enc.left, shifts.left), fast)
    into.right.add_(gx)
    into.left.add_(gy)
    if rows is not None:
        ops = inner_operands(C.right.log, C.left.log, w)
        x, y = ops.right[rows].requires_grad_(True), ops.left[rows].requires_grad_(True)
        with torch.enable_grad():
            gx, gy = torch.autograd.grad(inner_log(LOG, x, y), (x, y), outer_inner[rows])
        into.right[rows] += gx
        into.left[rows] += gy


def _pull_right(ins: Inside, share: Tensor, top: Tensor, w: int) -> Tensor:
    """outer[IR[s, s+w]] (B, S, M, M) [a, c] from the spans (s, s+w+t), t = 0..K-w, that continued it
    with CR[s+w, s+w+t]: x[a, c] * sum_t share_t[a] exp(sx + sy_t - top_t) y_t[c]."""
    C, limit, n1 = ins.charts, ins.limit, ins.n + 1
    spans, count = n1 - w, limit - w + 1
    x, sx = (incomplete_cells(t, t, w)[0] for t in (C.inc_right.value, C.inc_right.shift))  # (B, S, M[, M])
    y, sy = C.right.value[:, w:, :count], C.right.shift[:, w:, :count]  # CR[s+w, s+w+t]
    span_share, span_top = share[:, :spans, w : w + count], top[:, :spans, w : w + count]  # span (s, s+w+t)
    exists = torch.arange(spans, device=x.device)[:, None] + w + torch.arange(count, device=x.device) <= ins.n
    return _pull(x, sx, y, sy, span_share, span_top, exists)


def _pull_left(ins: Inside, share: Tensor, top: Tensor, w: int) -> Tensor:
    """outer[IL[s, s+w]] (B, S, M, M) [c, a] from the spans (s-t, s+w), t = 0..K-w, that continued it
    with CL[s-t, s]; indexed by t' = K-w-t so that the views have positive strides. They start before
    position 0 for small s: those rows are padding, masked by ``exists``."""
    C, limit, n1 = ins.charts, ins.limit, ins.n + 1
    spans, count = n1 - w, limit - w + 1
    x, sx = (incomplete_cells(t, t, w)[1] for t in (C.inc_left.value, C.inc_left.shift))  # [c, a]
    first = 1 - count  # t' = 0 is t = count - 1
    y, sy = (band(t, spans, count, first, count - 1, 1, -1) for t in (C.left.value, C.left.shift))  # CL[s-t, s]
    span_share, span_top = (band(t, spans, count, first, w + count - 1, 1, -1) for t in (share, top))  # (s-t, s+w)
    exists = torch.arange(spans, device=x.device)[:, None] + first + torch.arange(count, device=x.device) >= 0
    return _pull(x, sx, y, sy, span_share, span_top, exists)


def _pull(x, sx, y, sy, span_share, span_top, exists) -> Tensor:
    """x (B, S, F, L) times sum_t factor[t, f] y[t, l], factor = share_t[f] exp(sx + sy_t - top_t): the
    item's share in each span t, as in :func:`~.contract.head_exp` (sx (B, S, 1); sy, top (B, S, T))."""
    exponent = torch.where(exists, sx + sy - span_top, float("-inf"))
    factor = span_share * exponent.exp_().unsqueeze(-1)  # (B, S, T, F)
    return torch.matmul(factor.transpose(-1, -2), y).mul_(x)


# -- the log semiring on log-space charts (one or two labels): shares from the broadcast terms --------


def outside_log_space(ins: Inside, grad_root: Tensor) -> Tensor:
    """The outside pass of the log semiring when the charts are in log space: a term u + v of an item
    passes outer[item] * exp(u + v - item) to both u and v."""
    C, limit = ins.charts, ins.limit
    outer = OuterCharts(ins, grad_root, with_incomplete=True)
    grad = ins.arcs.new_grad(ins.limit)
    for i in reversed(ins.tail_order()):
        out = (outer.tail[:, i] * ins.tail_active(i)[:, None])[:, None]
        _head_shares(tail_operands(C.inc_right.log, C.tail.log, i), None, out, tail_operands(outer.inc_right, outer.tail, i))
    outer.tail_into_complete(ins)
    for w in range(limit, 0, -1):
        for operands, inc, comp, outer_inc, outer_comp in (
            (right_operands, C.inc_right, C.right, outer.inc_right, outer.right),
            (left_operands, C.inc_left, C.left, outer.inc_left, outer.left),
        ):
            _head_shares(operands(inc.log, comp.log, w), complete_cells(comp.log, w), complete_cells(outer_comp, w),
                         operands(outer_inc, outer_comp, w))
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
    return (terms - total.clamp_min(torch.finfo(terms.dtype).min)).exp_().mul_(outer)


def _head_shares(ops, out: Optional[Tensor], outer: Tensor, into) -> None:
    """Shares of a head contraction's terms x[f, d, l] + y[d, l] (out: its log output, recomputed if None)."""
    terms = ops.incomplete + ops.complete.unsqueeze(-3)  # (B, S, F, D, L)
    if out is None:
        out = terms.flatten(-2).logsumexp(-1)
    share = _shares(terms, out[..., None, None], outer[..., None, None])
    into.incomplete.add_(share)
    into.complete.add_(share.sum(-3))


# -- the max semiring: backtrack through the arg-maxes ------------------------------------------------


def backtrack(ins: Inside, grad_root: Tensor):
    """Mark the best structure of each sentence from the arg-maxes recorded in the forward pass; yields
    (w, WidthArcs of marks (B, S, M, M)) for every width, marks weighted by ``grad_root``."""
    C, limit = ins.charts, ins.limit
    outer = OuterCharts(ins, grad_root, with_incomplete=True)
    for i in reversed(ins.tail_order()):
        out = outer.tail[:, i] * ins.tail_active(i)[:, None]
        into = tail_operands(outer.inc_right, outer.tail, i)
        _mark_head(ins.tail_traces[i], out[:, None], into.incomplete, into.complete)
    outer.tail_into_complete(ins)
    for w in range(limit, 0, -1):
        for operands, outer_inc, outer_comp, traces in (
            (right_operands, outer.inc_right, outer.right, ins.right_traces),
            (left_operands, outer.inc_left, outer.left, ins.left_traces),
        ):
            into = operands(outer_inc, outer_comp, w)
            _mark_head(traces[w], complete_cells(outer_comp, w), into.incomplete, into.complete)
        right, left = incomplete_cells(outer.inc_right, outer.inc_left, w)
        left = left.transpose(-1, -2)
        yield w, WidthArcs(right, left)
        # inner: won (B, S, a, c) over the split k
        won, marks = ins.inner_traces[w], right + left
        into = inner_operands(outer.right, outer.left, w)
        b, s, a, c = _grid(won.shape, won.device)
        into.right.index_put_((b, s, won, a), marks, accumulate=True)
        into.left.index_put_((b, s, won, c), marks, accumulate=True)


def _mark_head(won: Tensor, out: Tensor, into_inc: Tensor, into_comp: Tensor) -> None:
    """won (B, S, F): index into the flattened (split d, label l) of the winning term of each output."""
    labels = into_comp.shape[-1]
    split, label = torch.div(won, labels, rounding_mode="floor"), won % labels
    b, s, f = _grid(won.shape, won.device)
    into_inc.index_put_((b, s, f, split, label), out, accumulate=True)
    into_comp.index_put_((b, s, split, label), out, accumulate=True)


def _grid(shape, device) -> Tuple[Tensor, ...]:
    """Index tensors of every position of ``shape``, one per dimension."""
    return torch.meshgrid(*(torch.arange(n, device=device) for n in shape), indexing="ij")


# -- any semiring: recompute each stage under autograd -----------------------------------------------


def outside_by_recomputation(ins: Inside, grad_root: Tensor) -> Tensor:
    """Generic backward: each stage's outputs recomputed from its (detached) inputs under autograd, last
    stage first; for semirings without an explicit outside pass (the broadcast reference)."""
    C, limit, semiring = ins.charts, ins.limit, ins.semiring
    outer = OuterCharts(ins, grad_root, with_incomplete=True)
    grad = ins.arcs.new_grad(ins.limit)

    def through(function, inputs, into, out_grad):
        inputs = [t.detach().requires_grad_(True) for t in inputs]
        with torch.enable_grad():
            grads = torch.autograd.grad(function(*inputs), inputs, out_grad)
        for view, g in zip(into, grads):
            view.add_(g)

    for i in reversed(ins.tail_order()):
        out = (outer.tail[:, i] * ins.tail_active(i)[:, None])[:, None]
        through(lambda x, y: head_log(semiring, x, y), tail_operands(C.inc_right.log, C.tail.log, i),
                tail_operands(outer.inc_right, outer.tail, i), out)
    outer.tail_into_complete(ins)
    for w in range(limit, 0, -1):
        for operands, inc, comp, outer_inc, outer_comp in (
            (right_operands, C.inc_right, C.right, outer.inc_right, outer.right),
            (left_operands, C.inc_left, C.left, outer.inc_left, outer.left),
        ):
            through(lambda x, y: head_log(semiring, x, y), operands(inc.log, comp.log, w),
                    operands(outer_inc, outer_comp, w), complete_cells(outer_comp, w))
        right, left = incomplete_cells(outer.inc_right, outer.inc_left, w)
        left = left.transpose(-1, -2)
        ins.arcs.add_grad(grad, w, WidthArcs(right, left))
        through(lambda x, y: inner_log(semiring, x, y), inner_operands(C.right.log, C.left.log, w),
                inner_operands(outer.right, outer.left, w), right + left)
    return grad
