"""The chain's compiled Viterbi (numba): first order, on :class:`~.chain.ChainScores` on the CPU, one loop
per sentence, without building the (B, N, M, M) potentials. The reference's recursion in :mod:`.chain`
in the max semiring, in the scores' dtype with the reference's additions in its order, so labels and
scores are the reference's bit for bit, ties included (the first previous label, the first final label):

    p_t[a, c] = e_t[c] + T[a, c]  (t >= 1; p_0[., c] = e_0[c] + start[c]; e_{n-1} += end)
    v_t[c] = max_a v_{t-1}[a] + p_t[a, c],   score = max_c v_{n-1}[c]

NaN propagates as in torch's max (the caller reports it).
"""
from typing import Tuple

import numpy as np
import torch

Tensor = torch.Tensor

_KERNEL = None


def viterbi(emissions: Tensor, transitions: Tensor, start: Tensor, end: Tensor, lengths: Tensor
            ) -> Tuple[Tensor, Tensor]:
    """Labels (B, N) long (0 beyond each length and for impossible sentences) and scores (B,) in the
    emissions' dtype, from emissions (B, N, M) (-inf: a label not allowed), transitions (M, M)
    [previous, current], start and end (M,) and lengths (B,), all on the CPU."""
    batch, n, m = emissions.shape
    as_numpy = lambda x: np.ascontiguousarray(x.detach().numpy())  # noqa: E731
    e = as_numpy(emissions)
    rows = as_numpy(transitions)  # [previous, current]: the inner loop runs over the current labels
    lens = np.ascontiguousarray(lengths.numpy().astype(np.int64))
    labels = np.zeros((batch, n), dtype=np.int64)
    scores = np.zeros(batch, dtype=e.dtype)
    work = (np.empty(m, dtype=e.dtype), np.empty(m, dtype=e.dtype), np.empty(m, dtype=e.dtype),
            np.empty(m, dtype=np.int64), np.zeros((max(n, 1), m), dtype=np.int64))
    _kernel()(e, rows, as_numpy(start), as_numpy(end), lens, labels, scores, *work)
    return torch.from_numpy(labels), torch.from_numpy(scores)


def _kernel():
    global _KERNEL
    if _KERNEL is None:
        from numba import njit

        _KERNEL = njit(cache=True, nogil=True)(_viterbi_batch)
    return _KERNEL


def _viterbi_batch(e, rows, start, end, lengths, labels, scores, v, new, x, arg, back):  # pragma: no cover
    """Fill ``labels`` and ``scores``; ``v``, ``new``, ``x`` (M,), ``arg`` (M,) and ``back`` (N, M) are work
    space. The loop over the previous label a is the outer one and every current label c is updated at once
    (a select, no branch: the loop over c vectorises); a replaces the best only when strictly better, so the
    first of tied labels is kept, as in the reference."""
    M = e.shape[2]
    for b in range(e.shape[0]):
        n = lengths[b]
        if n == 0:  # the start state alone: score 0
            scores[b] = 0.0
            continue
        for c in range(M):
            first = e[b, 0, c] + end[c] if n == 1 else e[b, 0, c]
            v[c] = first + start[c]
        for t in range(1, n):
            for c in range(M):
                x[c] = e[b, t, c] + end[c] if t == n - 1 else e[b, t, c]
            for c in range(M):  # a = 0
                new[c] = v[0] + (x[c] + rows[0, c])
                arg[c] = 0
            for a in range(1, M):
                va = v[a]
                row = rows[a]
                for c in range(M):  # v_t[c] = max_a v_{t-1}[a] + (e_t[c] + T[a, c])
                    cand = va + (x[c] + row[c])
                    cur = new[c]
                    better = (cand > cur) | ((cand != cand) & (cur == cur))  # NaN wins, as in torch
                    new[c] = cand if better else cur
                    arg[c] = a if better else arg[c]
            for c in range(M):
                v[c] = new[c]
                back[t, c] = arg[c]
        best = v[0]
        top = 0
        for c in range(1, M):
            if v[c] > best or (v[c] != v[c] and best == best):
                best = v[c]
                top = c
        scores[b] = best
        if not best > -np.inf:  # impossible (or NaN): labels stay 0
            continue
        labels[b, n - 1] = top
        for t in range(n - 1, 0, -1):
            top = back[t, top]
            labels[b, t - 1] = top
