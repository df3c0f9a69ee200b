"""The factored lane: a first-order chain held as emissions (B, N, M), one transition matrix T (M, M) and
start scores (M,) (:class:`~.chain.ChainScores`, with the end scores added onto each sentence's last
emissions), in exp space, never building the (B, N, M, M) potentials:

    E[a, c] = exp(T[a, c] - max_a' T[a', c])                   (M, M), every entry in [0, 1]
    d_t[c]  = exp(e_t[c] + max_a T[a, c] - shift_t)            (B, M), the columns' shifts; max 1
    forward:  y_t = (y_{t-1} E) * d_t / top_t,   log alpha_t = log y_t + sum_{tau <= t} (log top_tau + shift_tau)
    backward: y_{t-1} = E (d_t * y_t) / top_t,   log beta_{t-1} = log y_{t-1} + sum_{tau >= t} (...)

and the marginals need no logarithm at all: the scales of alpha_t and beta_t are one number per token, so
P(y_t = c) = ya_t[c] yb_t[c] / sum_c' ya_t[c'] yb_t[c'], and the transition marginals summed over the
batch (the gradient of T) are E * (U^T W) with U, W the scaled alphas and betas (one matrix product).

The terms that underflow (each below the smallest normal number, tiny) are bounded a posteriori: every
value the recursions compute is a sum of at most M products of numbers at most 1, so it is off by at
most a few M tiny, and an error r (relative) in ya_t[c] moves log Z and every marginal by at most
r P_t(c). Summed over a sentence's tokens (``_underflow_bound``), this must stay below one rounding
error (the scores' eps). In float32 it does for transitions of standard deviation up to ~12 (columns of
E spanning up to 3/4 of -log tiny, ~65 nats); float32 scores whose columns span more run the same
recursions in float64 (tiny ~1e-308; at tagger sizes about as fast), which keeps them exact up to
std ~60-100. :func:`fast_path` says which sentences it trusts; :mod:`.chain` redoes the others on their
potentials, and the whole call when most sentences would be (or the columns span more than 3/4 of
float64's range, or a score is +inf or NaN, or the batch has no tokens). So the lane changes the speed, never
the result.

-inf scores (forbidden transitions, start or end labels, masked emissions: :mod:`.constraints`) are
structural zeros, exact in E and d: the spans leave them out, a label no previous label leads to has a
zero column of E, and a state no path reaches stays exactly 0 (marginal and gradient 0). The bound is a
posteriori, so it also catches a reachable state that underflowed to 0. A sentence no label sequence
fits (a zero norm) is not trusted: its potentials give it log Z = -inf and gradient 0.
"""
import math
from typing import Callable, NamedTuple, Optional

import torch

from .chain_common import real_tokens

Tensor = torch.Tensor


class Fast(NamedTuple):
    """What the fast path keeps for the gradient: the scaled alphas ``ya`` and betas ``yb`` (B, N, M),
    E (M, M), the column shifts d (B, N, M), log Z (B,), the token marginals (B, N, M) and ``exact``
    (B,): the sentences whose results it trusts (the others' log Z and marginals are 0 here)."""

    ya: Tensor
    yb: Tensor
    exps: Tensor
    d: Tensor
    log_z: Tensor
    token_marginals: Tensor
    exact: Tensor


def untrusted(fast: Optional[Fast]) -> Optional[Tensor]:
    """The sentences (R,) to redo on the potentials, or None when all should be (no fast path, or it
    trusts fewer than half of them: then one general call is cheaper)."""
    if fast is None:
        return None
    rows = (~fast.exact).nonzero().squeeze(1)
    return None if 2 * len(rows) > len(fast.exact) else rows


def fast_path(emissions: Tensor, transitions: Tensor, start: Tensor, lengths: Tensor) -> Optional[Fast]:
    """The recursions in the scores' dtype, or in float64 for float32 scores whose transitions span more
    than float32's range handles well (std ~12 and more; their bound decides which sentences it trusts);
    None when the columns span too much for float64 too (std ~150 and more)."""
    span = _column_span(transitions)
    fast = None
    if span <= 0.75 * -math.log(torch.finfo(emissions.dtype).tiny):
        fast = _recursions(emissions, transitions, start, lengths)
    # E's columns hold terms below float32's tiny (or its attempt trusts too few sentences): float64,
    # bounded against float32's eps, costs about as much as float32 at tagger sizes
    wide = emissions.dtype == torch.float32 and span <= 0.75 * -math.log(torch.finfo(torch.float64).tiny)
    if untrusted(fast) is None and wide:
        wider = (x.double() for x in (emissions, transitions, start))
        fast = _recursions(*wider, lengths, torch.finfo(emissions.dtype).eps)
    return fast


def _column_span(transitions: Tensor) -> float:
    """The largest span (max - min over the previous label) of a column of the transitions, in nats; -inf
    entries (forbidden transitions, exact zeros of E) are left out; NaN where a score is NaN or +inf."""
    column = transitions.amax(0)  # (M,)
    reached = column > float("-inf")  # a column of -inf only: a label no previous label leads to
    finite_low = torch.where(transitions > float("-inf"), transitions, column).amin(0)
    return float(torch.where(reached, column - finite_low, 0.0).amax()) if transitions.numel() else 0.0


def _recursions(emissions: Tensor, transitions: Tensor, start: Tensor, lengths: Tensor,
                eps: Optional[float] = None) -> Optional[Fast]:
    """The exp-space forward and backward passes (module docstring), or None when they cannot apply; a
    sentence is trusted when its underflow bound is at most ``eps`` (default: the dtype's)."""
    batch, n, m = emissions.shape
    if n == 0:
        return None
    tiny = torch.finfo(emissions.dtype).tiny
    real = real_tokens(lengths, n)
    emissions = torch.where(real[:, :, None], emissions, 0.0)  # padding may hold anything
    column = transitions.amax(0)  # (M,)
    if bool((column == float("inf")).any() | column.isnan().any()):
        return None  # +inf or NaN: the general path reports it
    column = torch.where(column > float("-inf"), column, 0.0)  # a label no previous label leads to: E's column 0
    exps = (transitions - column).exp()  # E (M, M), exact zeros at forbidden transitions
    shifted = torch.cat([(emissions[:, :1] + start), emissions[:, 1:] + column], 1)  # (B, N, M)
    shift = shifted.amax(-1)  # (B, N)
    if bool((shift == float("inf")).any() | shift.isnan().any()):  # +inf or NaN (start too)
        return None
    # a token with no allowed label: d_t = 0, its sentence's norm 0, so not trusted (redone on its potentials)
    shift = torch.where(shift > float("-inf"), shift, 0.0)
    d = (shifted - shift[:, :, None]).exp()  # every row's maximum is 1 (or 0)
    shift = torch.where(real, shift, 0.0)

    # forward: y_t = (y_{t-1} E) * d_t / top_t
    y = d[:, 0]
    ya, tops = [y], [shift.new_ones(batch, 1)]
    for t in range(1, n):
        # alpha_t[c] = log sum_a exp(alpha_{t-1}[a] + T[a, c]) + e_t[c]
        y = (y @ exps).mul_(d[:, t])
        top = y.amax(-1, keepdim=True).clamp_min_(tiny)  # tiny: only if every term underflowed
        y = y.div_(top)
        ya.append(y)
        tops.append(top)
    ya = torch.where(real[:, :, None], torch.stack(ya, 1), 0.0)  # (B, N, M), each real row's maximum 1
    tops = torch.cat(tops, 1)  # (B, N), 1 for token 0
    scale = (tops.log() + shift).cumsum(1)  # log alpha_t = log ya_t + scale_t
    last = (lengths - 1).clamp_min(0)[:, None]
    log_z = scale.gather(1, last).squeeze(1) + ya.gather(1, last[:, :, None].expand(batch, 1, m)).sum(-1).squeeze(1).log()
    log_z = torch.where(lengths > 0, log_z, 0.0)  # an empty sentence: the start state alone

    # backward: y_{t-1} = E (d_t * y_t) / top_t; 1 (beta = 0) at and after each sentence's last token
    ones = emissions.new_ones(batch, m)
    y = ones
    yb, back_tops = [y], []
    for t in range(n - 1, 0, -1):
        # beta_{t-1}[a] = log sum_c exp(T[a, c] + e_t[c] + beta_t[c])
        total = (y * d[:, t]) @ exps.t()
        top = total.amax(-1, keepdim=True).clamp_min_(tiny)
        y = torch.where(real[:, t, None], total.div_(top), ones)
        yb.append(y)
        back_tops.append(top)
    yb = torch.stack(yb[::-1], 1)  # (B, N, M)
    joint = ya * yb
    norm = joint.sum(-1)  # (B, N): sum_c ya_t[c] yb_t[c], Z without the scales of alpha_t and beta_t
    exact = _underflow_bound(ya, yb, tops, torch.cat(back_tops[::-1], 1) if n > 1 else None, norm, real)
    exact = exact <= (eps or torch.finfo(emissions.dtype).eps)  # NaN (0 / 0) is not trusted either
    log_z = torch.where(exact, log_z, 0.0)
    token_marginals = torch.where(real[:, :, None] & exact[:, None, None], joint / norm[:, :, None], 0.0)
    return Fast(ya, yb, exps, d, log_z, token_marginals, exact)


def _underflow_bound(ya: Tensor, yb: Tensor, tops: Tensor, back_tops: Optional[Tensor], norm: Tensor,
                     real: Tensor) -> Tensor:
    """(B,) a bound on what the terms that underflowed change in each sentence's log Z (nats), and in
    any of its token or transition marginals (absolute).

    Every value the recursions compute is a sum of at most M products of numbers at most 1 (the
    forward step into t: u_t = (ya_{t-1} E) * d_t, before it is divided by top_t; the backward step out
    of t: E (d_t * yb_t), before top'_t), so underflow changes it by at most k = 3M + 2 smallest normal
    numbers (tiny). Changing ya_t[c] by a factor (1 + r) changes Z by the factor (1 + r P_t(c)) and
    moves every marginal by at most |r| P_t(c), with P_t(c) = ya_t[c] yb_t[c] / norm_t; so an error
    of k tiny in u_t[c] counts k tiny yb_t[c] / (top_t norm_t), one in the backward step k tiny
    ya_{t-1}[a] / (top'_t norm_{t-1}), and one in ya_t * yb_t (the marginals) tiny / norm_t per label.
    """
    batch, n, m = ya.shape
    tiny = torch.finfo(ya.dtype).tiny
    k = (3 * m + 2) * tiny
    bound = (m * tiny) / norm  # (B, N)
    if back_tops is not None:
        into = (k * yb[:, 1:].sum(-1)) / tops[:, 1:] / norm[:, 1:]  # the forward step into t = 1..N-1
        out_of = (k * ya[:, :-1].sum(-1)) / back_tops / norm[:, :-1]  # the backward step out of t
        bound = bound + torch.cat([bound.new_zeros(batch, 1), into + out_of], 1)
    return torch.where(real, bound, 0.0).sum(1)


def _transition_gradient(fast: Fast, grad: Tensor, lengths: Tensor) -> Optional[Tensor]:
    """sum over the trusted sentences b and tokens t >= 1 of grad_b P_b(y_{t-1} = a, y_t = c), (M, M);
    None if a token's normaliser is 0 (then the caller takes the general path)."""
    ya, yb, exps, d = fast.ya, fast.yb, fast.exps, fast.d
    batch, n, m = ya.shape
    if n < 2:
        return exps.new_zeros(m, m)
    after = d[:, 1:] * yb[:, 1:]  # (B, N-1, M): d_t[c] yb_t[c]
    before = ya[:, :-1]  # ya_{t-1}[a]
    norm = (before * (after @ exps.t())).sum(-1)  # sum_{a, c} ya[a] E[a, c] d[c] yb[c], (B, N-1)
    real = real_tokens(lengths, n)[:, 1:] & fast.exact[:, None]
    if bool(((norm <= 0) & real).any()):
        return None
    weight = torch.where(real, grad[:, None] / norm, 0.0)  # (B, N-1)
    after = after * weight[:, :, None]
    return exps * (before.reshape(-1, m).t() @ after.reshape(-1, m))


class LogPartition(torch.autograd.Function):
    """log Z from :func:`fast_path`; gradients: token marginals (emissions, start) and summed transition
    marginals (transitions). Where the transition gradient's check fails, all three come from
    ``general(emissions, transitions, start, lengths)``, a differentiable log Z on the potentials."""

    @staticmethod
    def forward(ctx, emissions, transitions, start, lengths, fast: Fast, general: Callable):
        ctx.fast, ctx.general = fast, general
        ctx.save_for_backward(emissions, transitions, start, lengths)
        return fast.log_z.to(emissions.dtype)

    @staticmethod
    def backward(ctx, grad):
        emissions, transitions, start, lengths = ctx.saved_tensors
        fast, dtype = ctx.fast, emissions.dtype
        token = (fast.token_marginals * grad.to(fast.ya.dtype)[:, None, None]).to(dtype)
        moves = _transition_gradient(fast, grad.to(fast.ya.dtype), lengths) if ctx.needs_input_grad[1] else None
        if ctx.needs_input_grad[1] and moves is None:
            with torch.enable_grad():
                leaves = [x.detach().requires_grad_(True) for x in (emissions, transitions, start)]
                general = torch.autograd.grad(ctx.general(*leaves, lengths), leaves, grad)
            return general + (None, None, None)
        return token, None if moves is None else moves.to(dtype), token[:, 0].sum(0), None, None, None


def log_partition(emissions: Tensor, transitions: Tensor, start: Tensor, lengths: Tensor, fast: Fast,
                  general: Callable) -> Tensor:
    """log Z (B,) of the sentences ``fast`` trusts (0 for the others), differentiable with respect to
    ``emissions`` (B, N, M, end scores included), ``transitions`` and ``start``."""
    return LogPartition.apply(emissions, transitions, start, lengths, fast, general)
