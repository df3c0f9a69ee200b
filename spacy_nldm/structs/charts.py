"""The charts of the labelled Eisner algorithm (:class:`Charts`) and the strided views the stages read."""
from typing import Tuple

import torch

from .semiring import Item

Tensor = torch.Tensor


def band(chart: Tensor, spans: int, count: int, start: int, end: int, start_step: int, end_step: int) -> Tensor:
    """Strided view V[b, s, k, ...] = chart[b, s + start + k * start_step, s + end + k * end_step, ...]
    for s < spans, k < count, of a chart (B, N+1, N+1, ...) indexed [span start, span end]."""
    sb, si, sj = chart.stride()[:3]
    return chart.as_strided(
        (chart.shape[0], spans, count, *chart.shape[3:]),
        (sb, si + sj, start_step * si + end_step * sj, *chart.stride()[3:]),
        chart.storage_offset() + start * si + end * sj,
    )


def padded_zeros(like: Tensor, shape: Tuple[int, ...]) -> Tensor:
    """Zeros of ``shape`` (B, ...) with one zero slab of shape[1:] before and after it in memory,
    so that strided views may run a little past either end of the chart (they read zeros)."""
    return like.new_zeros((shape[0] + 2,) + tuple(shape[1:]))[1:-1]


class Charts:
    """The four charts of the labelled Eisner algorithm: right = CR (head at the start), left = CL
    (head at the end), indexed [b, span start, span end, label]; inc_right = IR (arc start -> end)
    and inc_left = IL (arc end -> start) up to width ``limit`` (wider ones do not exist).

    The incomplete charts are laid out so that the items a complete span sums over form one
    contiguous run per head label: IR[i, i+w, a, c] is stored at [b, i, a, w-1, c] and
    IL[i, i+w, a, c] at [b, i+w, c, limit-w, a]. :meth:`bands` and :meth:`cells` hide this and
    return views indexed [.., label of start, label of end].

    Values are stored as the semiring encodes them; ``*_shift`` charts (the same without the label
    axes) exist for the log semiring only.
    """

    def __init__(self, shape: Tuple[int, ...], limit: int, like: Tensor, with_shift: bool, zeros: bool = True):
        """Charts for dense scores of ``shape`` (B, N+1, N+1, M, M), dtype and device of ``like``.
        With ``zeros=False`` they are left uninitialised: the stages read only cells that an
        earlier stage wrote (span end >= start, width <= limit)."""
        batch, n1, _, m, _ = shape
        alloc = like.new_zeros if zeros else like.new_empty
        for name in ("right", "left"):  # small: zeroed and padded for the outside pass's views
            setattr(self, name, padded_zeros(like, (batch, n1, n1, m)))
            setattr(self, name + "_shift", padded_zeros(like, (batch, n1, n1)) if with_shift else None)
        self.limit = limit
        for name in ("inc_right", "inc_left"):
            setattr(self, name, alloc((batch, n1, m, limit, m)))
            setattr(self, name + "_shift", alloc((batch, n1, limit)) if with_shift else None)

    def set_base(self, base: Item) -> None:
        """Width-0 items CR[i, i] = CL[i, i] from the encoded base (B, N+1, M)."""
        value, shift = base
        for name in ("right", "left"):
            getattr(self, name).diagonal(0, 1, 2).copy_(value.transpose(1, 2))
            if shift is not None:
                getattr(self, name + "_shift").diagonal(0, 1, 2).copy_(shift)

    def bands(self, stage: str, key: int, limit: int, shift: bool = False) -> dict:
        """The chart regions that a stage reads (views). ``key`` is the span width of an
        "incomplete" or "complete" stage and the span start (row) of a "row" stage."""
        sfx = "_shift" if shift else ""
        right, left = getattr(self, "right" + sfx), getattr(self, "left" + sfx)
        inc_right, inc_left = getattr(self, "inc_right" + sfx), getattr(self, "inc_left" + sfx)
        if stage == "row":  # (B, K, ...): IR[i, i+d] and CR[i+d, j] for d = 1..K, j = i+K+1..N
            i = key
            ir = inc_right[:, i, :limit] if shift else inc_right[:, i].transpose(1, 2)
            return {"ir": ir, "cr": right[:, i + 1 : i + limit + 1, i + limit + 1 :]}
        w = key
        spans = right.shape[1] - w
        if stage == "incomplete":  # (B, S, w, ...)
            return {
                "cr": band(right, spans, w, 0, 0, 0, 1),  # CR[s, s+k], k = 0..w-1
                "cl": band(left, spans, w, 1, w, 1, 0),  # CL[s+k+1, s+w]
            }
        complete = {  # complete, w <= limit: (B, S, w, ...)
            "cr": band(right, spans, w, 1, w, 1, 0),  # CR[s+d, s+w]
            "cl": band(left, spans, w, 0, 0, 0, 1),  # CL[s, s+e]
        }
        if self.limit == 0:  # charts made without incomplete items
            return complete
        top = self.limit
        if shift:
            ir, il = inc_right[:, :spans, :w], inc_left[:, w : w + spans, top - w : top]
        else:
            ir = inc_right[:, :spans, :, :w].transpose(2, 3)
            il = inc_left[:, w : w + spans, :, top - w : top].permute(0, 1, 3, 4, 2)
        return {"ir": ir, "il": il, **complete}  # IR[s, s+d], d = 1..w; IL[s+e, s+w], e = 0..w-1

    def cells(self, stage: str, key: int, limit: int, shift: bool = False) -> dict:
        """The cells that a stage writes, by chart name, as views."""
        sfx = "_shift" if shift else ""
        if stage == "row":  # CR[i, j] for j = i+K+1..N: (B, N-i-K, ...)
            return {"right": getattr(self, "right" + sfx)[:, key, key + limit + 1 :]}
        spans = self.right.shape[1] - key
        if stage == "incomplete":  # IR[s, s+w], IL[s, s+w]
            inc_right, inc_left = getattr(self, "inc_right" + sfx), getattr(self, "inc_left" + sfx)
            u = self.limit - key
            if shift:
                return {"inc_right": inc_right[:, :spans, key - 1], "inc_left": inc_left[:, key:, u]}
            return {"inc_right": inc_right[:, :spans, :, key - 1], "inc_left": inc_left[:, key:, :, u].transpose(-1, -2)}
        return {name: band(getattr(self, name + sfx), spans, 1, 0, key, 0, 0).squeeze(2) for name in ("right", "left")}
