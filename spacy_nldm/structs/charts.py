"""The charts of the labelled Eisner algorithm and the views each stage reads and writes.

Positions run 0..N (0 is the root); K is the longest arc (max_dist, or N). Four charts of items, each
an :class:`ItemChart` (log-space values, and for exp-space semirings their encoding):

====================  ==============================  ===================================================
chart                 stored at                       item
====================  ==============================  ===================================================
``right``  (CR)       [b, i, w, a]                    CR[i, i+w, a]: i heads everything in (i, i+w]
``left``   (CL)       [b, i, w, c]                    CL[i, i+w, c]: i+w heads everything in [i, i+w)
``inc_right`` (IR)    [b, i, a, w-1, c]               IR[i, i+w, a, c]: arc i -> i+w, labels a (i), c (i+w)
``inc_left``  (IL)    [b, i+w, c, K-w, a]             IL[i, i+w, a, c]: arc i+w -> i
``tail``  (T)         [b, i, a]                       T[i, a] = CR[i, n_b, a] (sentence b's own end)
====================  ==============================  ===================================================

Relative form (exp space). An item's log value grows like its width times the scores' scale, so in
float32 it would be rounded by an ulp of its absolute size (1e-3 nats at 1e4), and near ties between
labels or splits would carry that rounding into the marginals. Every item is therefore stored as
item = rel + shift: ``shift`` (float64) one number per item (per span, over the item's labels),
``log`` the relative values rel (in the charts' dtype), ``value`` exp(rel).
A complete item's (and tail item's) shift is its maximum (max rel = 0); an incomplete item's is the
inner contraction's scale plus the span's largest arc (values at most the width, see :mod:`.contract`).

Widths are 0..K for complete items and 1..K for incomplete ones (memory O(B N K M^2)). The incomplete
layouts put a head label first: the items a complete span sums over are then one contiguous run of
(split, label) per head label.

The complete charts (and every chart laid out like them) get K rows of padding before position 0,
so that the outside pass may view spans starting before 0 (their factors are masked to 0).
"""
from typing import NamedTuple, Optional

import torch

Tensor = torch.Tensor


class ItemChart(NamedTuple):
    """Items in log space (``log``) or, for exp-space semirings, in relative form: item = log + shift,
    ``value = exp(log)``, one float64 ``shift`` per item (stored like the items without their label
    axes; the incomplete charts keep a label axis of size 1, so that the same views serve values and
    shifts): the maximum of each complete item; for an incomplete item see :mod:`.contract` (values at
    most the span's width). In exp space the relative log values of the incomplete items are written
    only when a span recomputed in log space reads them (:meth:`~.inside.Inside.incomplete_log`)."""

    log: Tensor
    value: Optional[Tensor] = None
    shift: Optional[Tensor] = None


class InnerOperands(NamedTuple):
    """What the incomplete items of width w read, split k = 0..w-1: (B, S, w, ...) each."""

    right: Tensor  # CR[s, s+k]
    left: Tensor  # CL[s+k+1, s+w]


class HeadOperands(NamedTuple):
    """What one complete item per span reads: the incomplete items of its head, (B, S, F, D, L) laid out
    [head label f, split d, other label l] (or (B, S, F, D) for shifts), and the complete items that
    continue them, (B, S, D, L) (or (B, S, D))."""

    incomplete: Tensor
    complete: Tensor


def band(chart: Tensor, spans: int, count: int, start: int, width: int, start_step: int, width_step: int) -> Tensor:
    """Strided view V[b, s, k, ...] = chart[b, s + start + k*start_step, width + k*width_step, ...] for
    s < spans, k < count, of a chart laid out [b, span start, span width, ...]. No copy.

    Example: the right-complete items CR[s+d, s+w] that the spans (s, s+w) of width w = 3 continue
    with, d = 1..3, are ``band(right, N-2, 3, 1, 2, 1, -1)``: V[b, s, 0] = CR[s+1, s+3] (stored at
    [s+1, 2]), V[b, s, 1] = CR[s+2, s+3] ([s+2, 1]), V[b, s, 2] = CR[s+3, s+3] ([s+3, 0]).
    """
    sb, si, sw = chart.stride()[:3]
    return chart.as_strided(
        (chart.shape[0], spans, count, *chart.shape[3:]),
        (sb, si, start_step * si + width_step * sw, *chart.stride()[3:]),
        chart.storage_offset() + start * si + width * sw,
    )


def padded(like: Tensor, shape: tuple, fill: float, lead: int) -> Tensor:
    """A (B, N+1, ...) chart filled with ``fill``, with ``lead`` rows of padding before position 0."""
    batch, n1, *rest = shape
    return like.new_full((batch, lead + n1, *rest), fill)[:, lead:]


# -- the views each stage reads and writes (the same for log values, encodings, shifts and outer charts)


def inner_operands(right: Tensor, left: Tensor, w: int) -> InnerOperands:
    """inner(s, s+w) = (+)_k CR[s, s+k] * CL[s+k+1, s+w]."""
    spans = right.shape[1] - w
    return InnerOperands(right[:, :spans, :w], band(left, spans, w, 1, w - 1, 1, -1))


def right_operands(inc_right: Tensor, right: Tensor, w: int) -> HeadOperands:
    """CR[s, s+w, a] = (+)_{d, c} IR[s, s+d, a, c] * CR[s+d, s+w, c], d = 1..w."""
    spans = right.shape[1] - w
    return HeadOperands(inc_right[:, :spans, :, :w], band(right, spans, w, 1, w - 1, 1, -1))


def left_operands(inc_left: Tensor, left: Tensor, w: int) -> HeadOperands:
    """CL[s, s+w, c] = (+)_{e, a} CL[s, s+e, a] * IL[s+e, s+w, a, c], e = 0..w-1."""
    spans, k = left.shape[1] - w, inc_left.shape[3]
    return HeadOperands(inc_left[:, w : w + spans, :, k - w :], left[:, :spans, :w])


def tail_operands(inc_right: Tensor, tail: Tensor, i: int) -> HeadOperands:
    """T[i, a] = (+)_{d, c} IR[i, i+d, a, c] * T[i+d, c], d = 1..K: one span (S = 1)."""
    k = inc_right.shape[3]
    return HeadOperands(inc_right[:, i : i + 1], tail[:, i + 1 : i + k + 1].unsqueeze(1))


def incomplete_cells(inc_right: Tensor, inc_left: Tensor, w: int):
    """Where IR[s, s+w] ([a, c]) and IL[s, s+w] ([c, a]) are stored: views (B, S, M[, M])."""
    spans, k = inc_right.shape[1] - w, inc_right.shape[3]
    return inc_right[:, :spans, :, w - 1], inc_left[:, w:, :, k - w]


def complete_cells(chart: Tensor, w: int) -> Tensor:
    """Where the complete items (s, s+w) are stored: a view (B, S, ...)."""
    return chart[:, : chart.shape[1] - w, w]


class Charts:
    """The charts of one call: complete (``right``, ``left``), incomplete (``inc_right``,
    ``inc_left``) and the ``tail``, each an :class:`ItemChart`; ``exp_space`` adds the encodings."""

    def __init__(self, shape: tuple, limit: int, like: Tensor, exp_space: bool):
        batch, n1, _, m, _ = shape
        self.limit = limit
        minus_inf = float("-inf")

        def complete(*rest):
            log = padded(like, (batch, n1, limit + 1) + rest, minus_inf, limit)
            if not exp_space:
                return ItemChart(log)
            shift = padded(like.new_empty((), dtype=torch.float64), log.shape[:3], 0.0, limit)
            return ItemChart(log, padded(like, log.shape, 0.0, limit), shift)

        def incomplete():
            # cells are written by their stage before they are read: no fill needed
            log = like.new_empty(batch, n1, m, limit, m)
            if not exp_space:
                return ItemChart(log)
            return ItemChart(log, like.new_empty(log.shape), like.new_empty(batch, n1, 1, limit, dtype=torch.float64))

        self.right, self.left = complete(m), complete(m)
        self.inc_right, self.inc_left = incomplete(), incomplete()
        tail = like.new_full((batch, n1, m), minus_inf)
        shift = like.new_zeros(batch, n1, dtype=torch.float64)
        self.tail = ItemChart(tail, torch.zeros_like(tail), shift) if exp_space else ItemChart(tail)
