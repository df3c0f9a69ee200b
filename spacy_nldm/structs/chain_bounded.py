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
"""
import math
from typing import NamedTuple, Optional, Tuple

import torch

from .chain_common import real_tokens, theta

Tensor = torch.Tensor

_LOG2E = 1.0 / math.log(2.0)


class Bounded(NamedTuple):
    """What :func:`recursions` keeps: ``exps`` (B, N, M, M), E_t[a, c] = exp(X_t[a, c] - m_t) (the identity
    at padding tokens; None without the backward pass), ``ya`` (N+1, B, 1, M) alpha before each token and
    ``yb`` (N, B, M, 1) beta after each token (None without the backward pass), both in exp space,
    time-major, each token's maximum 1, and log Z (B,)."""

    exps: Optional[Tensor]
    ya: Tensor
    yb: Optional[Tensor]
    log_z: Optional[Tensor]


def token_spans(potentials: Tensor, lengths: Tensor) -> Tuple[Tensor, float]:
    """Each token's largest potential m_t (B, N) and the largest span (max - min) of a real token's
    (M, M) potentials (NaN for NaN or infinite scores)."""
    flat = potentials.reshape(*potentials.shape[:2], -1)
    top = flat.amax(-1)
    real = real_tokens(lengths, potentials.shape[1])
    return top, float(torch.where(real, top - flat.amin(-1), 0.0).amax())


def widest_span(potentials: Tensor, lengths: Tensor) -> Optional[Tuple[Tensor, float]]:
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
    """Whether the lane takes these potentials: order 1, not empty, every real token finite and spanning
    at most 354 nats."""
    spans = widest_span(potentials, lengths)
    return spans is not None and takes(spans[1], potentials.dtype)


def recursions(potentials: Tensor, lengths: Tensor, backward: bool, spans=None) -> Bounded:
    """The forward (and with ``backward`` the backward) pass; ``exps``, ``ya`` and ``yb`` in the dtype it
    ran in, log Z in the potentials'. The caller has checked :func:`applies`; ``spans``: the potentials'
    :func:`token_spans` if the caller has them."""
    batch, n, m, _ = potentials.shape
    real = real_tokens(lengths, n)
    top, span = token_spans(potentials, lengths) if spans is None else spans
    dtype = potentials.dtype
    if not span <= -theta(dtype):  # float32 tokens spanning 43.7 to 354 nats: the same lane in float64
        potentials = potentials.double()
    budget = -theta(potentials.dtype)
    growth = 0.5 * math.log(torch.finfo(potentials.dtype).max) / math.log(m) if m > 1 else n
    # K: K * span <= budget (n where the tokens are that flat: budget / span overflows for subnormal spans)
    by_span = n if span * n <= budget else int(budget / span)
    every = max(1, min(by_span, int(growth)))
    top = torch.where(real, top, 0.0).to(potentials.dtype)
    # E_t[a, c] = exp(X_t[a, c] - m_t) (the difference first: exact for a token of large but close scores)
    exps = torch.sub(potentials, top[:, :, None, None])
    if potentials.dtype == dtype:
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
            scales.append(rows[t + 1].amax(2))  # (B, 1)
            rows[t + 1].div_(scales[-1][:, :, None])
    # summed in float64 (N + 1 numbers per sentence, rounded once)
    log_z = ya[n].sum(2).squeeze(1).log_().double() + top.sum(1, dtype=torch.float64)
    if scales:
        log_z += torch.cat(scales, 1).log_().sum(1, dtype=torch.float64)
    ya.div_(ya.amax(3, keepdim=True))
    if not backward:
        return Bounded(None, ya, None, log_z.to(dtype))
    yb = potentials.new_ones(n, batch, m, 1)  # column vectors; beta = 0 after the last token
    columns = yb.unbind(0)
    for t in range(n - 1, 0, -1):
        # beta_{t-1}[a] = log sum_c exp(X_t[a, c] + beta_t[c]), less m_t and the rescalings
        torch.bmm(steps[t], columns[t], out=columns[t - 1])
        if (n - t) % every == 0:
            columns[t - 1].div_(columns[t - 1].amax(1, keepdim=True))
    yb.div_(yb.amax(2, keepdim=True))
    return Bounded(exps, ya, yb, log_z.to(dtype))


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
    factor = torch.where(real_tokens(lengths, n), (1.0 if grad is None else grad[:, None]) / total, 0.0)
    return marg.mul_(factor[:, :, None, None])


def marginals(potentials: Tensor, lengths: Tensor, spans=None) -> Tuple[Tensor, Tensor]:
    """Transition marginals like ``potentials`` (0 beyond the lengths) and log Z (B,)."""
    bounded = recursions(potentials, lengths, True, spans)
    return transition_marginals(bounded, lengths).to(potentials.dtype), bounded.log_z


class LogPartition(torch.autograd.Function):
    """log Z; its gradient (the transition marginals) from the backward pass, run in the forward pass
    when a gradient will be needed."""

    @staticmethod
    def forward(ctx, potentials: Tensor, lengths: Tensor, spans) -> Tensor:
        backward = ctx.needs_input_grad[0]
        bounded = recursions(potentials, lengths, backward, spans)
        if backward:  # E_t kept aside, not saved: the backward turns it into the marginals in place
            ctx.save_for_backward(potentials, lengths, bounded.ya, bounded.yb)
            ctx.exps = bounded.exps
        return bounded.log_z

    @staticmethod
    def backward(ctx, grad: Tensor):
        potentials, lengths, ya, yb = ctx.saved_tensors
        exps, ctx.exps = ctx.exps, None
        if exps is None:  # a second backward through a retained graph: E_t again
            exps = recursions(potentials, lengths, backward=True).exps
        return transition_marginals(Bounded(exps, ya, yb, None), lengths, grad).to(grad.dtype), None, None


def log_partition(potentials: Tensor, lengths: Tensor, spans=None) -> Tensor:
    """log Z (B,), differentiable; ``spans`` as for :func:`recursions`."""
    return LogPartition.apply(potentials, lengths, spans)
