"""The checked lane: a chain of any order on its potentials in exp space, each step's sum checked
against underflow. :mod:`.chain` takes it for order 2, and for finite order-1 potentials too wide for
the bounded lane, and redoes the sentences it flags in log space, so every result is exact at any score
scale.

Each step is a matrix product with E_t = exp(X_t - m_t), m_t the largest potential of each column (new
state) of token t, their differences brought back by a vector d_t per token, and the state vector scaled
by its own maximum, so the only exponentials of the size of the potentials are taken once. A label's own
score (its emission) is the same all down its column and cancels, so the forward sums stay large at any
emission scale: only the spread of the transitions into one state matters. A step is exact unless a sum
falls below THETA (then some terms may have underflowed): such sentences are returned as ``suspect``.
Tokens past a sentence's length get identity transitions, which leave alpha and beta unchanged (and are
not checked).
"""
from typing import Optional

import torch

from .chain_common import Logs, as_steps, identity, real_tokens, running_sums, start_state, theta
from .semiring import exp_

Tensor = torch.Tensor


def recursions(potentials: Tensor, lengths: Tensor, backward: bool):
    """alphas (B, N+1, S) (before token 0, then after each token), betas (B, N, S) (after each token) or
    None, both :class:`~.chain_common.Logs`, and ``suspect`` (B,) bool: sentences where a step's sum fell
    below THETA with a finite term. alphas is None when every sentence is suspect.

    The state vector is kept in exp space scaled to a maximum of 1. Each token's potentials are
    exponentiated once, per column: E_t[a, (p, c)] = exp(X_t[a, p, c] - m_t[p, c]) with m_t[p, c] the
    column's largest potential, so that every forward sum has a term of at least exp(-(spread of the
    column)); the columns' shifts come back as the vector d_t = exp(m_t - max m_t). A forward step is
    y' = (y E_t) d_t / max, a backward one y' = E_t (d_t y) / max; log alpha_t = log y_t +
    sum_{tau<=t} (log max_tau + max m_tau), summed after the loop. Each step's sum is checked before d_t
    scales it.
    """
    steps = as_steps(potentials)
    batch, n, m, p, _ = steps.shape
    real = real_tokens(lengths, n)
    # The attempt is skipped when it is bound to fail for every sentence: a sentence whose columns (the
    # potentials of one new state, over the oldest label) span at most -log(THETA) nats passes every
    # forward check (each sum has a term of at least exp(-span)); one with wider columns usually fails
    # (transition scores of standard deviation 10 and more). Two tokens per sentence are looked at:
    # enough to see the scale, and it costs next to nothing.
    # When whole tokens' potentials span at most -log(THETA) / 4 nats (scores of standard deviation up
    # to a few nats), one shift per token does (d_t = 1): the columns' shifts and their vector products
    # are skipped.
    narrow = True  # then no exponent is likely to fall below log(tiny): exp needs no guard (exp_)
    per_column = True
    budget = -theta(potentials.dtype)
    sample = torch.tensor(sorted({min(1, n - 1), n // 2}), device=potentials.device) if n else None
    if sample is not None:
        seen = steps[:, sample]  # (B, 2, A, P, C)
        spread = (seen.amax(2) - seen.amin(2)).flatten(2).amax(-1)
        wide = ((spread > budget) & real[:, sample]).any(1)
        if bool(wide.all()):
            return None, None, wide
        narrow = not bool(wide.any())
        whole = seen.flatten(2)
        # a quarter of the budget: the two sampled tokens must leave room for the others' spreads
        per_column = bool(((whole.amax(-1) - whole.amin(-1) > 0.25 * budget) & real[:, sample]).any())
    floor = torch.finfo(potentials.dtype).min
    if per_column:
        column = steps.amax(2).clamp_min_(floor)  # m_t[p, c] (B, N, P, C)
    else:
        column = steps.flatten(2).amax(-1).clamp_min_(floor)[:, :, None, None].expand(batch, n, p, m)
    column = torch.where(real[:, :, None, None], column, 0.0)  # padding: identity transitions below
    shift = column.flatten(2).amax(-1)  # (B, N)
    exps = torch.empty(batch, n, p, m, m, dtype=potentials.dtype, device=potentials.device)  # E_t [p, a, c]
    torch.sub(steps.transpose(2, 3), column[:, :, :, None, :], out=exps)
    exps.exp_() if narrow else exp_(exps)
    padding = (~real).nonzero(as_tuple=True)
    if len(padding[0]):  # identity transitions (padding may hold anything)
        exps[padding] = identity(m, p, potentials).transpose(0, 1).exp()
    tiny = torch.finfo(potentials.dtype).tiny
    step_exps = exps.reshape(batch, n, p * m, m).unbind(1)  # per token: p blocks [a, c] stacked
    step_scales = None  # d_t over the new states (p, c), all 1 with one shift per token
    if per_column:
        step_scales = exp_(column.sub(shift[:, :, None, None])).reshape(batch, n, p * m).unbind(1)
    y = start_state(batch, m * p, potentials).exp_()
    ys, tops, sums = [y], [], []
    for t in range(n):
        # alpha_t[(p, c)] = log sum_a exp(alpha_{t-1}[(a, p)] + X_t[a, p, c]): one product per p
        v = y.reshape(batch, m, p).transpose(1, 2).reshape(batch * p, 1, m)
        total = torch.bmm(v, step_exps[t].reshape(batch * p, m, m)).reshape(batch, p * m)
        if step_scales is None:
            y = total  # its sum is read back from ys and tops
        else:
            sums.append(total)
            y = total * step_scales[t]
        top = y.amax(-1, keepdim=True).clamp_min_(tiny)  # 0 only if the sentence is impossible
        y = y.div_(top)
        ys.append(y)
        tops.append(top)
    alphas, suspect = _unscale(ys, tops, shift, lambda values, rows: _forward_has_terms(values, steps, real, rows),
                               real, sums=sums or None, first_reachable=m)
    if not backward or bool(suspect.all()):  # every sentence is redone in log space: no backward here
        return alphas, None, suspect
    if n == 0:
        return alphas, Logs(potentials.new_zeros(batch, 0, m * p), potentials.new_zeros(batch, 0)), suspect
    y = potentials.new_ones(batch, m * p)  # beta_{n-1} = 0
    ys, tops = [y], []
    for t in range(n - 1, 0, -1):
        # beta_{t-1}[(a, p)] = log sum_c exp(X_t[a, p, c] + beta_t[(p, c)]): one product per p, [p, a] -> [a, p]
        z = (y if step_scales is None else y * step_scales[t]).reshape(batch * p, m, 1)
        total = torch.bmm(step_exps[t].reshape(batch * p, m, m), z)
        total = total.reshape(batch, p, m).transpose(1, 2).reshape(batch, m * p)
        top = total.amax(-1, keepdim=True).clamp_min_(tiny)
        y = total.div_(top)
        ys.append(y)
        tops.append(top)
    has_terms = lambda values, rows: _backward_has_terms(values, steps, real, rows)  # noqa: E731
    betas, low = _unscale(ys[::-1], tops[::-1], shift[:, 1:], has_terms, real[:, 1:], backward=True)
    return alphas, betas, suspect | low


def _unscale(ys: list, tops: list, shift: Tensor, has_terms, real: Tensor, backward: bool = False,
             sums: Optional[list] = None, first_reachable: Optional[int] = None):
    """Log values (:class:`~.chain_common.Logs`, T+1 tokens) from the scaled vectors ``ys`` (in token order) and the
    maxima ``tops`` (T of them) the steps divided by, and the sentences (B,) where a step of a real token (``real``
    (B, T)) had a sum below THETA with a finite term (``has_terms(values)``, evaluated only if some
    sum is that small); the sums are ``sums`` (exp space, T of them) if given, else read from ``ys``
    and ``tops``. Padding steps copy the state (identity transitions): nothing to check there.
    ``first_reachable`` (forward): the first step starts from the start state alone, which reaches only
    the new states (0, c), the first M (order 1: every state); the others' sums are exact zeros with no
    term, left out of the check (else every order-2 sentence would count as one to redo).
    Forward: value_t = log y_t + sum of (log top + m) of the steps up to t; backward: of those after t.
    The relative values log y_t (maximum 0) and the sums (the shifts) are kept apart."""
    ys = torch.stack(ys, 1)
    if not tops:
        return Logs(ys.log(), ys.new_zeros(ys.shape[:2])), ys.new_zeros(ys.shape[0], dtype=torch.bool)
    log_tops = torch.stack(tops, 1).log_()  # (B, T, 1)
    scale = running_sums(log_tops + shift[:, :, None], backward)
    if backward:
        sums = ys[:, :-1].log() + log_tops  # each step's sum, relative to its input's scale
    else:
        sums = torch.stack(sums, 1).log_() if sums is not None else ys[:, 1:].log() + log_tops
    values = Logs(ys.log(), scale.squeeze(-1))
    sums = torch.where(real[..., None], sums, 0.0)
    if first_reachable is not None and sums.shape[1]:
        sums[:, 0, first_reachable:] = 0.0
    return values, _suspect(sums, lambda rows: has_terms(values.rel, rows))


def _suspect(log_sums: Tensor, has_terms) -> Tensor:
    """(B,) sentences with a step sum below THETA where some term was finite (``has_terms(rows)``,
    like ``log_sums[rows]``, is evaluated only for the sentences with such a small sum: a sum of
    -inf terms is exactly 0, and those need no log-space redo). When most sentences have such a sum
    (scores of standard deviation 10 and more), all are sent to log space: the check would cost more."""
    low = log_sums < theta(log_sums.dtype)
    candidates = low.flatten(1).any(1)
    if not bool(candidates.any()):
        return candidates
    if 2 * int(candidates.sum()) > len(candidates):  # most sentences go to log space anyway: all of them
        return torch.ones_like(candidates)
    rows = candidates.nonzero().squeeze(1)
    suspect = torch.zeros_like(candidates)
    suspect[rows] = (low[rows] & has_terms(rows)).flatten(1).any(1)
    return suspect


def _finite_terms(steps: Tensor, real: Tensor) -> Tensor:
    """1.0 where a (padded) potential is finite, (B, N, A, P, C)."""
    m, p = steps.shape[2], steps.shape[3]
    padded = torch.where(real[:, :, None, None, None], steps, identity(m, p, steps))
    return (padded > float("-inf")).to(steps.dtype)


def _forward_has_terms(alphas: Tensor, steps: Tensor, real: Tensor, rows: Tensor) -> Tensor:
    """(R, N, S) for the sentences ``rows``: whether alpha_t[(p, c)] has a finite term
    alpha_{t-1}[(a, p)] + X_t[a, p, c]."""
    steps, real = steps[rows], real[rows]
    finite = (alphas[rows, :-1] > float("-inf")).to(steps.dtype).reshape(steps.shape[:4])
    return torch.einsum("btap,btapc->btpc", finite, _finite_terms(steps, real)).flatten(2) > 0


def _backward_has_terms(betas: Tensor, steps: Tensor, real: Tensor, rows: Tensor) -> Tensor:
    """(R, N-1, S) for the sentences ``rows``: whether beta_{t-1}[(a, p)], t = 1..N-1, has a finite term
    X_t[a, p, c] + beta_t[(p, c)]."""
    steps, real = steps[rows], real[rows]
    b, n, m, p, _ = steps.shape
    finite = (betas[rows, 1:] > float("-inf")).to(steps.dtype).reshape(b, n - 1, p, m)
    terms = _finite_terms(steps, real)[:, 1:]
    return torch.einsum("btapc,btpc->btap", terms, finite).flatten(2) > 0
