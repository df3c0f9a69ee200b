"""A first-order chain in factored form, as pytorch-crf and most taggers hold it: emissions (B, N, M),
one transition matrix (M, M) shared by every token, and optional start and end scores (M,).

``crf_log_partition``, ``crf_marginals`` and ``crf_viterbi`` take a :class:`ChainScores` wherever they
take potentials. Its fast path never builds the (B, N, M, M) potentials; it is the exp-space recursion
of :mod:`.chain` with E_t the same for every token:

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
std ~60-100. A sentence whose bound fails is redone on its potentials (:func:`ChainScores.potentials`)
by the general path, exact at any score scale; the whole call is, when most sentences would be (or
the columns span more than 3/4 of float64's range), or a score is not finite, or a sentence is empty.
So the factored form changes the speed, never the result.

On a GPU a step costs its kernel launches rather than its arithmetic, and the general path's bounded
lane (one batched matrix product per token, :func:`.chain._bounded_recursions`) beats this path's five
or six operations per token (H200, B=32, n=30, M=17-25: 2.6-3.7 ms against 6.2-9.2 ms for log Z forward
and backward, score std 1-30; ``results/gpu/``). There, ``log_partition`` and ``marginals`` take the
potentials when they hold at most :data:`GPU_POTENTIALS_UP_TO` numbers and that lane takes them (tokens
spanning up to 354 nats); wider scores stay here (std 100: 8.4 ms, where the general path's log-space
lane takes 14).
"""
import math
from typing import NamedTuple, Optional, Tuple

import torch

from . import chain
from .checks import check_lengths, check_scores

Tensor = torch.Tensor


class ChainScores(NamedTuple):
    """First-order chain scores: ``emissions`` (B, N, M); ``transitions`` (M, M) indexed [previous,
    current]; ``start`` (M,) scores the first label, ``end`` (M,) the last real one (both optional)."""

    emissions: Tensor
    transitions: Tensor
    start: Optional[Tensor] = None
    end: Optional[Tensor] = None

    def potentials(self, lengths: Tensor) -> Tensor:
        """The same scores as (B, N, M, M) potentials (see :func:`~.chain.chain_potentials`)."""
        return chain.chain_potentials(self.emissions, self.transitions, lengths, start=self.start, end=self.end)

    def check(self, lengths) -> Tensor:
        """Validate shapes and dtypes; returns ``lengths`` as a long tensor."""
        check_scores(self.emissions, "emissions")
        if self.emissions.dim() != 3:
            raise ValueError(f"emissions must be (B, N, M), got {tuple(self.emissions.shape)}")
        batch, n, m = self.emissions.shape
        for name, value, shape in (("transitions", self.transitions, (m, m)), ("start", self.start, (m,)),
                                   ("end", self.end, (m,))):
            if value is None:
                continue
            check_scores(value, name)
            if tuple(value.shape) != shape or value.dtype != self.emissions.dtype:
                raise ValueError(f"{name} must be {self.emissions.dtype} of shape {shape}, got {value.dtype} "
                                 f"{tuple(value.shape)}")
        return check_lengths(lengths, batch, n, self.emissions.device)


#: the most numbers (B * N * M * M) of potentials built on a GPU instead of taking the fast path
GPU_POTENTIALS_UP_TO = 1 << 26


def _on_gpu(tensor: Tensor) -> bool:
    """``tensor.is_cuda``; a function of its own so that the CPU tests can force the GPU route."""
    return tensor.is_cuda


def _potentials_on_gpu(scores: ChainScores, lengths: Tensor) -> Optional[Tensor]:
    """The potentials, where the general path is the faster one: on a GPU, small enough, and taken by
    its bounded lane (module docstring); else None."""
    batch, n, m = scores.emissions.shape
    if not _on_gpu(scores.emissions) or batch * n * m * m > GPU_POTENTIALS_UP_TO:
        return None
    potentials = scores.potentials(lengths)
    return potentials if chain.runs_bounded(potentials.detach(), lengths) else None


def log_partition(scores: ChainScores, lengths: Tensor) -> Tensor:
    """log Z (B,), differentiable with respect to every tensor of ``scores``."""
    potentials = _potentials_on_gpu(scores, lengths)
    if potentials is not None:
        return chain._log_partition(potentials, lengths)
    emissions, start = _emissions_with_end(scores, lengths), _start_scores(scores)
    with torch.no_grad():
        fast = _fast_path(emissions.detach(), scores.transitions.detach(), start.detach(), lengths)
    rows = _redone(fast)
    if rows is None:
        return chain._log_partition(scores.potentials(lengths), lengths)
    log_z = _LogPartition.apply(emissions, scores.transitions, start, lengths, fast)
    if len(rows):  # the sentences the fast path does not trust, on their potentials
        log_z = log_z.index_copy(0, rows, chain._log_partition(*_sub_problem(scores, lengths, rows)))
    return log_z


def marginals(scores: ChainScores, lengths: Tensor) -> Optional[Tensor]:
    """P(y_t = c) (B, N, M), 0 beyond ``lengths``; None where the fast path does not apply (or is the
    slower one: on a GPU)."""
    with torch.no_grad():
        if _potentials_on_gpu(scores, lengths) is not None:
            return None
        emissions = _emissions_with_end(scores, lengths)
        fast = _fast_path(emissions, scores.transitions, _start_scores(scores), lengths)
        rows = _redone(fast)
        if rows is None:
            return None
        marg = fast.token_marginals.to(emissions.dtype)
        if len(rows):
            potentials, some_lengths = _sub_problem(scores, lengths, rows)
            redone, _ = chain._marginals(potentials.detach(), some_lengths)
            marg = marg.index_copy(0, rows, chain._token_label_sums(redone))
    return marg


def _sub_problem(scores: ChainScores, lengths: Tensor, rows: Tensor) -> Tuple[Tensor, Tensor]:
    """The sentences ``rows`` (R,) as the general path takes them: potentials (R, N, M, M) and lengths (R,)."""
    some = scores._replace(emissions=scores.emissions[rows])
    return some.potentials(lengths[rows]), lengths[rows]


def score(scores: ChainScores, labels: Tensor, lengths: Tensor) -> Tensor:
    """Score (B,) of the label sequences ``labels`` (B, N) (ignored beyond ``lengths``); differentiable."""
    emissions, start = _emissions_with_end(scores, lengths), _start_scores(scores)
    real = chain._real(lengths, emissions.shape[1])
    labels = torch.where(real, labels.to(emissions.device).long(), 0)
    picked = emissions.gather(2, labels[:, :, None]).squeeze(2)  # (B, N)
    moves = scores.transitions[labels[:, :-1], labels[:, 1:]]  # (B, N-1)
    picked = picked + torch.cat([start[labels[:, :1]], moves], 1)
    return torch.where(real, picked, 0.0).sum(1)


def masked(scores: ChainScores, mask: Tensor) -> ChainScores:
    """Disallowed labels (``mask`` (B, N, M) False) get emission -inf: the same as masking the potentials."""
    return scores._replace(emissions=scores.emissions.masked_fill(~mask, float("-inf")))


class _Fast(NamedTuple):
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


def _redone(fast: Optional[_Fast]) -> Optional[Tensor]:
    """The sentences (R,) to redo on the potentials, or None when all should be (no fast path, or it
    trusts fewer than half of them: then one general call is cheaper)."""
    if fast is None:
        return None
    rows = (~fast.exact).nonzero().squeeze(1)
    return None if 2 * len(rows) > len(fast.exact) else rows


def _emissions_with_end(scores: ChainScores, lengths: Tensor) -> Tensor:
    """The emissions with the end scores on each sentence's last real token."""
    if scores.end is None:
        return scores.emissions
    n = scores.emissions.shape[1]
    last = torch.arange(n, device=lengths.device)[None, :] == (lengths - 1)[:, None]
    return scores.emissions + last[:, :, None].to(scores.emissions.dtype) * scores.end


def _start_scores(scores: ChainScores) -> Tensor:
    if scores.start is not None:
        return scores.start
    return scores.emissions.new_zeros(scores.emissions.shape[-1])


def _fast_path(emissions: Tensor, transitions: Tensor, start: Tensor, lengths: Tensor) -> Optional[_Fast]:
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
    if _redone(fast) is None and wide:
        wider = (x.double() for x in (emissions, transitions, start))
        fast = _recursions(*wider, lengths, torch.finfo(emissions.dtype).eps)
    return fast


def _column_span(transitions: Tensor) -> float:
    """The largest span (max - min over the previous label) of a column of the transitions, in nats; -inf
    entries (forbidden transitions, exact zeros of E) are left out, NaN if a column has no finite entry."""
    column = transitions.amax(0)  # (M,)
    if not bool(torch.isfinite(column).all()):
        return math.nan
    finite_low = torch.where(transitions > float("-inf"), transitions, column).amin(0)
    return float((column - finite_low).amax())


def _recursions(emissions: Tensor, transitions: Tensor, start: Tensor, lengths: Tensor,
                eps: Optional[float] = None) -> Optional[_Fast]:
    """The exp-space forward and backward passes (module docstring), or None when they cannot apply; a
    sentence is trusted when its underflow bound is at most ``eps`` (default: the dtype's)."""
    batch, n, m = emissions.shape
    if n == 0 or bool((lengths == 0).any()):
        return None
    tiny = torch.finfo(emissions.dtype).tiny
    real = chain._real(lengths, n)
    emissions = torch.where(real[:, :, None], emissions, 0.0)  # padding may hold anything
    column = transitions.amax(0)  # (M,)
    if not bool(torch.isfinite(column).all()):
        return None  # a label no transition reaches, or +inf / NaN: the general path sorts it out
    exps = (transitions - column).exp()  # E (M, M)
    shifted = torch.cat([(emissions[:, :1] + start), emissions[:, 1:] + column], 1)  # (B, N, M)
    shift = shifted.amax(-1)  # (B, N)
    if not bool(torch.isfinite(shift).all()):  # a token with no allowed label, or +inf / NaN (start too)
        return None
    d = (shifted - shift[:, :, None]).exp()  # every row's maximum is 1
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
    last = (lengths - 1)[:, None]
    log_z = scale.gather(1, last).squeeze(1) + ya.gather(1, last[:, :, None].expand(batch, 1, m)).sum(-1).squeeze(1).log()

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
    return _Fast(ya, yb, exps, d, log_z, token_marginals, exact)


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


def _transition_gradient(fast: _Fast, grad: Tensor, lengths: Tensor) -> Optional[Tensor]:
    """sum over the trusted sentences b and tokens t >= 1 of grad_b P_b(y_{t-1} = a, y_t = c), (M, M);
    None if a token's normaliser is 0 (then the caller takes the general path)."""
    ya, yb, exps, d = fast.ya, fast.yb, fast.exps, fast.d
    batch, n, m = ya.shape
    if n < 2:
        return exps.new_zeros(m, m)
    after = d[:, 1:] * yb[:, 1:]  # (B, N-1, M): d_t[c] yb_t[c]
    before = ya[:, :-1]  # ya_{t-1}[a]
    norm = (before * (after @ exps.t())).sum(-1)  # sum_{a, c} ya[a] E[a, c] d[c] yb[c], (B, N-1)
    real = chain._real(lengths, n)[:, 1:] & fast.exact[:, None]
    if bool(((norm <= 0) & real).any()):
        return None
    weight = torch.where(real, grad[:, None] / norm, 0.0)  # (B, N-1)
    after = after * weight[:, :, None]
    return exps * (before.reshape(-1, m).t() @ after.reshape(-1, m))


class _LogPartition(torch.autograd.Function):
    """log Z from the fast path; gradients: token marginals (emissions, start) and summed transition
    marginals (transitions), or the general path's where a gradient check fails."""

    @staticmethod
    def forward(ctx, emissions, transitions, start, lengths, fast: _Fast):
        ctx.fast = fast
        ctx.save_for_backward(emissions, transitions, start, lengths)
        return fast.log_z.to(emissions.dtype)

    @staticmethod
    def backward(ctx, grad):
        emissions, transitions, start, lengths = ctx.saved_tensors
        fast, dtype = ctx.fast, emissions.dtype
        token = (fast.token_marginals * grad.to(fast.ya.dtype)[:, None, None]).to(dtype)
        moves = _transition_gradient(fast, grad.to(fast.ya.dtype), lengths) if ctx.needs_input_grad[1] else None
        if ctx.needs_input_grad[1] and moves is None:
            return _general_gradients(emissions, transitions, start, lengths, grad) + (None, None)
        return token, None if moves is None else moves.to(dtype), token[:, 0].sum(0), None, None


def _general_gradients(emissions, transitions, start, lengths, grad) -> Tuple[Tensor, Tensor, Tensor]:
    """The three gradients from the general path's transition marginals."""
    with torch.enable_grad():
        leaves = [x.detach().requires_grad_(True) for x in (emissions, transitions, start)]
        pot = chain.chain_potentials(leaves[0], leaves[1], lengths, start=leaves[2])
        log_z = chain._log_partition(pot, lengths)
        return torch.autograd.grad(log_z, leaves, grad)
