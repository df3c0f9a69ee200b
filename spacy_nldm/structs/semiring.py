"""Semirings for the chart algorithms: (log-sum-exp, +) for inside/marginals and (max, +) for Viterbi.

A chart item is stored as a pair ``(value, shift)`` made by :meth:`encode`; both semirings
take and return log-space tensors at their boundaries, so the recurrences in
:mod:`.tree` and :mod:`.chain` are written once for both.

The operation with cubic cost is :meth:`contract`, a semiring matrix product over
a split dimension ``K`` (split points of a span) and a label dimension ``L``::

    out[b, s, f, g] = (+)_{k, l}  X[b, s, f, k, l] (*) Y[b, s, k, l, g]

The log semiring evaluates it in exp space, as a matrix product (BLAS) or, for matrix-vector
shapes, a multiply-and-sum, which is much faster than broadcast-and-logsumexp; it keeps it stable by scaling every item
by its own maximum (``shift``, one scalar per span) and every split point by the best
pair of shifts. Values and gradients always stay finite. The result is exact (to float
precision) while the labels' scores within one chart item span less than ~87 nats (float32;
~708 in float64): label combinations further below their item's best underflow and are
clamped to that floor. With larger spreads the floor is no longer negligible and log Z is
overestimated: measured against the float64 broadcast reference on random scores
(``tests/test_structs_tree.py``), float32 is exact to 1e-7 relative for arc scores of
standard deviation 30 and off by 2% at 50 and 11% at 100. Trained taggers' scores lie well
inside the exact range; the fix for larger ones is a log-space fallback for the spans whose
products underflow, in the forward and the outside pass.
:meth:`contract_columns` is the same product for one start position and all span ends at once
(the rows of spans wider than max_dist), with one shift per (split point, span end).
"""
from typing import List, Optional, Tuple

import torch

Tensor = torch.Tensor
Item = Tuple[Tensor, Optional[Tensor]]  # (value, shift) as made by a semiring's ``encode``

# A finite stand-in for log(0): keeps every sum, difference and gradient finite.
NEG = -1e9


def _expand_right(t: Tensor, ndim: int) -> Tensor:
    return t.reshape(t.shape + (1,) * ndim)


def _pairs(x: Tensor, y: Tensor) -> Tensor:
    """Log-space x (B, S, F, K, L) * y (B, S, K, L, G) for every term of ``contract``: (B, S, F, K*L, G)."""
    return (x.unsqueeze(-1) + y.unsqueeze(2)).flatten(3, 4)


def _column_pairs(x: Tensor, y: Tensor) -> Tensor:
    """Log-space x (B, K, F, L) * y (B, K, G, L) for every term of ``contract_columns``: (B, G, F, K*L)."""
    return (x.unsqueeze(2) + y.unsqueeze(3)).permute(0, 2, 3, 1, 4).flatten(3, 4)


class LogSemiring:
    """(log-sum-exp, +): log partition functions; autograd of the result gives marginals."""

    @staticmethod
    def encode(x: Tensor, label_ndim: int) -> Tuple[Tensor, Tensor]:
        """x (B, S, *labels) in log space -> (p, shift), x = log(p) + shift, max p = 1 per span."""
        shift = x.detach().flatten(2).amax(-1).clamp_min(NEG)  # -inf everywhere: no NaN below
        return (x - _expand_right(shift, label_ndim)).exp_(), shift

    @staticmethod
    def encode_into(x: Tensor, value: Tensor, shift: Tensor) -> None:
        """``encode`` x (B, S, *labels) straight into chart cells ``value`` and ``shift`` (views)."""
        top = x.flatten(2).amax(-1).clamp_min(NEG)
        shift.copy_(top)
        torch.sub(x, _expand_right(top, x.dim() - 2), out=value).exp_()

    @staticmethod
    def contract(x: Tensor, x_shift: Tensor, y: Tensor, y_shift: Tensor) -> Tensor:
        """x (B, S, F, K, L), y (B, S, K, L, G) encoded; shifts (B, S, K) -> log-space (B, S, F, G)."""
        prod, top = LogSemiring.contract_scaled(x, x_shift, y, y_shift)
        tiny = torch.finfo(prod.dtype).tiny
        return torch.log(prod.clamp_min(tiny)) + _expand_right(top, 2)

    @staticmethod
    def contract_scaled(x: Tensor, x_shift: Tensor, y: Tensor, y_shift: Tensor) -> Tuple[Tensor, Tensor]:
        """``contract`` before its final log: (prod (B, S, F, G), top (B, S)) with the result
        log(prod) + top. For a matrix product of encoded items max(prod) >= 1 per span."""
        b, s, f, k, l = x.shape
        g = y.shape[-1]
        pair = x_shift + y_shift
        top = pair.amax(-1, keepdim=True).clamp_min(NEG)
        y = y * _expand_right(torch.exp(pair - top), 2)
        if g == 1:
            # Matrix-vector per span, as multiply-and-sum over the flattened (K, L) axes, which are
            # one contiguous run per row in the tree's charts; batched gemv through BLAS is slower
            # here (tiny matrices, strided batch).
            prod = (x.flatten(3, 4) * y.reshape(b, s, 1, k * l)).sum(-1, keepdim=True)
        elif f == 1:  # vector-matrix (the chain's step): likewise
            prod = (x.reshape(b, s, k * l, 1) * y.reshape(b, s, k * l, g)).sum(2, keepdim=True)
        else:
            prod = torch.matmul(x.reshape(b, s, f, k * l), y.reshape(b, s, k * l, g))
        return prod, top.squeeze(-1)

    @staticmethod
    def reduce(x: Tensor, dim: int) -> Tensor:
        """(+) over one dimension of a log-space tensor."""
        return torch.logsumexp(x, dim)

    @staticmethod
    def contract_columns(x: Tensor, x_shift: Tensor, y: Tensor, y_shift: Tensor) -> Tensor:
        """out[b, g, f] = (+)_{k, l} X[b, k, f, l] * Y[b, k, g, l]; x (B, K, F, L) with shifts (B, K),
        y (B, K, G, L) with shifts (B, K, G) -> log-space (B, G, F), as one matrix product per b."""
        b, k, f, l = x.shape
        g = y.shape[2]
        pair = x_shift.unsqueeze(-1) + y_shift  # (B, K, G)
        top = pair.amax(1).clamp_min(NEG)  # (B, G)
        y = y * torch.exp(pair - top.unsqueeze(1)).unsqueeze(-1)
        prod = torch.bmm(x.transpose(1, 2).reshape(b, f, k * l), y.permute(0, 1, 3, 2).reshape(b, k * l, g))
        tiny = torch.finfo(prod.dtype).tiny
        return torch.log(prod.clamp_min(tiny)).transpose(1, 2) + top.unsqueeze(-1)


class MaxSemiring:
    """(max, +): Viterbi. The backward pass of the best score marks one best structure."""

    @staticmethod
    def encode(x: Tensor, label_ndim: int) -> Tuple[Tensor, Optional[Tensor]]:
        return x, None

    @staticmethod
    def encode_into(x: Tensor, value: Tensor, shift: Optional[Tensor]) -> None:
        value.copy_(x)

    @staticmethod
    def contract(x: Tensor, x_shift: Optional[Tensor], y: Tensor, y_shift: Optional[Tensor]) -> Tensor:
        # max(dim) (not amax) so that the gradient is one-hot even under ties.
        return _pairs(x, y).max(dim=3).values

    @staticmethod
    def reduce(x: Tensor, dim: int) -> Tensor:
        return x.max(dim=dim).values

    @staticmethod
    def contract_columns(x: Tensor, x_shift: Optional[Tensor], y: Tensor, y_shift: Optional[Tensor]) -> Tensor:
        return _column_pairs(x, y).max(dim=3).values


class BroadcastLogSemiring(MaxSemiring):
    """(log-sum-exp, +) by broadcasting and ``logsumexp``: the straightforward way, kept as the
    reference that the fast :class:`LogSemiring` is tested and benchmarked against."""

    @staticmethod
    def contract(x: Tensor, x_shift: Optional[Tensor], y: Tensor, y_shift: Optional[Tensor]) -> Tensor:
        return torch.logsumexp(_pairs(x, y), dim=3)

    @staticmethod
    def reduce(x: Tensor, dim: int) -> Tensor:
        return torch.logsumexp(x, dim)

    @staticmethod
    def contract_columns(x: Tensor, x_shift: Optional[Tensor], y: Tensor, y_shift: Optional[Tensor]) -> Tensor:
        return torch.logsumexp(_column_pairs(x, y), dim=3)


class TracingMaxSemiring(MaxSemiring):
    """(max, +) that also records, for every contraction, which (split point, label) won each max,
    in call order (``traces``); the tree's Viterbi backtracks through them without recomputing."""

    def __init__(self):
        self.traces: List[Tensor] = []

    def contract(self, x: Tensor, x_shift: Optional[Tensor], y: Tensor, y_shift: Optional[Tensor]) -> Tensor:
        best = _pairs(x, y).max(dim=3)
        self.traces.append(best.indices)  # (B, S, F, G), index into (K, L) flattened
        return best.values

    def contract_columns(self, x: Tensor, x_shift: Optional[Tensor], y: Tensor, y_shift: Optional[Tensor]) -> Tensor:
        best = _column_pairs(x, y).max(dim=3)
        self.traces.append(best.indices)  # (B, G, F), index into (K, L) flattened
        return best.values


def decode(item: Tuple[Tensor, Optional[Tensor]], label_ndim: int) -> Tensor:
    """Inverse of ``encode``: the log-space value of an item."""
    value, shift = item
    if shift is None:
        return value
    tiny = torch.finfo(value.dtype).tiny
    return torch.log(value.clamp_min(tiny)) + _expand_right(shift, label_ndim)
