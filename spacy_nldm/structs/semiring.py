"""Semirings for the tree's chart algorithm: one interface, instances with two attributes.

Chart items are always log-space tensors (a structure's score is the sum of its arc scores). A semiring
says how the items of one split are summed (:meth:`Semiring.sum`, over broadcast terms), and two
attributes tell the tree code how to run:

- ``exp_space``: the contractions may run in exp space, as matrix products with per-item shifts
  (:mod:`.contract`), each one checked against underflow and redone in log space where the check
  fails. Only for (log-sum-exp, +), whose sums are sums of exponentials (with up to four labels the
  tree stays in log space anyway: there the log-space operations are fewer and cheaper);
- ``backward``: how the gradient of the root item is taken. ``"outside"``: the explicit outside pass
  of the log semiring (the gradient is the marginals); ``"backtrack"``: follow the arg-maxes recorded
  in the forward pass (the gradient marks one best structure); ``"recompute"``: any semiring, by
  recomputing one stage at a time under autograd.

Use them as instances (``LogSemiring()``) or classes; a subclass inherits its parent's choices, so
``class MyLog(LogSemiring): pass`` runs exactly like :class:`LogSemiring`.
"""
from typing import Tuple

import torch

Tensor = torch.Tensor


class Semiring:
    """(sum, +) over log-space values. Subclasses define :meth:`sum` and may change the attributes."""

    exp_space: bool = False
    backward: str = "recompute"

    def sum(self, x: Tensor, dim: int) -> Tensor:
        """The semiring sum of x over ``dim``."""
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class LogSemiring(Semiring):
    """(log-sum-exp, +): log partition functions; the gradient of the result is the marginals."""

    exp_space = True
    backward = "outside"

    def sum(self, x: Tensor, dim: int) -> Tensor:
        return logsumexp(x, dim)


class BroadcastLogSemiring(LogSemiring):
    """(log-sum-exp, +) evaluated the straightforward way, by broadcasting and ``logsumexp`` with a
    backward pass by autograd: the reference that :class:`LogSemiring` is tested and timed against."""

    exp_space = False
    backward = "recompute"


class MaxSemiring(Semiring):
    """(max, +): Viterbi. :meth:`argsum` also returns the index that won, for the backtrack."""

    backward = "backtrack"

    def sum(self, x: Tensor, dim: int) -> Tensor:
        return x.amax(dim)

    def argsum(self, x: Tensor, dim: int) -> Tuple[Tensor, Tensor]:
        best = x.max(dim)
        return best.values, best.indices


def as_semiring(semiring) -> Semiring:
    """An instance, from an instance or a class."""
    if isinstance(semiring, type):
        semiring = semiring()
    if not isinstance(semiring, Semiring):
        raise TypeError(f"semiring must be a Semiring instance or class, got {semiring!r}")
    if semiring.backward not in ("outside", "backtrack", "recompute"):
        raise ValueError(f"unknown backward strategy {semiring.backward!r}")
    if semiring.backward == "outside" and not isinstance(semiring, LogSemiring):
        raise ValueError("the explicit outside pass computes the log semiring's shares: subclass LogSemiring")
    if semiring.backward == "backtrack" and not hasattr(semiring, "argsum"):
        raise ValueError("backtracking needs argsum(x, dim) -> (values, indices)")
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
    """log-sum-exp whose gradient is 0, not NaN, where every term is -inf, and whose exponentials
    skip torch's slow path for results below the smallest normal number (see :func:`exp_`)."""

    @staticmethod
    def forward(ctx, x: Tensor, dim: int) -> Tensor:
        top = x.amax(dim, keepdim=True).clamp_min_(torch.finfo(x.dtype).min)
        out = exp_(x - top).sum(dim).log_().add_(top.squeeze(dim))
        ctx.save_for_backward(x, out)
        ctx.dim = dim
        return out

    @staticmethod
    def backward(ctx, grad: Tensor):
        x, out = ctx.saved_tensors
        out = out.unsqueeze(ctx.dim).clamp_min(torch.finfo(x.dtype).min)  # exp(-inf - finite) = 0
        return exp_(x - out).mul_(grad.unsqueeze(ctx.dim)), None


def logsumexp(x: Tensor, dim: int) -> Tensor:
    """log sum exp over ``dim``; -inf (with gradient 0) when every term is -inf."""
    return _LogSumExp.apply(x, dim)
