"""Semirings for the tree's recurrences: (log-sum-exp, +) and (max, +), over log-space items.

A structure's score is the sum of its arc scores, so the semiring's product is always ``+``; a semiring
says how the terms of one item are summed (:meth:`Semiring.sum`, over the given axes of a broadcast
tensor of terms). Pass them as instances (``LogSemiring()``) or classes.
"""
from typing import Tuple

import torch

Tensor = torch.Tensor


class Semiring:
    """(sum, +) over log-space values. Subclasses define :meth:`sum`."""

    def sum(self, x: Tensor, dims: Tuple[int, ...]) -> Tensor:
        """The semiring sum of x over the axes ``dims``."""
        raise NotImplementedError

    def fill(self, mask: Tensor, dtype: torch.dtype) -> Tensor:
        """The semiring's one (0) where ``mask`` holds, its zero (-inf) elsewhere."""
        return torch.zeros((), dtype=dtype, device=mask.device).where(mask, float("-inf"))

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class LogSemiring(Semiring):
    """(log-sum-exp, +): log partition functions; the gradient of the result is the marginals."""

    def sum(self, x: Tensor, dims: Tuple[int, ...]) -> Tensor:
        return logsumexp(x, dims)


class MaxSemiring(Semiring):
    """(max, +): Viterbi. The gradient of a sum goes to one maximal term (the first), so the gradient of
    a best score marks one best structure."""

    def sum(self, x: Tensor, dims: Tuple[int, ...]) -> Tensor:
        dims = tuple(d % x.dim() for d in dims)
        keep = [d for d in range(x.dim()) if d not in dims]
        return x.permute(*keep, *dims).flatten(len(keep)).max(-1).values


def as_semiring(semiring) -> Semiring:
    """An instance, from an instance or a class."""
    if isinstance(semiring, type):
        semiring = semiring()
    if not isinstance(semiring, Semiring):
        raise TypeError(f"semiring must be a Semiring instance or class, got {semiring!r}")
    return semiring


def exp_(x: Tensor) -> Tensor:
    """exp of x in place, for x <= 0 as the exp-space code uses it, with results below 1.7 times the
    smallest normal number ``tiny`` set to 0 (below every error bound here anyway). torch's exp is
    20-100x slower on arguments whose result is subnormal, and 6x slower on -inf or arguments whose
    result underflows, so the arguments are clamped to log(tiny) + 0.5 first (a normal result, the
    fast path) and the clamped ones zeroed after."""
    return torch.nn.functional.threshold_(x.clamp_min_(_LOG_TINY[x.dtype] + 0.5).exp_(), _FLOOR[x.dtype], 0.0)


_LOG_TINY = {dtype: float(torch.log(torch.tensor(torch.finfo(dtype).tiny, dtype=torch.float64)))
             for dtype in (torch.float32, torch.float64)}
_FLOOR = {dtype: 1.7 * torch.finfo(dtype).tiny for dtype in (torch.float32, torch.float64)}


class _LogSumExp(torch.autograd.Function):
    """log-sum-exp over the axes ``dims`` whose gradient is 0, not NaN, where every term is -inf, and whose
    exponentials skip torch's slow path for results below the smallest normal number (see :func:`exp_`).
    The backward pass reuses the forward pass's exponentials: d out / d x = exp(x - top) / total."""

    @staticmethod
    def forward(ctx, x: Tensor, dims) -> Tensor:
        top = x.amax(dims, keepdim=True).clamp_min_(torch.finfo(x.dtype).min)
        exps = exp_(x - top)
        total = exps.sum(dims, keepdim=True)
        ctx.save_for_backward(exps, total)
        ctx.dims = dims
        return total.log().add_(top).squeeze(dims)

    @staticmethod
    def backward(ctx, grad: Tensor):
        exps, total = ctx.saved_tensors
        for d in sorted(d % exps.dim() for d in ctx.dims):
            grad = grad.unsqueeze(d)
        return exps * torch.where(total > 0, grad / total, 0.0), None


def logsumexp(x: Tensor, dims) -> Tensor:
    """log sum exp over ``dims`` (an axis or a tuple of axes); -inf (with gradient 0) when every term is -inf."""
    return _LogSumExp.apply(x, (dims,) if isinstance(dims, int) else tuple(dims))
