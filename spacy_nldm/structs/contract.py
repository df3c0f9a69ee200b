"""The two contractions of the tree's inside pass, in exp space (fast, checked) and in log space (exact).

- inner (incomplete items): out[s, a, c] = (+)_k X[s, k, a] * Y[s, k, c]; X and Y are complete items;
- head (complete items): out[s, f] = (+)_{d, l} X[s, f, d, l] * Y[s, d, l]; X are the incomplete items
  of the span's head (f its label), Y the complete items that continue them.

Exp space. The log semiring's sums are sums of exponentials, so each contraction runs as a matrix
product of stored encodings, value = exp(item - shift) with one shift per item. For split k the pair
of shifts is p[k] = shift_x[k] + shift_y[k]; with top = max_k p[k] and g[k] = exp(p[k] - top) <= 1:

    total[f, g'] = sum_k g[k] X~[k, f] Y~[k, g']      out = log(total) + top

The shifts, p[k] and top are float64 (they grow like the span's width times the scores' scale) and
p[k] - top is rounded once to the charts' dtype; the outputs are kept relative to ``top`` (log(total)),
so in float32 no item is rounded by an ulp of its absolute size, only by one of its distance below top
(see :mod:`.charts`, "relative form"). A span recomputed in log space reads rel_x + rel_y + (p[k] - top):
relative to top, which for such a span may lie far above its best output (up to ~1,800 nats at std
1000, an ulp of 1e-4 in float32; measured label marginals stay within 2.5e-5).

The complete items are encoded with their maximum as the shift (every value at most 1). The incomplete
items are the inner total times the arc's exponential, value = total * exp(arc - largest arc of the
span) with shift = top + that largest arc, written without an exp or a log per label pair (see
:meth:`~.arcs.ArcScores.attach_exp`): their values are at most the number of splits w, and one that
underflows is below w * tiny; an item whose largest value is below 2^-10 is re-encoded from its log
value to a largest value of 1 (:mod:`.inside`), so no total is much smaller than with max-normalised
encodings. A term of a total that underflows therefore loses at most w^2 * tiny (``tiny`` the smallest
normal number), so a ``total`` of at least THETA = tiny / eps^2 is exact to a relative error of
(number of terms) * w^2 * eps^2, 1e-10 for a thousand terms of width 100 in float32. Smaller totals (a
label far below its item's best, at large score scales) are not trusted: the caller recomputes those
spans in log space (:func:`inner_log`, :func:`head_log`), so every result is exact at any score scale.
"""
from typing import NamedTuple, Tuple

import torch

from .semiring import LogSemiring, Semiring, exp_

Tensor = torch.Tensor
LOG = LogSemiring()


def theta(dtype: torch.dtype) -> float:
    """The smallest exp-space total that is trusted (see the module docstring)."""
    info = torch.finfo(dtype)
    return info.tiny / info.eps**2


def _floor(shift: Tensor) -> Tensor:
    """A shift of -inf (every term -inf) becomes the most negative float, so that x - shift is -inf, not NaN."""
    return shift.clamp_min_(torch.finfo(shift.dtype).min)


def scaled_pairs(x_shift: Tensor, y_shift: Tensor, dtype: torch.dtype, top=None) -> Tuple[Tensor, Tensor]:
    """The scales of a contraction's splits: pair[k] = x_shift[k] + y_shift[k] (float64, (..., K)),
    top = max_k pair[k] (float64, (...)) unless given, and pair - top rounded once to ``dtype``."""
    pair = x_shift.double() + y_shift
    if top is None:
        top = _floor(pair.amax(-1))
    return pair.sub_(top.unsqueeze(-1)).to(dtype), top


class InnerTerms(NamedTuple):
    x: Tensor  # X~ * g (B, S, K, A)
    y: Tensor  # Y~ (B, S, K, C)
    top: Tensor  # (B, S) float64
    total: Tensor  # (B, S, A, C)
    pair: Tensor  # pair[k] - top (B, S, K), log g

    def log(self) -> Tensor:
        """The outputs relative to ``top``: log(total)."""
        return self.total.log()


def inner_exp(x: Tensor, x_shift: Tensor, y: Tensor, y_shift: Tensor) -> InnerTerms:
    """x, y (B, S, K, M) encoded complete items with their shifts (B, S, K) (float64)."""
    pair, top = scaled_pairs(x_shift, y_shift, x.dtype)
    x = x * exp_(pair.clone()).unsqueeze(-1)
    return InnerTerms(x, y, top, torch.matmul(x.transpose(-1, -2), y), pair)


def ratio(outer: Tensor, total: Tensor) -> Tensor:
    """outer / total, 0 where the total is 0 (all its terms are then exactly 0)."""
    return torch.where(total > 0, outer / total, 0.0)


def inner_exp_outside(terms: InnerTerms, outer: Tensor) -> Tuple[Tensor, Tensor]:
    """Gradients (B, S, K, M) of the log output of :func:`inner_exp` with respect to the log of x and
    y, given ``outer`` (B, S, A, C) for the output: each term's share of its total, times ``outer``."""
    share = ratio(outer, terms.total)  # (B, S, A, C)
    grad_x = terms.x * torch.matmul(terms.y, share.transpose(-1, -2))
    grad_y = terms.y * torch.matmul(terms.x, share)
    return grad_x, grad_y


class HeadTerms(NamedTuple):
    x: Tensor  # X~ (B, S, F, D, L)
    y: Tensor  # Y~ * g (B, S, D, L)
    top: Tensor  # (B, S) float64
    total: Tensor  # (B, S, F)
    pair: Tensor  # pair[d] - top (B, S, D), log g

    def log(self) -> Tensor:
        """The outputs relative to ``top``: log(total)."""
        return self.total.log()


def head_exp(x: Tensor, x_shift: Tensor, y: Tensor, y_shift: Tensor) -> HeadTerms:
    """x (B, S, F, D, L) with shifts (B, S, 1, D) (one per item); y (B, S, D, L) with shifts (B, S, D);
    shifts float64."""
    pair, top = scaled_pairs(x_shift.squeeze(2), y_shift, y.dtype)
    y = y * exp_(pair.clone()).unsqueeze(-1)
    # every (d, l) of one head label is one contiguous run in the incomplete charts: one long sum
    total = (x.flatten(3) * y.flatten(2).unsqueeze(2)).sum(-1)
    return HeadTerms(x, y, top, total, pair)


def head_exp_outside_y(terms: HeadTerms, share: Tensor) -> Tensor:
    """Gradient (B, S, D, L) with respect to the log of y, for ``share`` = outer / total (B, S, F)."""
    return terms.y * (terms.x * share[..., None, None]).sum(2)


def head_exp_outside_x(terms: HeadTerms, share: Tensor) -> Tensor:
    """Gradient (B, S, F, D, L) with respect to the log of x."""
    return terms.x * terms.y.unsqueeze(2) * share[..., None, None]


# -- log space: any semiring, by broadcasting -------------------------------------------------------


def inner_terms(x: Tensor, y: Tensor) -> Tensor:
    """(..., K, A, C): every term x[k, a] * y[k, c] of the inner contraction; x (..., K, A), y (..., K, C)."""
    return x.unsqueeze(-1) + y.unsqueeze(-2)


def head_terms(x: Tensor, y: Tensor) -> Tensor:
    """(..., F, D*L): every term x[f, d, l] * y[d, l] of the head contraction; x (..., F, D, L), y (..., D, L)."""
    return (x + y.unsqueeze(-3)).flatten(-2)


def inner_log(semiring: Semiring, x: Tensor, y: Tensor) -> Tensor:
    return semiring.sum(inner_terms(x, y), -3)


def head_log(semiring: Semiring, x: Tensor, y: Tensor) -> Tensor:
    return semiring.sum(head_terms(x, y), -1)
