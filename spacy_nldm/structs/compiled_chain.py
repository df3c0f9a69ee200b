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
    columns = as_numpy(transitions.t())  # [current, previous]: the inner loop reads a row
    lens = np.ascontiguousarray(lengths.numpy().astype(np.int64))
    labels = np.zeros((batch, n), dtype=np.int64)
    scores = np.zeros(batch, dtype=e.dtype)
    work = (np.empty(m, dtype=e.dtype), np.empty(m, dtype=e.dtype), np.zeros((max(n, 1), m), dtype=np.int64))
    _kernel()(e, columns, as_numpy(start), as_numpy(end), lens, labels, scores, *work)
    return torch.from_numpy(labels), torch.from_numpy(scores)


def _kernel():
    global _KERNEL
    if _KERNEL is None:
        from numba import njit

        _KERNEL = njit(cache=True, nogil=True)(_viterbi_batch)
    return _KERNEL


def _viterbi_batch(e, columns, start, end, lengths, labels, scores, v, new, back):  # pragma: no cover - compiled
    """Fill ``labels`` and ``scores``; ``v``, ``new`` (M,) and ``back`` (N, M) are work space."""
    M = e.shape[2]
    for b in range(e.shape[0]):
        n = lengths[b]
        if n == 0:  # the start state alone: score 0
            scores[b] = 0.0
            continue
        for c in range(M):
            x = e[b, 0, c] + end[c] if n == 1 else e[b, 0, c]
            v[c] = x + start[c]
        for t in range(1, n):
            for c in range(M):
                x = e[b, t, c] + end[c] if t == n - 1 else e[b, t, c]
                best = v[0] + (x + columns[c, 0])
                arg = 0
                for a in range(1, M):
                    cand = v[a] + (x + columns[c, a])
                    if cand > best or (cand != cand and best == best):  # NaN wins, as in torch
                        best = cand
                        arg = a
                new[c] = best
                back[t, c] = arg
            v[:] = new
        best = v[0]
        arg = 0
        for c in range(1, M):
            if v[c] > best or (v[c] != v[c] and best == best):
                best = v[c]
                arg = c
        scores[b] = best
        if not best > -np.inf:  # impossible (or NaN): labels stay 0
            continue
        labels[b, n - 1] = arg
        for t in range(n - 1, 0, -1):
            arg = back[t, arg]
            labels[b, t - 1] = arg
