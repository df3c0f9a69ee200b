"""The inside pass of the labelled Eisner algorithm, stage by stage, generic in the semiring.

Order of evaluation (docs/algorithm.md has the recurrences and the paper's notation):

1. base items CR[i, i, a] = CL[i, i, a] = 0 (-inf for a label that position i does not allow);
2. for widths w = 1..K: the incomplete items of width w (:meth:`Inside.incomplete`), then the complete
   ones (:meth:`Inside.complete`), all spans of that width at once;
3. the tail T[i] = CR[i, n_b] of each sentence: the items of width <= K are copied in
   (:meth:`Inside.fill_tail`); with max_dist (K < N) the others follow row by row, from i = N-K-1
   down to 0 (:meth:`Inside.tail_row`); a left-complete span wider than K, or a right-complete one
   that does not end at n_b, can never reach the root, so no other item is needed;
4. the result is T[0, root label 0], log Z (or the best score, in the max semiring).

For exp-space semirings each contraction runs in exp space (:mod:`.contract`) and the spans whose
totals are too small to be trusted are recomputed in log space; those spans are recorded, as are the
arg-maxes of a backtracking semiring, for the backward pass (:mod:`.outside`).
"""
from typing import Callable, List, NamedTuple, Optional

import torch

from .arcs import ArcScores
from .charts import (
    Charts,
    padded,
    ItemChart,
    complete_cells,
    incomplete_cells,
    inner_operands,
    left_operands,
    right_operands,
    tail_operands,
)
from .contract import LOG, head_exp, head_log, head_terms, inner_exp, inner_log, inner_terms, theta
from .semiring import Semiring

Tensor = torch.Tensor
Rows = Optional[tuple]  # (batch indices, span indices) of the spans recomputed in log space
#: label counts up to which the log semiring runs in log space (no encodings, no checks): fewer, smaller
#: operations than exp space, which wins once its matrix products have a few labels to multiply
#: (fwd+bwd at B=32, n=30, one thread: M=4 121 ms in log space vs 147 in exp space, M=6 210 vs 199)
LOG_SPACE_UP_TO = 4


class HeadResult(NamedTuple):
    """A head contraction's log-space output (B, S, F) and what the backward pass needs: the spans
    recomputed in log space, the arg-maxes, or the exp-space total and scale (out = log total + top)."""

    out: Tensor
    rows: Rows = None
    trace: Optional[Tensor] = None
    total: Optional[Tensor] = None
    top: Optional[Tensor] = None


class Inside:
    """One inside pass: the charts, and what the backward pass needs (fallback rows, arg-max traces).

    ``allowed`` (B, N+1, M) bool: the labels each position may take (root: label 0; positions past a
    sentence's end: none). ``lengths`` (B,) long. ``limit`` K = the longest arc.
    """

    def __init__(self, semiring: Semiring, arcs: ArcScores, allowed: Tensor, lengths: Tensor, limit: int):
        self.semiring, self.arcs, self.allowed, self.lengths, self.limit = semiring, arcs, allowed, lengths, limit
        self.n = arcs.shape[1] - 1
        # exp space pays off from a few labels on (matrix products); below, log space has fewer operations
        self.exp_space = semiring.exp_space and arcs.shape[-1] > LOG_SPACE_UP_TO
        self.charts = Charts(arcs.shape, limit, arcs.tensor, self.exp_space)
        self.theta = theta(arcs.tensor.dtype)
        self.tracing = semiring.backward == "backtrack"
        size = limit + 1
        # per width (index w) or tail row (index i): spans redone in log space, arg-maxes
        self.inner_rows: List[Rows] = [None] * size
        self.right_rows: List[Rows] = [None] * size
        self.left_rows: List[Rows] = [None] * size
        self.tail_rows: List[Rows] = [None] * (self.n + 1)
        self.inner_traces: List[Optional[Tensor]] = [None] * size
        self.right_traces: List[Optional[Tensor]] = [None] * size
        self.left_traces: List[Optional[Tensor]] = [None] * size
        self.tail_traces: List[Optional[Tensor]] = [None] * (self.n + 1)
        if self.exp_space:  # per complete span: the exp-space totals (per head label) and their scale
            shape = self.charts.right.log.shape
            self.right_total, self.left_total = (padded(arcs.tensor, shape, 0.0, limit) for _ in range(2))
            self.right_top, self.left_top = (padded(arcs.tensor, shape[:3], 0.0, limit) for _ in range(2))
            self.tail_total = arcs.tensor.new_zeros(shape[0], shape[1], shape[3])
            self.tail_top = arcs.tensor.new_zeros(shape[0], shape[1])

    def run(self) -> Tensor:
        """Fill every chart; the root item T[0, 0] of each sentence, (B,)."""
        base = torch.zeros((), dtype=self.arcs.tensor.dtype, device=self.allowed.device)
        base = base.where(self.allowed, float("-inf"))
        for chart in (self.charts.right, self.charts.left):
            self._write(chart, lambda t: t[:, :, 0], base)  # CR[i, i, a] = CL[i, i, a] = 0
        for w in range(1, self.limit + 1):
            self.incomplete(w)
            self.complete(w)
        self.fill_tail()
        for i in self.tail_order():
            self.tail_row(i)
        return self.charts.tail.log[:, 0, 0]

    def tail_order(self) -> range:
        """The start positions whose tail items need a stage (max_dist only), in evaluation order."""
        return range(self.n - self.limit - 1, -1, -1)

    # -- stages ---------------------------------------------------------------------------------------

    def incomplete(self, w: int) -> None:
        """IR[s, s+w] = inner(s, s+w) * arc s -> s+w and IL[s, s+w] = inner(s, s+w) * arc s+w -> s, where
        inner(s, s+w, a, c) = (+)_{k=0..w-1} CR[s, s+k, a] * CL[s+k+1, s+w, c]."""
        C = self.charts
        ops = inner_operands(C.right.log, C.left.log, w)  # (B, S, w, M) each
        if self.exp_space:
            enc, shifts = inner_operands(C.right.value, C.left.value, w), inner_operands(C.right.shift, C.left.shift, w)
            terms = inner_exp(enc.right, shifts.right, enc.left, shifts.left)
            # a label pair needs the check where both labels are allowed and the span is in the sentence
            relevant = self._allowed_at(w, "start")[..., :, None] & self._allowed_at(w, "end")[..., None, :]
            inner, self.inner_rows[w] = self._checked(
                terms.log(), terms.total, relevant, lambda rows: inner_log(LOG, ops.right[rows], ops.left[rows])
            )
        elif self.tracing:
            inner, self.inner_traces[w] = self.semiring.argsum(inner_terms(ops.right, ops.left), -3)
        else:
            inner = inner_log(self.semiring, ops.right, ops.left)
        arcs = self.arcs.width(w)
        right = inner + arcs.right  # IR[s, s+w, a, c]
        left = inner.add_(arcs.left)  # IL[s, s+w, a, c], stored transposed ([c, a])
        cells = incomplete_cells(C.inc_right.log, C.inc_left.log, w)
        cells[0].copy_(right)
        cells[1].copy_(left.transpose(-1, -2))
        if self.exp_space:  # one shift per item, taken on the contiguous items before they are stored
            values = incomplete_cells(C.inc_right.value, C.inc_left.value, w)
            shifts = incomplete_cells(C.inc_right.shift, C.inc_left.shift, w)
            for log, value, shift, transpose in zip((right, left), values, shifts, (False, True)):
                top = log.flatten(2).amax(-1, keepdim=True).clamp_min_(torch.finfo(log.dtype).min)
                shift.copy_(top)
                encoded = log.sub_(top.unsqueeze(-1)).exp_()  # the log values are stored already
                value.copy_(encoded.transpose(-1, -2) if transpose else encoded)

    def complete(self, w: int) -> None:
        """CR[s, s+w, a] = (+)_{d, c} IR[s, s+d, a, c] * CR[s+d, s+w, c] and
        CL[s, s+w, c] = (+)_{e, a} CL[s, s+e, a] * IL[s+e, s+w, a, c]."""
        C = self.charts
        for name, operands, inc, comp in (
            ("right", right_operands, C.inc_right, C.right),
            ("left", left_operands, C.inc_left, C.left),
        ):
            relevant = self._allowed_at(w, "start" if name == "right" else "left head")
            result = self._head(operands, inc, comp, w, relevant)
            getattr(self, name + "_rows")[w], getattr(self, name + "_traces")[w] = result.rows, result.trace
            if result.total is not None:
                complete_cells(getattr(self, name + "_total"), w).copy_(result.total)
                complete_cells(getattr(self, name + "_top"), w).copy_(result.top)
            self._write(comp, lambda t: complete_cells(t, w), result.out)

    def fill_tail(self) -> None:
        """T[i] = CR[i, n_b] for the i with n_b - i <= K (for i > n_b, T stays -inf)."""
        C, index = self.charts, self.tail_index()
        if index is None:
            return
        b, i, width = index
        C.tail.log[b, i] = C.right.log[b, i, width]
        if C.tail.value is not None:
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
        """T[i, a] = (+)_{d=1..K, c} IR[i, i+d, a, c] * T[i+d, c], for the sentences with n_b - i > K."""
        C = self.charts
        active = self.tail_active(i)
        relevant = (active[:, None] & self.allowed[:, i])[:, None]  # (B, 1, M)
        result = self._head(tail_operands, C.inc_right, C.tail, i, relevant)
        self.tail_rows[i], self.tail_traces[i] = result.rows, result.trace
        if result.total is not None:
            self.tail_total[:, i], self.tail_top[:, i] = result.total[:, 0], result.top[:, 0]
        new = torch.where(active[:, None], result.out[:, 0], C.tail.log[:, i])
        self._write(C.tail, lambda t: t[:, i], new)

    # -- helpers --------------------------------------------------------------------------------------

    def _head(self, operands: Callable, inc: ItemChart, comp: ItemChart, key: int, relevant: Tensor) -> "HeadResult":
        """A head contraction (complete items of one width, or a tail row) in the semiring."""
        ops = operands(inc.log, comp.log, key)
        if self.exp_space:
            enc, shifts = operands(inc.value, comp.value, key), operands(inc.shift, comp.shift, key)
            terms = head_exp(enc.incomplete, shifts.incomplete, enc.complete, shifts.complete)
            out, rows = self._checked(
                terms.log(), terms.total, relevant, lambda r: head_log(LOG, ops.incomplete[r], ops.complete[r])
            )
            return HeadResult(out, rows, None, terms.total, terms.top)
        if self.tracing:
            out, trace = self.semiring.argsum(head_terms(ops.incomplete, ops.complete), -1)
            return HeadResult(out, None, trace)
        return HeadResult(head_log(self.semiring, ops.incomplete, ops.complete))

    def _checked(self, out: Tensor, total: Tensor, relevant: Tensor, exact: Callable):
        """``out`` with the spans whose exp-space ``total`` fell below THETA somewhere it matters
        recomputed by ``exact(rows)``; returns (out, rows or None)."""
        low = (total < self.theta) & relevant
        spans = low.flatten(2).any(-1)  # (B, S)
        if not bool(spans.any()):
            return out, None
        rows = spans.nonzero(as_tuple=True)
        out[rows] = exact(rows)
        return out, rows

    def _allowed_at(self, w: int, where: str) -> Tensor:
        """(B, S, M): the labels allowed at the "start" or "end" of each span of width w that lies in its
        sentence; "left head": at the end, but never for span start 0 (a left-complete item CL[0, w]
        would make the root a dependent: it cannot reach the root item)."""
        spans = self.n + 1 - w
        if where == "start":
            inside = torch.arange(w, self.n + 1, device=self.lengths.device)[None, :] <= self.lengths[:, None]
            return self.allowed[:, :spans] & inside[..., None]
        ends = self.allowed[:, w:]  # positions past the sentence's end allow nothing
        if where == "left head":
            ends = ends.clone()
            ends[:, 0] = False
        return ends

    def _write(self, chart: ItemChart, cells: Callable, log: Tensor) -> None:
        """Store log-space items at ``cells(chart tensor)`` and, for exp space, their encoding with one
        shift per item (complete items and tail)."""
        cells(chart.log).copy_(log)
        if chart.value is not None:
            shift = cells(chart.shift)
            shift.copy_(log.amax(-1)).clamp_min_(torch.finfo(log.dtype).min)
            torch.sub(log, shift.unsqueeze(-1), out=cells(chart.value)).exp_()
