"""The inside pass of the labelled Eisner algorithm, stage by stage, generic in the semiring.

Order of evaluation (docs/algorithm.md has the recurrences in the paper's notation):

1. base items CR[i, i, a] = CL[i, i, a] = 0 (-inf for a label that position i does not allow);
2. for widths w = 1..K: the incomplete items of width w (:meth:`Inside.incomplete`), then the complete
   ones (:meth:`Inside.complete`), all spans of that width at once;
3. the tail T[i] = CR[i, n_b] of each sentence: the items of width <= K are copied in
   (:meth:`Inside.fill_tail`); with max_dist (K < N) the others follow row by row, from i = N-K-1
   down to 0 (:meth:`Inside.tail_row`); a left-complete span wider than K, or a right-complete one
   that does not end at n_b, can never reach the root, so no other item is needed;
4. the result is T[0, root label 0], log Z (or the best score, in the max semiring).

For the log semiring with more than a few labels the contractions run in exp space (:mod:`.contract`)
and the spans whose totals are too small to be trusted are recomputed in log space; those spans are
recorded, as are the arg-maxes of a backtracking semiring, for the backward pass (:mod:`.outside`).
In exp space every item is kept in relative form, rel + float64 shift (:mod:`.charts`); the incomplete
items are encoded straight from the inner totals and the arcs' exponentials (no exp or log per label
pair), and their relative log values are computed only if a span recomputed in log space reads them.
"""
from dataclasses import dataclass, field
from typing import Callable, List, Optional

import torch

from .arcs import ArcScores, WidthArcs
from .charts import (
    Charts,
    ItemChart,
    complete_cells,
    incomplete_cells,
    inner_operands,
    left_operands,
    padded,
    right_operands,
    tail_operands,
)
from .contract import LOG, InnerTerms, head_exp, head_log, head_terms, inner_exp, inner_log, inner_terms, theta
from .semiring import Semiring, exp_

Tensor = torch.Tensor
Rows = Optional[tuple]  # (batch indices, span indices) of the spans recomputed in log space
#: label counts up to which the log semiring runs in log space (no encodings, no checks): fewer, smaller
#: operations than exp space, which wins once its matrix products have a few labels to multiply
#: (fwd+bwd at B=32, n=30, one thread: M=4 121 ms in log space vs 147 in exp space, M=6 210 vs 199)
LOG_SPACE_UP_TO = 4
#: the incomplete items are encoded as inner total * arc factor (no exp or log per label pair); an item
#: whose largest encoded value is below PEAK is re-encoded from its log values to a largest value of 1,
#: so that no total that reads it is more than 1 / PEAK smaller than with max-normalised encodings
PEAK = 2.0**-10


@dataclass
class HeadStages:
    """One kind of head contraction (complete right items, complete left items, or tail rows): where
    its operands and outputs are, and what its stages left for the backward pass, by stage key (the
    width, or the tail row's start position)."""

    operands: Callable  # (incomplete chart, complete chart, key) -> HeadOperands views
    cells: Callable  # (chart laid out like the outputs, key) -> view (B, S, ...) of the outputs
    incomplete: ItemChart
    complete: ItemChart  # the chart of its outputs and of its complete operands
    keys: int  # how many stage keys: K + 1 widths, or N + 1 tail rows
    rows: List[Rows] = field(init=False)  # spans recomputed in log space
    low: List[Optional[Tensor]] = field(init=False)  # their outputs (R, F), relative to ``top``
    traces: List[Optional[Tensor]] = field(init=False)  # arg-maxes (backtracking semirings)
    total: Optional[Tensor] = None  # exp space: total per output (laid out like the outputs)
    top: Optional[Tensor] = None  # exp space: the scale of each span (float64), out = log(total) + top

    def __post_init__(self):
        self.rows, self.low, self.traces = ([None] * self.keys for _ in range(3))


class Inside:
    """One inside pass: the charts, and what the backward pass needs.

    ``allowed`` (B, N+1, M) bool: the labels each position may take (root: label 0; positions past a
    sentence's end: none). ``lengths`` (B,) long. ``limit`` K = the longest arc.
    """

    def __init__(self, semiring: Semiring, arcs: ArcScores, allowed: Tensor, lengths: Tensor, limit: int):
        self.semiring, self.arcs, self.allowed, self.lengths, self.limit = semiring, arcs, allowed, lengths, limit
        self.n = arcs.shape[1] - 1
        # exp space pays off from a few labels on (matrix products); below, log space has fewer operations
        self.exp_space = semiring.exp_space and arcs.shape[-1] > LOG_SPACE_UP_TO
        self.tracing = semiring.backward == "backtrack"
        self.theta = theta(arcs.tensor.dtype)
        C = self.charts = Charts(arcs.shape, limit, arcs.tensor, self.exp_space)
        positions = torch.arange(self.n + 1, device=lengths.device)
        self.ends_inside = positions[None, :] <= lengths[:, None]  # (B, N+1): a span may end here
        self.not_root = (positions >= 1)[None, :, None]
        slots, rows = limit + 1, self.n + 1
        self.inner_rows: List[Rows] = [None] * slots
        self.inner_values: List[Optional[Tensor]] = [None] * slots  # inner items of the recomputed spans
        self.inner_traces: List[Optional[Tensor]] = [None] * slots
        self.inner_exp: List[Optional[InnerTerms]] = [None] * slots  # exp space: the inner totals
        self.arc_shifts: List[Optional[WidthArcs]] = [None] * slots  # exp space: each span's largest arcs
        self.reencoded: List[Optional[tuple]] = [None] * slots  # exp space: (rows, WidthArcs of their rel values)
        self.incomplete_logged = [False] * slots  # whether the log-space incomplete items of a width are stored
        self.right = HeadStages(right_operands, complete_cells, C.inc_right, C.right, slots)
        self.left = HeadStages(left_operands, complete_cells, C.inc_left, C.left, slots)
        self.tail = HeadStages(tail_operands, lambda t, i: t[:, i : i + 1], C.inc_right, C.tail, rows)
        if self.exp_space:
            like, shape = arcs.tensor, C.right.log.shape
            wide = like.new_empty((), dtype=torch.float64)
            for side in (self.right, self.left):
                side.total, side.top = padded(like, shape, 0.0, limit), padded(wide, shape[:3], 0.0, limit)
            self.tail.total, self.tail.top = like.new_zeros(shape[0], rows, shape[3]), wide.new_zeros(shape[0], rows)

    def run(self) -> Tensor:
        """Fill every chart; the root item T[0, 0] of each sentence, (B,)."""
        base = torch.zeros((), dtype=self.arcs.tensor.dtype, device=self.allowed.device)
        base = base.where(self.allowed, float("-inf"))
        zero = torch.zeros(base.shape[:2], dtype=torch.float64, device=base.device)
        for chart in (self.charts.right, self.charts.left):
            self._write(chart, lambda t: t[:, :, 0], base, zero)  # CR[i, i, a] = CL[i, i, a] = 0 (allowed a)
        for w in range(1, self.limit + 1):
            self.incomplete(w)
            self.complete(w)
        self.fill_tail()
        for i in self.tail_order():
            self.tail_row(i)
        return self.root()

    def root(self) -> Tensor:
        """log Z = T[0, 0] = CR[0, n, root label 0], (B,); in exp space rel[0, 0] + shift[0] (float64)."""
        tail = self.charts.tail
        if not self.exp_space:
            return tail.log[:, 0, 0]
        return (tail.log[:, 0, 0] + tail.shift[:, 0]).to(tail.log.dtype)

    def tail_order(self) -> range:
        """The start positions whose tail items need a stage (max_dist only), in evaluation order."""
        return range(self.n - self.limit - 1, -1, -1)

    # -- stages ---------------------------------------------------------------------------------------

    def incomplete(self, w: int) -> None:
        """The incomplete items of width w: IR[s, s+w] and IL[s, s+w] from inner(s, s+w) and the arcs."""
        C = self.charts
        ops = inner_operands(C.right.log, C.left.log, w)  # (B, S, w, M) each (exp space: relative)
        if self.exp_space:
            enc, shifts = inner_operands(C.right.value, C.left.value, w), inner_operands(C.right.shift, C.left.shift, w)
            # inner(s, s+w, a, c) = log sum_k exp(CR[s, s+k, a] + CL[s+k+1, s+w, c])
            terms = inner_exp(enc.right, shifts.right, enc.left, shifts.left)
            relevant = lambda: self._start_ok(w)[..., :, None] & self._end_ok(w)[..., None, :]  # noqa: E731
            rows = self.inner_rows[w] = self._low(terms.total, relevant)
            self.inner_exp[w] = terms
            # IR = inner * arc, IL likewise, encoded straight from the exp-space total and the arcs' factors
            values = incomplete_cells(C.inc_right.value, C.inc_left.value, w)
            arc_shifts = self.arc_shifts[w] = self.arcs.attach_exp(terms.total, w, WidthArcs(*values))
            for cells, arc_shift in zip(incomplete_cells(C.inc_right.shift, C.inc_left.shift, w), arc_shifts):
                torch.add(terms.top, arc_shift, out=cells.squeeze(2)).clamp_min_(torch.finfo(cells.dtype).min)
            if rows is not None:  # spans whose inner total is not trusted: log space, relative to top
                # inner - top = log sum_k exp(rel CR[s, s+k, a] + rel CL[s+k+1, s+w, c] + pair[k] - top)
                self.inner_values[w] = inner_log(LOG, ops.right[rows] + terms.pair[rows].unsqueeze(-1), ops.left[rows])
            # an item whose largest value is small (the inner items and the arcs prefer different labels)
            # would make the totals that read it small too: re-encoded from its log values, largest value 1
            right_peak, left_peak = (v.flatten(2).amax(-1) for v in values)
            left_peak[:, 0] = 1.0  # the root is never a dependent: no left item at span start 0
            weak = torch.minimum(right_peak, left_peak).lt_(PEAK).logical_and_(self.ends_inside[:, w:])
            if rows is not None:
                weak[rows] = True
            if bool(weak.any()):
                self._encode_rows(w, weak.nonzero(as_tuple=True))
            return
        if self.tracing:
            inner, self.inner_traces[w] = self.semiring.argsum(inner_terms(ops.right, ops.left), -3)
        else:
            inner = inner_log(self.semiring, ops.right, ops.left)
        self._store_incomplete(w, inner)

    def _store_incomplete(self, w: int, inner: Tensor) -> Tensor:
        """IR[s, s+w, a, c] = inner(s, s+w, a, c) + arc(s -> s+w, a, c); IL[..] = inner(..) + arc(s+w -> s, c, a),
        stored in the log-space charts; returns the (right, left) cells."""
        return self._put_incomplete(w, *self.arcs.attach(inner, w))

    def _put_incomplete(self, w: int, right: Tensor, left: Tensor) -> Tensor:
        """Write IR and IL of width w (both [a, c], (B, S, M, M)) into the log-space incomplete charts;
        returns the (right, left) cells."""
        cells = incomplete_cells(self.charts.inc_right.log, self.charts.inc_left.log, w)
        cells[0].copy_(right)
        cells[1].copy_(left.transpose(-1, -2))  # IL is stored [c, a]
        self.incomplete_logged[w] = True
        return cells

    def _inner_relative(self, w: int) -> Tensor:
        """Exp space: the inner items of width w (B, S, M, M) relative to their scale ``top``: log(total),
        or for the spans recomputed in log space their log values."""
        inner = self.inner_exp[w].log()
        if self.inner_rows[w] is not None:
            inner[self.inner_rows[w]] = self.inner_values[w]
        return inner

    def _incomplete_relative(self, w: int, rows=slice(None), dtype=None) -> WidthArcs:
        """Exp space: IR and IL of width w ([a, c] both) at the spans ``rows``, relative to the shift
        top + largest arc that :meth:`incomplete` gave them: inner - top + (arc - largest arc), computed
        in ``dtype`` (default: the charts')."""
        inner = self._inner_relative(w)[rows].to(dtype)
        arcs, tops = self.arcs.width(w), self.arc_shifts[w]
        return WidthArcs(*(inner + (arc[rows].to(dtype) - top[rows].to(dtype)[..., None, None])
                           for arc, top in zip(arcs, tops)))

    def _encode_rows(self, w: int, rows) -> None:
        """Re-encode the incomplete items of width w of the spans ``rows`` to a largest value of 1: each
        item's maximum t is added to its shift. Their relative values are formed in float64 and rounded
        once (item - shift - t in float64, not the rounded relative value minus t: such an item's values
        lie far below its shift, where float32 would round them by an ulp of that distance) and kept for
        :meth:`incomplete_log`."""
        C = self.charts
        values = incomplete_cells(C.inc_right.value, C.inc_left.value, w)
        shifts = incomplete_cells(C.inc_right.shift, C.inc_left.shift, w)
        relative = []
        for log, value, shift, transpose in zip(self._incomplete_relative(w, rows, torch.float64), values, shifts,
                                                (False, True)):
            top = log.flatten(1).amax(-1).clamp_min_(torch.finfo(value.dtype).min)
            rel = log.sub_(top[:, None, None]).to(value.dtype)
            encoded = exp_(rel.clone())
            value[rows] = encoded.transpose(-1, -2) if transpose else encoded
            shift.squeeze(2)[rows] += top
            relative.append(rel)
        self.reencoded[w] = (rows, WidthArcs(*relative))

    def incomplete_log(self, upto: int) -> None:
        """Make sure the log-space incomplete items of widths 1..upto are in their charts: in exp space they
        are written (relative to their shifts) only when a span recomputed in log space reads them."""
        for w in range(1, upto + 1):
            if self.incomplete_logged[w]:
                continue
            right, left = self._incomplete_relative(w)
            if self.reencoded[w] is not None:
                rows, relative = self.reencoded[w]
                right[rows], left[rows] = relative
            self._put_incomplete(w, right, left)

    def complete(self, w: int) -> None:
        """The complete items of width w:
        CR[s, s+w, a] = log sum_{d, c} exp(IR[s, s+d, a, c] + CR[s+d, s+w, c]), d = 1..w;
        CL[s, s+w, c] = log sum_{e, a} exp(CL[s, s+e, a] + IL[s+e, s+w, a, c]), e = 0..w-1."""
        self._head(self.right, w, self._start_ok(w))
        self._head(self.left, w, self._end_ok(w) & self.not_root[:, : self.n + 1 - w])  # CL[0, w] never reaches the root

    def fill_tail(self) -> None:
        """T[i] = CR[i, n_b] for the i with n_b - i <= K (for i > n_b, T stays -inf)."""
        C, index = self.charts, self.tail_index()
        if index is None:
            return
        b, i, width = index
        C.tail.log[b, i] = C.right.log[b, i, width]
        if self.exp_space:  # the relative form as it is
            C.tail.value[b, i] = C.right.value[b, i, width]
            C.tail.shift[b, i] = C.right.shift[b, i, width]

    def tail_index(self):
        """(b, i, n_b - i) of the tail items copied from the complete chart, or None."""
        t = torch.arange(self.limit + 1, device=self.lengths.device)
        start = self.lengths[:, None] - t[None, :]  # (B, K+1)
        ok = start >= 0
        if not bool(ok.any()):
            return None
        b = torch.arange(len(self.lengths), device=self.lengths.device)[:, None].expand_as(start)
        return b[ok], start[ok], t[None, :].expand_as(start)[ok]

    def tail_active(self, i: int) -> Tensor:
        """(B,) the sentences whose tail item at i needs the row stage (n_b - i > K)."""
        return self.lengths - i > self.limit

    def tail_row(self, i: int) -> None:
        """T[i, a] = log sum_{d=1..K, c} exp(IR[i, i+d, a, c] + T[i+d, c]), for the sentences with n_b - i > K."""
        active = self.tail_active(i)
        relevant = (active[:, None] & self.allowed[:, i])[:, None]  # (B, 1, M)
        self._head(self.tail, i, relevant, keep=~active)

    # -- helpers --------------------------------------------------------------------------------------

    def _head(self, stage: HeadStages, key: int, relevant: Tensor, keep: Optional[Tensor] = None) -> None:
        """One head contraction in the semiring; its outputs are stored (but for the sentences ``keep``)."""
        if self.exp_space:
            enc = stage.operands(stage.incomplete.value, stage.complete.value, key)
            shifts = stage.operands(stage.incomplete.shift, stage.complete.shift, key)
            terms = head_exp(enc.incomplete, shifts.incomplete, enc.complete, shifts.complete)
            rows = stage.rows[key] = self._low(terms.total, lambda: relevant)
            out = terms.log()  # relative to top
            if rows is not None:
                self.incomplete_log(self.limit if stage is self.tail else key)
                ops = stage.operands(stage.incomplete.log, stage.complete.log, key)
                # out - top = log sum_{d, l} exp(rel x[f, d, l] + rel y[d, l] + pair[d] - top)
                low = head_log(LOG, ops.incomplete[rows], ops.complete[rows] + terms.pair[rows].unsqueeze(-1))
                out[rows] = stage.low[key] = low
            stage.cells(stage.total, key).copy_(terms.total)
            stage.cells(stage.top, key).copy_(terms.top)
            self._write(stage.complete, lambda t: stage.cells(t, key), out, terms.top, keep)
            return
        ops = stage.operands(stage.incomplete.log, stage.complete.log, key)
        if self.tracing:
            out, stage.traces[key] = self.semiring.argsum(head_terms(ops.incomplete, ops.complete), -1)
        else:
            out = head_log(self.semiring, ops.incomplete, ops.complete)
        self._write(stage.complete, lambda t: stage.cells(t, key), out, keep=keep)

    def _low(self, total: Tensor, relevant: Callable) -> Rows:
        """The spans (batch and span indices, or None) whose exp-space ``total`` fell below THETA somewhere
        it matters (``relevant()``, a mask like ``total``, only made if some total is that small): their
        items are recomputed in log space."""
        low = total < self.theta
        if not bool(low.any()):
            return None
        spans = low.logical_and_(relevant()).flatten(2).any(-1)  # (B, S)
        if not bool(spans.any()):
            return None
        return spans.nonzero(as_tuple=True)

    def _start_ok(self, w: int) -> Tensor:
        """(B, S, M): the labels allowed at the start of each span of width w within its sentence."""
        spans = self.n + 1 - w
        return self.allowed[:, :spans] & self.ends_inside[:, w:, None]

    def _end_ok(self, w: int) -> Tensor:
        """(B, S, M): the labels allowed at the end of each span of width w (none past a sentence's end)."""
        return self.allowed[:, w:]

    def _write(self, chart: ItemChart, cells: Callable, out: Tensor, top: Optional[Tensor] = None,
               keep: Optional[Tensor] = None) -> None:
        """Store items (B, S, F) at ``cells(chart tensor)``, but for the sentences ``keep`` (B,). Exp space:
        ``out`` relative to ``top`` (B, S) float64, stored in relative form with the item's maximum t as
        its shift: rel = out - t, value = exp(rel), shift = top + t (an item that is -inf throughout gets
        the dtype's most negative number as its shift)."""
        if chart.value is None:
            new = [(chart.log, out)]
        else:
            t = out.amax(-1, keepdim=True)
            possible = t > float("-inf")
            rel = out - torch.where(possible, t, 0.0)
            shift = torch.where(possible.squeeze(-1), top + t.squeeze(-1), torch.finfo(out.dtype).min)
            # the exp on a contiguous tensor (on strided views it is slow)
            new = [(chart.log, rel), (chart.value, exp_(rel.clone())), (chart.shift, shift)]
        for tensor, item in new:
            cell = cells(tensor)
            if keep is not None:
                item = torch.where(keep.reshape(-1, *((1,) * (item.dim() - 1))), cell, item)
            cell.copy_(item)
