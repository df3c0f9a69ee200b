"""The bounded lane: a first-order chain on (B, N, M, M) potentials in exp space, with no underflow check,
when every real token's potentials span at most -log(THETA) nats (max - min over its M x M entries): 43.7
in float32 (score standard deviations up to ~5), 354 in float64 (up to ~40; float32 potentials spanning
more than 43.7 nats run it in float64, about twice the cost of float32 and still well below the log-space
lane's). :func:`.chain.crf_lane` says when :mod:`.chain` takes it.

With E_t = exp(X_t - m_t), m_t the token's largest potential and s_t its span, every entry of E_t is at
least exp(-s_t), so every entry of y E_t (and of E_t y) is at least max(y) exp(-s_t) and at most M max(y).
Rescaling every K steps, with K s <= -log(THETA) (s the largest span) and M^K below the square root of the
largest float, keeps every value between THETA and that root: no sum loses more than M tiny / THETA
(relative) to underflow, nothing overflows, and only one step in K pays for a maximum and a division.
log Z = log sum_c ya_N[c] + sum of the rescalings' logs + sum_t m_t. The marginals are the products
alpha_{t-1} E_t beta_t of values it keeps, with no second exponential.

-inf potentials (forbidden transitions, :mod:`.constraints`) are exact zeros of E_t, and the spans are
over the finite entries; but the lower bound above no longer holds (a state may lead nowhere, and the
nonzero entries may fall far below the maximum). With -inf at a real token the lane checks a
posteriori, per sentence, that no product alpha_{t-1}[a] E_t[a, c] beta_t[c] that is not a structural
zero fell below 4 tiny: in the loops' own values, such a product is at least low(alpha_{t-1}) exp(-s_t)
low(beta_t), low() the smallest nonzero entry. Then no sum lost anything to underflow (nor overflowed:
the zeros only lower the values), and the results are exact to rounding; the other sentences
(``Bounded.exact`` False, and those no sequence fits) go to the reference.
"""
import math
from typing import NamedTuple, Optional, Tuple

import torch

from .chain_common import real_tokens, theta
from .semiring import exp_

Tensor = torch.Tensor

_LOG2E = 1.0 / math.log(2.0)


class Bounded(NamedTuple):
    """What :func:`recursions` keeps: ``exps`` (B, N, M, M), E_t[a, c] = exp(X_t[a, c] - m_t) (the identity
    at padding tokens; None without the backward pass), ``ya`` (N+1, B, 1, M) alpha before each token and
    ``yb`` (N, B, M, 1) beta after each token (None without the backward pass), both in exp space,
    time-major, each token's maximum 1 (or 0), log Z (B,) and ``exact`` (B,) bool: the sentences whose
    results hold (None: all; see the module docstring for -inf potentials)."""

    exps: Optional[Tensor]
    ya: Tensor
    yb: Optional[Tensor]
    log_z: Optional[Tensor]
    exact: Optional[Tensor] = None


class Spans(NamedTuple):
    """:func:`token_spans`: each token's largest potential ``top`` (B, N), the largest ``span`` (max - min
    over the finite entries) of a real token's potentials, and ``each`` (B, N), every token's own span,
    where some real token holds -inf (None otherwise)."""

    top: Tensor
    span: float
    each: Optional[Tensor]


def token_spans(potentials: Tensor, lengths: Tensor) -> Spans:
    """The potentials' :class:`Spans`: a span is over the finite entries (-inf: a structural zero), NaN for
    NaN or +inf scores or a real token with no finite entry."""
    flat = potentials.reshape(*potentials.shape[:2], -1)
    top = flat.amax(-1)
    low = flat.amin(-1)
    real = real_tokens(lengths, potentials.shape[1])
    each = None
    if bool((real & (low == float("-inf"))).any()):
        low = flat.nan_to_num(nan=float("nan"), neginf=float("inf")).amin(-1)
        each = torch.where(real, top - low, 0.0)
    return Spans(top, float(torch.where(real, top - low, 0.0).amax()), each)


def widest_span(potentials: Tensor, lengths: Tensor) -> Optional[Spans]:
    """:func:`token_spans` of order-1 potentials that are not empty, else None; the lane takes the
    potentials where :func:`takes` the span."""
    if potentials.dim() != 4 or potentials.numel() == 0:
        return None
    return token_spans(potentials.detach(), lengths)


def takes(span: float, dtype: torch.dtype) -> bool:
    """Whether the lane takes tokens spanning ``span`` nats at most: -log(THETA) of ``dtype``, or of
    float64 for float32 (then it runs in float64)."""
    return span <= -theta(dtype) or (dtype == torch.float32 and span <= -theta(torch.float64))


def applies(potentials: Tensor, lengths: Tensor) -> bool:
    """Whether the lane takes these potentials: order 1, not empty, no +inf or NaN at a real token, whose
    finite entries span at most 354 nats."""
    spans = widest_span(potentials, lengths)
    return spans is not None and takes(spans.span, potentials.dtype)


def recursions(potentials: Tensor, lengths: Tensor, backward: bool, spans=None) -> Bounded:
    """The forward (and with ``backward`` the backward) pass; ``exps``, ``ya`` and ``yb`` in the dtype it
    ran in, log Z in the potentials'. The caller has checked :func:`applies`; ``spans``: the potentials'
    :func:`token_spans` if the caller has them."""
    batch, n, m, _ = potentials.shape
    real = real_tokens(lengths, n)
    top, span, each = token_spans(potentials, lengths) if spans is None else spans
    structural = each is not None  # -inf at a real token: check for underflow (module docstring)
    dtype = potentials.dtype
    if not span <= -theta(dtype):  # float32 tokens spanning 43.7 to 354 nats: the same lane in float64
        potentials = potentials.double()
    budget = -theta(potentials.dtype)
    growth = 0.5 * math.log(torch.finfo(potentials.dtype).max) / math.log(m) if m > 1 else n
    # K: K * span <= budget (n where the tokens are that flat: budget / span overflows for subnormal spans)
    by_span = n if span * n <= budget else int(budget / span)
    every = max(1, min(by_span, int(growth)))
    tiny = torch.finfo(potentials.dtype).tiny
    top = torch.where(real & (top > float("-inf")), top, 0.0).to(potentials.dtype)
    # E_t[a, c] = exp(X_t[a, c] - m_t) (the difference first: exact for a token of large but close scores)
    exps = torch.sub(potentials, top[:, :, None, None])
    if structural:  # torch's exp is slow on -inf: semiring.exp_ (a normal result, then exact zeros)
        exp_(exps)
    elif potentials.dtype == dtype:
        exps.exp_()
    else:  # float32 scores in float64: exp2(x / log 2), twice as fast as exp; rounding x / log 2 costs
        exps.mul_(_LOG2E).exp2_()  # up to 1e-13 (relative), far below float32's precision
    if bool((lengths < n).any()):  # identity transitions at padding tokens (which may hold anything)
        exps[~real] = torch.eye(m, dtype=potentials.dtype, device=potentials.device)
    ya = potentials.new_zeros(n + 1, batch, 1, m)  # row vectors
    ya[0, :, 0, 0] = 1.0  # the start state
    scales = []
    rows, steps = ya.unbind(0), exps.unbind(1)
    for t in range(n):
        # alpha_t[c] = log sum_a exp(alpha_{t-1}[a] + X_t[a, c]), less m_t and the rescalings
        torch.bmm(rows[t], steps[t], out=rows[t + 1])
        if (t + 1) % every == 0 and t + 1 < n:
            scales.append(rows[t + 1].amax(2).clamp_min_(tiny))  # (B, 1); tiny: a sentence no sequence fits
            rows[t + 1].div_(scales[-1][:, :, None])
    # summed in float64 (N + 1 numbers per sentence, rounded once)
    log_z = ya[n].sum(2).squeeze(1).log_().double() + top.sum(1, dtype=torch.float64)
    if scales:
        log_z += torch.cat(scales, 1).log_().sum(1, dtype=torch.float64)
    low_a = _log_smallest(ya[:, :, 0]) if structural else None  # (N+1, B), as the loop computed them
    ya.div_(ya.amax(3, keepdim=True).clamp_min_(tiny))
    if not backward:
        exact = _checked(low_a, None, each, real, potentials.dtype) if structural else None
        return Bounded(None, ya, None, log_z.to(dtype), exact)
    yb = potentials.new_ones(n, batch, m, 1)  # column vectors; beta = 0 after the last token
    columns = yb.unbind(0)
    for t in range(n - 1, 0, -1):
        # beta_{t-1}[a] = log sum_c exp(X_t[a, c] + beta_t[c]), less m_t and the rescalings
        torch.bmm(steps[t], columns[t], out=columns[t - 1])
        if (n - t) % every == 0:
            columns[t - 1].div_(columns[t - 1].amax(1, keepdim=True).clamp_min_(tiny))
    exact = _checked(low_a, _log_smallest(yb[:, :, :, 0]), each, real, potentials.dtype) if structural else None
    yb.div_(yb.amax(2, keepdim=True).clamp_min_(tiny))
    return Bounded(exps, ya, yb, log_z.to(dtype), exact)


def _checked(low_a: Tensor, low_b: Optional[Tensor], each: Tensor, real: Tensor, dtype: torch.dtype) -> Tensor:
    """(B,) bool: no product alpha_{t-1}[a] E_t[a, c] beta_t[c] of a real token that is not a structural
    zero is below 4 tiny, from the logs of the smallest nonzero alphas ``low_a`` (N+1, B) and betas
    ``low_b`` (N, B; None: the forward pass's products alone) as the loops computed them; and the last
    alpha is nonzero (a sentence no sequence fits is not trusted here: the reference gives it -inf)."""
    floor = math.log(4 * torch.finfo(dtype).tiny)
    bound = low_a[:-1].t() - each.to(torch.float64)  # (B, N)
    if low_b is not None:
        bound = bound + low_b.t()
    return (torch.where(real, bound, 0.0) >= floor).all(1) & (low_a[-1] > float("-inf"))


def _log_smallest(y: Tensor) -> Tensor:
    """log of the smallest nonzero entry over the last axis, float64; -inf where every entry is 0."""
    smallest = torch.where(y > 0, y, torch.inf).amin(-1).double()
    return torch.where(smallest < torch.inf, smallest, 0.0).log()


def transition_marginals(bounded: Bounded, lengths: Tensor, grad: Optional[Tensor] = None) -> Tensor:
    """P(a at t-1, c at t) (B, N, M, M), times ``grad`` (B,) if given; 0 beyond the lengths; written over
    ``bounded.exps`` (one tensor of that size less to allocate and fill saves 10-20% of the whole forward
    and backward at B=32, n=30, M=17-25). Each token's products are divided by their sum, which removes
    the token's scale; that sum is at least exp(-s_t) (alpha's and beta's maxima are 1), so the products
    that underflow (each below tiny) change no marginal by more than M^2 tiny exp(s_t)."""
    exps = bounded.exps
    n = exps.shape[1]
    before = bounded.ya[:-1].permute(1, 0, 3, 2)  # alpha_{t-1}[a], (B, N, M, 1)
    after = bounded.yb.permute(1, 0, 3, 2)  # beta_t[c], (B, N, 1, M)
    # P(a at t-1, c at t) = alpha_{t-1}[a] E_t[a, c] beta_t[c] / sum over (a, c)
    marg = exps.mul_(before).mul_(after)
    total = marg.sum((2, 3))
    # (a total of 0: a sentence no sequence fits, which the caller redoes on the reference)
    factor = torch.where(real_tokens(lengths, n) & (total > 0), (1.0 if grad is None else grad[:, None]) / total, 0.0)
    return marg.mul_(factor[:, :, None, None])


def marginals(potentials: Tensor, lengths: Tensor, spans=None) -> Tuple[Tensor, Tensor, Tensor]:
    """Transition marginals like ``potentials`` (0 beyond the lengths), log Z (B,) and the sentences (B,)
    whose results hold (:class:`Bounded`)."""
    bounded = recursions(potentials, lengths, True, spans)
    return transition_marginals(bounded, lengths).to(potentials.dtype), bounded.log_z, _all(bounded)


def _all(bounded: Bounded) -> Tensor:
    """``bounded.exact``, all True where it is None."""
    if bounded.exact is not None:
        return bounded.exact
    return torch.ones(bounded.log_z.shape[0], dtype=torch.bool, device=bounded.log_z.device)


class LogPartition(torch.autograd.Function):
    """log Z; its gradient (the transition marginals) from the backward pass, run in the forward pass
    when a gradient will be needed."""

    @staticmethod
    def forward(ctx, potentials: Tensor, lengths: Tensor, spans) -> Tuple[Tensor, Tensor]:
        backward = ctx.needs_input_grad[0]
        bounded = recursions(potentials, lengths, backward, spans)
        if backward:  # E_t kept aside, not saved: the backward turns it into the marginals in place
            ctx.save_for_backward(potentials, lengths, bounded.ya, bounded.yb)
            ctx.exps = bounded.exps
        exact = _all(bounded)
        ctx.mark_non_differentiable(exact)
        return bounded.log_z, exact

    @staticmethod
    def backward(ctx, grad: Tensor, _exact=None):
        potentials, lengths, ya, yb = ctx.saved_tensors
        exps, ctx.exps = ctx.exps, None
        if exps is None:  # a second backward through a retained graph: E_t again
            exps = recursions(potentials, lengths, backward=True).exps
        return transition_marginals(Bounded(exps, ya, yb, None), lengths, grad).to(grad.dtype), None, None


def log_partition(potentials: Tensor, lengths: Tensor, spans=None) -> Tuple[Tensor, Tensor]:
    """log Z (B,), differentiable, and the sentences (B,) whose log Z holds (:class:`Bounded`); ``spans``
    as for :func:`recursions`."""
    return LogPartition.apply(potentials, lengths, spans)
