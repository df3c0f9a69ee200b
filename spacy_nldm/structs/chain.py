"""Linear-chain CRFs of order 1 and 2: the paper's baselines.

``potentials`` hold every score of the chain, emissions and transitions together:

- order 1: shape (B, N, M, M); ``potentials[b, t, a, c]`` scores label c at token t (0-based) after
  label a at token t-1. Token 0 follows the start state, read from row a = 0, so start transitions
  live in ``potentials[:, 0, 0, :]``.
- order 2: shape (B, N, M, M, M); ``potentials[b, t, a, p, c]`` scores y_t = c after y_{t-2} = a and
  y_{t-1} = p; missing previous labels are the start state, index 0.

The order is read from ``potentials.dim()``. ``lengths`` (B,) is an integer tensor of real token
counts; ``label_mask`` (B, N, M) bool restricts the labels of each token. End transitions are added by
the caller into the last real token's potentials (see :func:`chain_potentials`).

The forward and backward recursions (the backward one explicit, not autograd):

    alpha_t[s'] = (+)_a alpha_{t-1}[s] * pot[t, s, c]      (state s = (a, p), next state s' = (p, c))
    beta_{t-1}[s] = (+)_c pot[t, s, c] * beta_t[s']
    P(transition s -> c at t) = exp(alpha_{t-1}[s] + pot[t, s, c] + beta_t[s'] - log Z)

run in exp space (order 1 with narrow tokens: with no check needed; otherwise checked against
underflow), and in log space for the sentences that fail the check (see "the dynamic programs"
below), so every result is exact at any score scale; Viterbi runs in log
space (max over the oldest label per token) with back-pointers.

A token with no allowed label (every label masked, or every potential -inf) makes log Z = -inf; its
sentence then has zero marginals and gradient, and :func:`crf_viterbi` returns score -inf and labels 0.
"""
import math
from typing import NamedTuple, Optional, Tuple

import numpy
import torch

from .checks import Decoded, check_label_mask, check_lengths, check_scores, raise_if_not_finite
from .semiring import exp_, logsumexp

Tensor = torch.Tensor


def crf_log_partition(potentials: Tensor, lengths: Tensor, *, label_mask: Optional[Tensor] = None) -> Tensor:
    """log Z of the chain (or log S with a gold ``label_mask``), shape (B,); differentiable.

    When ``label_mask`` allows exactly one label at every real token, this is the score of that one
    label sequence, read off by indexing (no dynamic program). ``potentials`` may also be a
    :class:`~.chain_scores.ChainScores` (order 1, emissions and one transition matrix).
    """
    if _factored(potentials):
        return _factored_log_partition(potentials, lengths, label_mask)
    potentials, lengths, mask = _prepare(potentials, lengths, label_mask)
    labels = None if mask is None else _single_labels(mask, lengths)
    if labels is not None:
        log_z = crf_score(potentials, labels, lengths)
    else:
        if mask is not None:
            potentials = _masked(potentials, mask)
        log_z = _log_partition(potentials, lengths)
    raise_if_not_finite(log_z, lambda b: _bad_position(potentials, lengths, b))
    return log_z


def crf_score(potentials: Tensor, labels: Tensor, lengths: Tensor) -> Tensor:
    """Score (B,) of given label sequences ``labels`` (B, N) (values beyond ``lengths`` are ignored);
    differentiable with respect to ``potentials``."""
    check_scores(potentials, "potentials")
    batch, n = potentials.shape[:2]
    lengths = check_lengths(lengths, batch, n, potentials.device)
    order = potentials.dim() - 3
    real = _real(lengths, n)
    labels = torch.where(real, labels.to(potentials.device).long(), 0)
    start = labels.new_zeros(batch, order)
    history = torch.cat([start, labels], dim=1)  # y_{t-order} .. y_t at columns t .. t + order
    index = [torch.arange(batch, device=labels.device)[:, None], torch.arange(n, device=labels.device)[None, :]]
    index += [history[:, k : k + n] for k in range(order + 1)]
    picked = potentials[tuple(index)]  # (B, N)
    return torch.where(real, picked, 0.0).sum(1)


def crf_viterbi(potentials: Tensor, lengths: Tensor, *, label_mask: Optional[Tensor] = None) -> Decoded:
    """Best label sequence: :class:`~.checks.Decoded` (labels (B, N), heads None, score (B,))."""
    if _factored(potentials):
        potentials = potentials.potentials(potentials.check(lengths))
    potentials, lengths, mask = _prepare(potentials, lengths, label_mask)
    with torch.no_grad():
        if mask is not None:
            potentials = _masked(potentials, mask)
        labels, score = _viterbi(potentials.detach(), lengths)
    raise_if_not_finite(score, lambda b: _bad_position(potentials, lengths, b))
    return Decoded(labels, None, score)


def crf_marginals(potentials: Tensor, lengths: Tensor, *, label_mask: Optional[Tensor] = None) -> Tensor:
    """P(y_t = c | x), shape (B, N, M), 0 beyond ``lengths`` and for impossible sentences."""
    if _factored(potentials):
        marg = _factored_marginals(potentials, lengths, label_mask)
        if marg is not None:
            return marg
        potentials = potentials.potentials(potentials.check(lengths))
    potentials, lengths, mask = _prepare(potentials, lengths, label_mask)
    with torch.no_grad():
        if mask is not None:
            potentials = _masked(potentials, mask)
        marg, log_z = _marginals(potentials.detach(), lengths)
    raise_if_not_finite(log_z, lambda b: _bad_position(potentials, lengths, b))
    return _token_label_sums(marg)


def chain_potentials(
    emissions: Tensor,
    transitions: Tensor,
    lengths: Tensor,
    start: Optional[Tensor] = None,
    end: Optional[Tensor] = None,
) -> Tensor:
    """Potentials from the usual parametrisation.

    emissions (B, N, M); transitions (M, M) for order 1 or (M, M, M) for order 2, indexed by the
    previous label(s) then the current one; start (M,) scores the first label, end (M,) the last.
    The start state is index 0 of the previous-label axes, so its transition rows are replaced by
    ``start`` at token 0 (and, for order 2, by ``transitions[0]`` as the y_{t-2} of token 1).
    """
    batch, n, m = emissions.shape
    order = transitions.dim() - 1
    if end is not None:  # onto the last real token's emissions
        last = torch.arange(n, device=emissions.device)[None, :] == (lengths.to(emissions.device) - 1)[:, None]
        emissions = emissions + last[:, :, None].to(emissions.dtype) * end
    first = transitions.new_zeros((1,) * order + (m,)) if start is None else start.reshape((1,) * order + (m,))
    per_token = torch.cat([first.expand(1, *transitions.shape), transitions.expand(max(n - 1, 0), *transitions.shape)])
    return emissions.reshape(batch, n, *((1,) * order), m) + per_token[:n]


# -- the dynamic programs ---------------------------------------------------------------------------
#
# A state is the last ``order`` labels, s = (a, p) with a the oldest label and p the rest (empty for
# order 1: P = 1), stored oldest first; one token's potentials read as X_t[a, p, c] (B, A, P, C):
#
#     forward:   alpha_t[(p, c)]    = log sum_a exp(alpha_{t-1}[(a, p)] + X_t[a, p, c])
#     backward:  beta_{t-1}[(a, p)] = log sum_c exp(X_t[a, p, c] + beta_t[(p, c)])
#     marginal:  P(s at t-1, c at t) = exp(alpha_{t-1}[s] + X_t[s, c] + beta_t[(p, c)] - log Z)
#
# Fast path (:func:`_exp_recursions`): each step is a matrix product with E_t = exp(X_t - m_t), m_t
# the largest potential of each column (new state) of token t, their differences brought back by a
# vector d_t per token, and the state vector scaled by its own maximum, so the only exponentials of
# the size of the potentials are taken once. A label's own score (its emission) is the same all down
# its column and cancels, so the forward sums stay large at any emission scale: only the spread of
# the transitions into one state matters. A step is exact unless a sum falls below THETA (then some
# terms may have underflowed); such sentences are redone in log space (:func:`_log_recursions`, one
# logsumexp per token), so every result is exact at any score scale. Tokens past a sentence's length
# get identity transitions, which leave alpha and beta unchanged (and are not checked).
#
# Before both, order 1 tries the bounded lane (:func:`_bounded_recursions`): when every real token's
# potentials span at most -log(THETA) nats (standard deviations up to ~5 in float32; float32 scores up
# to ~40 run it in float64), no sum can lose anything that matters to underflow, so the steps need
# neither check nor per-step rescaling (one maximum and division per K tokens) and the marginals are
# the products alpha E_t beta of values it keeps, with no second exponential. This is what the peers'
# first-order chains are timed against.
#
# Both paths keep alpha_t and beta_t as :class:`_Logs`: values relative to a per-token shift (their
# maximum 0) and the shifts apart. The shifts grow with the position (t times the scores' scale), so in
# float32 the absolute values round by an ulp of t * std (5e-4 at std 300, t = 30); the marginals of
# token t depend only on differences within it, and are formed from the relative values, which round
# by an ulp of the scores' own size. The shifts enter log Z and one constant per token, which the
# marginals' normalisation removes.


class _Logs(NamedTuple):
    """Log values ``rel + shift[..., None]`` of alpha or beta: ``rel`` (B, T, S), each token's maximum 0
    (-inf throughout where no state is reachable), and ``shift`` (B, T) the per-token offsets."""

    rel: Tensor
    shift: Tensor

    def index_copy(self, rows: Tensor, other: "_Logs") -> "_Logs":
        return _Logs(self.rel.index_copy(0, rows, other.rel), self.shift.index_copy(0, rows, other.shift))


def _factored(potentials) -> bool:
    from .chain_scores import ChainScores

    return isinstance(potentials, ChainScores)


def _factored_inputs(scores, lengths, label_mask: Optional[Tensor]):
    """A ChainScores' checked lengths and label mask (None, or bool on the emissions' device)."""
    lengths = scores.check(lengths)
    mask = check_label_mask(label_mask, tuple(scores.emissions.shape))
    return lengths, None if mask is None else mask.to(lengths.device)


def _factored_log_partition(scores, lengths, label_mask: Optional[Tensor]) -> Tensor:
    """crf_log_partition of a ChainScores: its fast path (:mod:`.chain_scores`), else the potentials'."""
    from . import chain_scores

    lengths, mask = _factored_inputs(scores, lengths, label_mask)
    labels = None if mask is None else _single_labels(mask, lengths)
    if labels is not None:
        log_z = chain_scores.score(scores, labels, lengths)
    else:
        log_z = chain_scores.log_partition(scores if mask is None else chain_scores.masked(scores, mask), lengths)
    raise_if_not_finite(log_z, lambda b: _bad_position(scores.potentials(lengths), lengths, b))
    return log_z


def _factored_marginals(scores, lengths, label_mask: Optional[Tensor]) -> Optional[Tensor]:
    """crf_marginals of a ChainScores by its fast path, or None where that does not apply."""
    from . import chain_scores

    lengths, mask = _factored_inputs(scores, lengths, label_mask)
    return chain_scores.marginals(scores if mask is None else chain_scores.masked(scores, mask), lengths)


def _prepare(potentials: Tensor, lengths: Tensor, label_mask: Optional[Tensor]):
    check_scores(potentials, "potentials")
    if potentials.dim() not in (4, 5):
        raise ValueError(
            f"potentials must be (B, N, M, M) for order 1 or (B, N, M, M, M) for order 2, got {tuple(potentials.shape)}"
        )
    batch, n = potentials.shape[:2]
    m = potentials.shape[-1]
    if any(size != m for size in potentials.shape[2:]):
        raise ValueError(f"the label axes of potentials must have equal sizes, got {tuple(potentials.shape)}")
    lengths = check_lengths(lengths, batch, n, potentials.device)
    mask = check_label_mask(label_mask, (batch, n, m))
    return potentials, lengths, None if mask is None else mask.to(potentials.device)


def _masked(potentials: Tensor, mask: Tensor) -> Tensor:
    """Disallowed current labels read as -inf (previous labels follow: their alpha is -inf)."""
    batch, n, m = mask.shape
    ok = mask.reshape(batch, n, *((1,) * (potentials.dim() - 3)), m)
    return torch.where(ok, potentials, float("-inf"))


def _single_labels(mask: Tensor, lengths: Tensor) -> Optional[Tensor]:
    """The labels (B, N) if the mask allows exactly one label at every real token, else None."""
    real = _real(lengths, mask.shape[1])
    if not bool(((mask.sum(-1) == 1) | ~real).all()):
        return None
    return mask.to(torch.uint8).argmax(-1)


def _as_steps(potentials: Tensor) -> Tensor:
    """(B, N, M[, M], M) -> (B, N, A, P, C)."""
    batch, n = potentials.shape[:2]
    m = potentials.shape[-1]
    p = m ** (potentials.dim() - 4)  # previous-label histories beyond the one in A: 1 (order 1) or M (order 2)
    return potentials.reshape(batch, n, m, p, m)


def _start(batch: int, size: int, like: Tensor) -> Tensor:
    """alpha before token 0, (B, S): the start state (index 0) has log value 0."""
    alpha = like.new_full((batch, size), float("-inf"))
    alpha[:, 0] = 0.0
    return alpha


def _identity(m: int, p: int, like: Tensor) -> Tensor:
    """Potentials (A, P, C) of a token that changes nothing: 0 where the new label c repeats the
    newest label of the state (a for order 1, p for order 2), -inf elsewhere."""
    keep = torch.eye(m, dtype=torch.bool, device=like.device)
    keep = keep.reshape(m, 1, m) if p == 1 else keep.reshape(1, m, m)
    zero = torch.zeros((), dtype=like.dtype, device=like.device)
    return torch.where(keep, zero, float("-inf"))


def _theta(dtype: torch.dtype) -> float:
    """log of the smallest sum an exp-space step trusts: sqrt of the smallest normal number, so that
    the mass lost to underflow (at most one smallest normal per term) is negligible next to it."""
    return 0.5 * float(torch.log(torch.tensor(torch.finfo(dtype).tiny, dtype=torch.float64)))


def _exp_recursions(potentials: Tensor, lengths: Tensor, backward: bool):
    """alphas (B, N+1, S) (before token 0, then after each token), betas (B, N, S) (after each token)
    or None, both :class:`_Logs`, and ``suspect`` (B,) bool: sentences where a step's sum fell below
    THETA with a finite term.

    The state vector is kept in exp space scaled to a maximum of 1. Each token's potentials are
    exponentiated once, per column: E_t[a, (p, c)] = exp(X_t[a, p, c] - m_t[p, c]) with m_t[p, c] the
    column's largest potential, so that a label's own score (its emission) cancels within its column
    and every forward sum has a term of at least exp(-(spread of the column)); the columns' shifts
    come back as the vector d_t = exp(m_t - max m_t). A forward step is y' = (y E_t) d_t / max, a
    backward one y' = E_t (d_t y) / max; log alpha_t = log y_t + sum_{tau<=t} (log max_tau + max m_tau),
    summed after the loop. Each step's sum is checked before d_t scales it.
    """
    steps = _as_steps(potentials)
    batch, n, m, p, _ = steps.shape
    real = _real(lengths, n)
    # The exp-space attempt is skipped when it is bound to fail for every sentence: a sentence whose
    # columns (the potentials of one new state, over the oldest label) span at most -log(THETA) nats
    # passes every forward check (each sum has a term of at least exp(-span)); one with wider columns
    # usually fails (transition scores of standard deviation 10 and more). Two tokens per sentence are
    # looked at: enough to see the scale, and it costs next to nothing.
    # When whole tokens' potentials span at most -log(THETA) / 4 nats (scores of standard deviation up
    # to a few nats), one shift per token does (d_t = 1): the columns' shifts and their vector products
    # are skipped, which is most of a step's cost at small M.
    narrow = True  # then no exponent is likely to fall below log(tiny): exp needs no guard (exp_)
    per_column = True
    budget = -_theta(potentials.dtype)  # -log(THETA), nats: potentials spanning less pass every check
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
        exps[padding] = _identity(m, p, potentials).transpose(0, 1).exp()
    tiny = torch.finfo(potentials.dtype).tiny
    step_exps = exps.reshape(batch, n, p * m, m).unbind(1)  # per token: p blocks [a, c] stacked
    step_scales = None  # d_t over the new states (p, c), all 1 with one shift per token
    if per_column:
        step_scales = exp_(column.sub(shift[:, :, None, None])).reshape(batch, n, p * m).unbind(1)
    y = _start(batch, m * p, potentials).exp_()
    ys, tops, sums = [y], [], []
    if p == 1:
        y = y.unsqueeze(1)  # (B, 1, M) through the loop: row vector times E_t
    for t in range(n):
        # alpha_t[(p, c)] = log sum_a exp(alpha_{t-1}[(a, p)] + X_t[a, p, c])
        if p == 1:
            total = torch.bmm(y, step_exps[t])
        else:  # one product per p: (B*P, 1, A) @ (B*P, A, C)
            v = y.reshape(batch, m, p).transpose(1, 2).reshape(batch * p, 1, m)
            total = torch.bmm(v, step_exps[t].reshape(batch * p, m, m)).reshape(batch, p * m)
        if step_scales is None:
            y = total  # its sum is read back from ys and tops
        else:
            sums.append(total)
            y = total * step_scales[t].view(total.shape)
        top = y.amax(-1, keepdim=True).clamp_min_(tiny)  # 0 only if the sentence is impossible
        y = y.div_(top)
        ys.append(y)
        tops.append(top)
    if p == 1:
        ys, tops, sums = [y.view(batch, m) for y in ys], [top.view(batch, 1) for top in tops], [s.view(batch, m) for s in sums]
    alphas, suspect = _unscale(ys, tops, shift, lambda values, rows: _forward_has_terms(values, steps, real, rows),
                               real, sums=sums or None, first_reachable=m)
    if not backward or bool(suspect.all()):  # every sentence is redone in log space: no backward here
        return alphas, None, suspect
    if n == 0:
        return alphas, _Logs(potentials.new_zeros(batch, 0, m * p), potentials.new_zeros(batch, 0)), suspect
    y = potentials.new_ones(batch, m * p)  # beta_{n-1} = 0
    if p == 1:
        y = y.unsqueeze(-1)  # (B, M, 1) through the loop: E_t times a column vector
    ys, tops = [y], []
    for t in range(n - 1, 0, -1):
        # beta_{t-1}[(a, p)] = log sum_c exp(X_t[a, p, c] + beta_t[(p, c)])
        if p == 1:
            total = torch.bmm(step_exps[t], y if step_scales is None else y * step_scales[t].unsqueeze(-1))
        else:  # [p, a] -> [a, p]
            z = (y if step_scales is None else y * step_scales[t]).reshape(batch * p, m, 1)
            total = torch.bmm(step_exps[t].reshape(batch * p, m, m), z)
            total = total.reshape(batch, p, m).transpose(1, 2).reshape(batch, m * p)
        top = total.amax(-2 if p == 1 else -1, keepdim=True).clamp_min_(tiny)
        y = total.div_(top)
        ys.append(y)
        tops.append(top)
    if p == 1:
        ys, tops = [y.view(batch, m) for y in ys], [top.view(batch, 1) for top in tops]
    has_terms = lambda values, rows: _backward_has_terms(values, steps, real, rows)  # noqa: E731
    betas, low = _unscale(ys[::-1], tops[::-1], shift[:, 1:], has_terms, real[:, 1:], backward=True)
    return alphas, betas, suspect | low


def _unscale(ys: list, tops: list, shift: Tensor, has_terms, real: Tensor, backward: bool = False,
             sums: Optional[list] = None, first_reachable: Optional[int] = None):
    """Log values (:class:`_Logs`, T+1 tokens) from the scaled vectors ``ys`` (in token order) and the
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
        return _Logs(ys.log(), ys.new_zeros(ys.shape[:2])), ys.new_zeros(ys.shape[0], dtype=torch.bool)
    log_tops = torch.stack(tops, 1).log_()  # (B, T, 1)
    steps = log_tops + shift[:, :, None]
    zero = torch.zeros_like(steps[:, :1])
    if backward:
        scale = torch.cat([steps.flip(1).cumsum(1).flip(1), zero], 1)
        sums = ys[:, :-1].log() + log_tops  # each step's sum, relative to its input's scale
    else:
        scale = torch.cat([zero, steps.cumsum(1)], 1)
        sums = torch.stack(sums, 1).log_() if sums is not None else ys[:, 1:].log() + log_tops
    values = _Logs(ys.log(), scale.squeeze(-1))
    sums = torch.where(real[..., None], sums, 0.0)
    if first_reachable is not None and sums.shape[1]:
        sums[:, 0, first_reachable:] = 0.0
    return values, _suspect(sums, lambda rows: has_terms(values.rel, rows))


def _suspect(log_sums: Tensor, has_terms) -> Tensor:
    """(B,) sentences with a step sum below THETA where some term was finite (``has_terms(rows)``,
    like ``log_sums[rows]``, is evaluated only for the sentences with such a small sum: a sum of
    -inf terms is exactly 0, and those need no log-space redo). When most sentences have such a sum
    (scores of standard deviation 10 and more), all are sent to log space: the check would cost more."""
    low = log_sums < _theta(log_sums.dtype)
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
    padded = torch.where(real[:, :, None, None, None], steps, _identity(m, p, steps))
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


def _log_recursions(potentials: Tensor, lengths: Tensor, backward: bool):
    """The same recursions in log space, one log-sum-exp per token: exact at any scale, slower. Each
    token's values are kept relative to their maximum, whose sums are the shifts (:class:`_Logs`). The
    forward one reads the potentials transposed ([p, c, a]), so that it sums over the last axis too."""
    steps = _as_steps(potentials)
    batch, n, m, p, _ = steps.shape
    real = _real(lengths, n)
    forward = steps.permute(0, 1, 3, 4, 2).contiguous()  # X_t[a, p, c] at [t, p, c, a]
    alpha = _start(batch, m * p, potentials)
    alphas, tops = [alpha], []
    for t in range(n):
        # alpha_t[(p, c)] - shift_t = log sum_a exp(alpha_{t-1}[(a, p)] - shift_{t-1} + X_t[a, p, c]) - top_t
        terms = alpha.reshape(batch, m, p).transpose(1, 2).unsqueeze(2) + forward[:, t]  # (B, P, C, A)
        new, top = _relative_(logsumexp(terms, -1).flatten(1))
        alpha = torch.where(real[:, t, None], new, alpha)
        alphas.append(alpha)
        tops.append(top)
    alphas = _Logs(torch.stack(alphas, 1), _shifts(tops, real, potentials))
    if not backward:
        return alphas, None
    beta = potentials.new_zeros(batch, m * p)
    betas, tops = [beta], []
    for t in range(n - 1, 0, -1):
        # beta_{t-1}[(a, p)] - shift_{t-1} = log sum_c exp(X_t[a, p, c] + beta_t[(p, c)] - shift_t) - top_t
        new, top = _relative_(logsumexp(steps[:, t] + beta.reshape(batch, 1, p, m), -1).flatten(1))
        beta = torch.where(real[:, t, None], new, beta)
        betas.append(beta)
        tops.append(top)
    shifts = _shifts(tops[::-1], real[:, 1:], potentials, backward=True)
    return alphas, _Logs(torch.stack(betas[::-1], 1), shifts)


def _relative_(values: Tensor) -> Tuple[Tensor, Tensor]:
    """``values`` (B, S) minus their maximum top (B,), in place, and top (the most negative float where
    every value is -inf, so that they stay -inf)."""
    top = values.amax(-1).clamp_min_(torch.finfo(values.dtype).min)
    return values.sub_(top[:, None]), top


def _shifts(tops: list, real: Tensor, like: Tensor, backward: bool = False) -> Tensor:
    """The shifts (B, T+1) from the maxima ``tops`` (T of them, in token order) the steps took out of the
    real tokens ``real`` (B, T): forward, shift_t = sum of the tops up to t; backward, of those after t.
    (An impossible sentence's shifts may reach -inf; its values are all -inf then.)"""
    zero = like.new_zeros(real.shape[0], 1)
    if not tops:
        return zero
    steps = torch.where(real, torch.stack(tops, 1), 0.0)
    if backward:
        return torch.cat([steps.flip(1).cumsum(1).flip(1), zero], 1)
    return torch.cat([zero, steps.cumsum(1)], 1)


class _Bounded(NamedTuple):
    """What :func:`_bounded_recursions` keeps: ``exps`` (B, N, M, M), E_t[a, c] = exp(X_t[a, c] - m_t) (the
    identity at padding tokens; None without the backward pass), ``ya`` (N+1, B, 1, M) alpha before each
    token and ``yb`` (N, B, M, 1) beta after each token (None without the backward pass), both in exp space,
    time-major, each token's maximum 1, and log Z (B,)."""

    exps: Optional[Tensor]
    ya: Tensor
    yb: Optional[Tensor]
    log_z: Tensor


_LOG2E = 1.0 / math.log(2.0)


def _token_spans(potentials: Tensor, real: Tensor) -> Tuple[Tensor, float]:
    """Each token's largest potential m_t (B, N) and the largest span (max - min) of a real token's
    (M, M) potentials (NaN for NaN or infinite scores)."""
    flat = potentials.reshape(*potentials.shape[:2], -1)
    top = flat.amax(-1)
    return top, float(torch.where(real, top - flat.amin(-1), 0.0).amax())


def bounded_lane_applies(span: float, dtype: torch.dtype) -> bool:
    """Whether :func:`_bounded_recursions` runs on tokens spanning ``span`` nats at most: in ``dtype``, or
    in float64 for float32."""
    return span <= -_theta(dtype) or (dtype == torch.float32 and span <= -_theta(torch.float64))


def runs_bounded(potentials: Tensor, lengths: Tensor) -> bool:
    """Whether log Z of these order-1 potentials (B, N, M, M) takes the bounded exp-space lane, the
    fastest (one matrix product per token, no check)."""
    if potentials.dim() != 4 or potentials.numel() == 0:
        return False
    return bounded_lane_applies(_token_spans(potentials, _real(lengths, potentials.shape[1]))[1], potentials.dtype)


def _bounded_recursions(potentials: Tensor, lengths: Tensor, backward: bool) -> Optional[_Bounded]:
    """Order 1 in exp space with no underflow check, when every real token's potentials span at most
    -log(THETA) nats (max - min over its M x M entries): 43.7 in float32 (standard deviations up to ~5),
    354 in float64 (up to ~40; float32 potentials spanning more than 43.7 nats run in float64); None
    otherwise (order 2, -inf, +inf or NaN, wider tokens). ``exps``, ``ya`` and ``yb`` are in the dtype
    it ran in, log Z in the potentials'.

    With E_t = exp(X_t - m_t), m_t the token's largest potential and s_t its span, every entry of E_t is
    at least exp(-s_t), so every entry of y E_t (and of E_t y) is at least max(y) exp(-s_t) and at most
    M max(y). Rescaling every K steps, with K s <= -log(THETA) (s the largest span) and M^K below the
    square root of the largest float, keeps every value between THETA and that root: no sum loses more
    than M tiny / THETA (relative) to underflow, nothing overflows, and only one step in K pays for a
    maximum and a division. log Z = log sum_c ya_N[c] + sum of the rescalings' logs + sum_t m_t.
    """
    if potentials.dim() != 4 or potentials.numel() == 0:
        return None
    batch, n, m, _ = potentials.shape
    real = _real(lengths, n)
    top, span = _token_spans(potentials, real)
    dtype = potentials.dtype
    if not bounded_lane_applies(span, dtype):
        return None
    if not span <= -_theta(dtype):
        # float32 tokens spanning up to 354 nats (standard deviations up to ~40): the same lane in float64,
        # about twice the cost of float32 and still well below the general lanes'
        potentials = potentials.double()
    budget = -_theta(potentials.dtype)
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
        return _Bounded(None, ya, None, log_z.to(dtype))
    yb = potentials.new_ones(n, batch, m, 1)  # column vectors; beta = 0 after the last token
    columns = yb.unbind(0)
    for t in range(n - 1, 0, -1):
        # beta_{t-1}[a] = log sum_c exp(X_t[a, c] + beta_t[c]), less m_t and the rescalings
        torch.bmm(steps[t], columns[t], out=columns[t - 1])
        if (n - t) % every == 0:
            columns[t - 1].div_(columns[t - 1].amax(1, keepdim=True))
    yb.div_(yb.amax(2, keepdim=True))
    return _Bounded(exps, ya, yb, log_z.to(dtype))


def _bounded_marginals(bounded: _Bounded, lengths: Tensor, grad: Optional[Tensor] = None) -> Tensor:
    """P(a at t-1, c at t) (B, N, M, M) from :func:`_bounded_recursions`, times ``grad`` (B,) if given; 0
    beyond the lengths; written over ``bounded.exps`` (one tensor of that size less to allocate and fill
    saves 10-20% of the whole forward and backward at B=32, n=30, M=17-25). Each token's products are
    divided by their sum, which removes the token's scale; that sum is at least exp(-s_t) (alpha's and
    beta's maxima are 1), so the products that underflow (each below tiny) change no marginal by more
    than M^2 tiny exp(s_t)."""
    exps = bounded.exps
    batch, n = exps.shape[:2]
    before = bounded.ya[:-1].permute(1, 0, 3, 2)  # alpha_{t-1}[a], (B, N, M, 1)
    after = bounded.yb.permute(1, 0, 3, 2)  # beta_t[c], (B, N, 1, M)
    # P(a at t-1, c at t) = alpha_{t-1}[a] E_t[a, c] beta_t[c] / sum over (a, c)
    marg = exps.mul_(before).mul_(after)
    total = marg.sum((2, 3))
    factor = torch.where(_real(lengths, n), (1.0 if grad is None else grad[:, None]) / total, 0.0)
    return marg.mul_(factor[:, :, None, None])


def _recursions(potentials: Tensor, lengths: Tensor, backward: bool):
    """alphas, betas (or None), both :class:`_Logs`, and log Z (B,): exp space, with suspect sentences
    redone in log space."""
    alphas, betas, suspect = _exp_recursions(potentials, lengths, backward)  # alphas None: all suspect
    if bool(suspect.all()):
        alphas, betas = _log_recursions(potentials, lengths, backward)
    elif bool(suspect.any()):
        rows = suspect.nonzero().squeeze(1)
        exact = _log_recursions(potentials[rows], lengths[rows], backward)
        alphas = alphas.index_copy(rows, exact[0])
        betas = None if betas is None else betas.index_copy(rows, exact[1])
    # log Z = shift_N + log sum_s exp(alpha_N[s] - shift_N)
    return alphas, betas, alphas.shift[:, -1] + torch.logsumexp(alphas.rel[:, -1], dim=1)


def _transition_marginals(potentials, lengths, alphas, betas, log_z, grad: Optional[Tensor] = None) -> Tensor:
    """P(state s before token t and label c at t), like ``potentials``, times ``grad`` (B,) if given;
    0 beyond the lengths and for impossible sentences.

    The exponent is formed from alpha and beta relative to their per-token shifts (values of the
    scores' size) and one constant per token, log Z - shift_{t-1}(alpha) - shift_t(beta); that constant
    rounds by up to an ulp of log Z (1e-3 at log Z of 1e4 in float32), the same for every entry of the
    token, so each token's marginals are divided by their sum (1 in exact arithmetic), which removes it
    and makes a sure transition get probability 1.
    """
    batch, n, m, p, _ = _as_steps(potentials).shape
    # clamping an impossible sentence's -inf keeps exp(-inf - log Z) at 0 instead of NaN
    floor = log_z.clamp_min(torch.finfo(potentials.dtype).min)[:, None]
    common = (floor - alphas.shift[:, :-1]).sub_(betas.shift).reshape(batch, n, 1, 1, 1)
    before = alphas.rel[:, :-1].reshape(batch, n, m, p, 1)  # alpha_{t-1}[(a, p)] - shift_{t-1}
    after = betas.rel.reshape(batch, n, 1, p, m)  # beta_t[(p, c)] - shift_t
    # P(s, c at t) = exp(alpha_{t-1}[s] + X_t[s, c] + beta_t[(p, c)] - log Z), shifts taken out
    marg = exp_((_as_steps(potentials) + before).add_(after).sub_(common))
    padding = (~_real(lengths, n)).nonzero(as_tuple=True)
    if len(padding[0]):
        marg[padding] = 0.0
    total = marg.flatten(2).sum(-1).clamp_min_(torch.finfo(potentials.dtype).tiny)
    factor = (1.0 if grad is None else grad[:, None]) / total
    return marg.mul_(factor.reshape(batch, n, 1, 1, 1)).reshape(potentials.shape)


class _LogPartition(torch.autograd.Function):
    """log Z by the forward recursion; its gradient (the transition marginals) from the backward one,
    run in the forward pass when a gradient will be needed."""

    @staticmethod
    def forward(ctx, potentials: Tensor, lengths: Tensor) -> Tensor:
        backward = ctx.needs_input_grad[0]
        bounded = _bounded_recursions(potentials, lengths, backward)
        ctx.bounded = bounded is not None
        if ctx.bounded:
            if backward:  # E_t kept aside, not saved: the backward turns it into the marginals in place
                ctx.save_for_backward(potentials, lengths, bounded.ya, bounded.yb)
                ctx.exps = bounded.exps
            return bounded.log_z
        alphas, betas, log_z = _recursions(potentials, lengths, backward)
        if betas is not None:
            ctx.save_for_backward(potentials, lengths, *alphas, *betas, log_z)
        return log_z

    @staticmethod
    def backward(ctx, grad: Tensor):
        if ctx.bounded:
            potentials, lengths, ya, yb = ctx.saved_tensors
            exps, ctx.exps = ctx.exps, None
            if exps is None:  # a second backward through a retained graph: E_t again
                exps = _bounded_recursions(potentials, lengths, backward=True).exps
            return _bounded_marginals(_Bounded(exps, ya, yb, None), lengths, grad).to(grad.dtype), None
        potentials, lengths, alpha_rel, alpha_shift, beta_rel, beta_shift, log_z = ctx.saved_tensors
        alphas, betas = _Logs(alpha_rel, alpha_shift), _Logs(beta_rel, beta_shift)
        return _transition_marginals(potentials, lengths, alphas, betas, log_z, grad=grad), None


def _log_partition(potentials: Tensor, lengths: Tensor) -> Tensor:
    return _LogPartition.apply(potentials, lengths)


def _marginals(potentials: Tensor, lengths: Tensor) -> Tuple[Tensor, Tensor]:
    """Transition marginals like ``potentials`` (0 beyond lengths) and log Z (B,)."""
    bounded = _bounded_recursions(potentials, lengths, backward=True)
    if bounded is not None:
        return _bounded_marginals(bounded, lengths).to(potentials.dtype), bounded.log_z
    alphas, betas, log_z = _recursions(potentials, lengths, backward=True)
    return _transition_marginals(potentials, lengths, alphas, betas, log_z), log_z


def _viterbi(potentials: Tensor, lengths: Tensor) -> Tuple[Tensor, Tensor]:
    """Max-sum forward with back-pointers (exact in log space), then the backtrack from the best final
    state (in numpy: one tiny gather per token)."""
    steps = _as_steps(potentials)
    batch, n, m, p, _ = steps.shape
    v = _start(batch, m * p, potentials)
    pointers = []
    for t in range(n):
        best, arg = (v.reshape(batch, m, p, 1) + steps[:, t]).max(dim=1)  # over the oldest label a
        v = torch.where((t < lengths)[:, None], best.flatten(1), v)
        pointers.append(arg.flatten(1))  # a for each new state (p, c)
    score, state = v.max(dim=1)
    labels = torch.zeros(batch, n, dtype=torch.long)
    if n:
        back = torch.stack(pointers, 1).cpu().numpy()
        ends, rows, out = (lengths - 1).cpu().numpy(), numpy.arange(batch), labels.numpy()
        state_np = state.cpu().numpy()
        for t in range(n - 1, -1, -1):
            out[:, t] = state_np % m  # y_t (masked below past the end)
            previous = back[rows, t, state_np] * p + state_np // m  # the state before token t: (a, p)
            state_np = numpy.where(t <= ends, previous, state_np)
    labels = labels.to(potentials.device)
    keep = _real(lengths, n) & (score > float("-inf"))[:, None]
    return labels * keep, score


def _token_label_sums(per_potential: Tensor) -> Tensor:
    """Sum a potentials-shaped tensor over all but (batch, token, current label)."""
    return per_potential.sum(dim=tuple(range(2, per_potential.dim() - 1)))


def _real(lengths: Tensor, n: int) -> Tensor:
    return torch.arange(n, device=lengths.device)[None, :] < lengths[:, None]


def _bad_position(potentials: Tensor, lengths: Tensor, b: int) -> str:
    """Where sentence b's potentials hold +inf or NaN (among its real tokens)."""
    pot = potentials[b, : int(lengths[b])].detach()
    bad = (torch.isnan(pot) | (pot == float("inf"))).nonzero()
    if len(bad) == 0:
        return "its log partition is not finite"
    t, *labels = bad[0].tolist()
    return f"potentials[{b}, {t}, {', '.join(map(str, labels))}] is {pot[tuple(bad[0])].item()}"
