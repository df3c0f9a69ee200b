"""The chains' compiled list Viterbi (numba): :func:`~.nbest.crf_nbest` of :class:`~.chain.ChainScores` and
:class:`~.chain_second.SecondOrderScores` on the CPU, one loop per sentence, without the potentials, in the
scores' dtype. Order 1, with the additions of :mod:`.compiled_chain` (so its best is crf_viterbi's score):

    V_0[c] = (e_0[c] (+ end[c] if n = 1)) + start[c]
    V_t[c, :] = k-max over (a, j) of V_{t-1}[a, j] + (e_t[c] (+ end[c] at the last token) + T[a, c])

order 2 over the states (A, c), A = 1 + y_{t-1} (0: the start state), with W the trigram:

    V_t[1 + p, c, :] = k-max over (A, j) of V_{t-1}[A, p, j] + (e_t[c] + W[A, 1 + p, c])

Each V_{t-1}[a, :] is sorted (best first), so a state's k-max is a merge: for each a, its j = 0, 1, ...
enter a sorted buffer of k until one does not beat the buffer's k-th (the rest of that list cannot),
which costs one comparison per previous state where Viterbi costs one maximum. Ties keep the earlier
candidate (smaller a, then j) first.
"""
from typing import Tuple

import numpy as np
import torch

from .chain import ChainScores

Tensor = torch.Tensor

_KERNELS = {}


def nbest(scores, lengths: Tensor, k: int) -> Tuple[Tensor, Tensor]:
    """labels (B, k, N) long and scores (B, k) in the emissions' dtype of ChainScores or SecondOrderScores
    (-inf emissions: labels not allowed) on the CPU."""
    as_numpy = lambda x: np.ascontiguousarray(x.detach().numpy())  # noqa: E731
    e = as_numpy(scores.emissions)
    batch, n, m = e.shape
    lens = np.ascontiguousarray(lengths.numpy().astype(np.int64))
    labels = np.zeros((batch, k, n), dtype=np.int64)
    best = np.full((batch, k), -np.inf, dtype=e.dtype)
    if isinstance(scores, ChainScores):
        zeros = np.zeros(m, dtype=e.dtype)
        start = zeros if scores.start is None else as_numpy(scores.start)
        end = zeros if scores.end is None else as_numpy(scores.end)
        _kernel("first")(e, as_numpy(scores.transitions.t()), start, end, lens, k, labels, best)
    else:
        _kernel("second")(e, as_numpy(scores.trigram), lens, k, labels, best)
    return torch.from_numpy(labels), torch.from_numpy(best)


def _kernel(order: str):
    global _insert, _order
    if not _KERNELS:
        from numba import njit

        _insert = njit(inline="always")(_insert)  # the loops read them as module globals
        _order = njit(inline="always")(_order)
        _KERNELS["first"] = njit(cache=True, nogil=True)(_first_order)
        _KERNELS["second"] = njit(cache=True, nogil=True)(_second_order)
    return _KERNELS[order]


def _insert(values, back, t, s, k, cand, pointer):  # pragma: no cover - compiled
    """Put cand, which beats values[s, k-1], into the sorted row values[s] (k,), its back-pointer at
    back[t, s]."""
    pos = k - 1
    while pos > 0 and cand > values[s, pos - 1]:
        values[s, pos] = values[s, pos - 1]
        back[t, s, pos] = back[t, s, pos - 1]
        pos -= 1
    values[s, pos] = cand
    back[t, s, pos] = pointer


def _order(heads, order):  # pragma: no cover - compiled
    """``order`` (len(heads),): the indices of ``heads`` by decreasing value (insertion sort)."""
    for i in range(len(heads)):
        pos = i
        while pos > 0 and heads[i] > heads[order[pos - 1]]:
            order[pos] = order[pos - 1]
            pos -= 1
        order[pos] = i


def _first_order(e, columns, start, end, lengths, k, labels, best):  # pragma: no cover - compiled
    """For each c the previous labels a go by decreasing v[a, 0]: once v[a, 0] + e_t[c] + max_a' T[a', c]
    does not beat the k-th, no later a can."""
    batch, n_max, M = e.shape
    v = np.empty((M, k), dtype=e.dtype)
    new = np.empty((M, k), dtype=e.dtype)
    back = np.zeros((max(n_max, 1), M, k), dtype=np.int64)  # a * k + j
    top = np.empty((1, k), dtype=e.dtype)
    final = np.zeros((1, 1, k), dtype=np.int64)
    order = np.zeros(M, dtype=np.int64)
    column_top = np.empty(M, dtype=e.dtype)
    for c in range(M):
        column_top[c] = columns[c].max()
    for b in range(batch):
        n = lengths[b]
        if n == 0:  # the start state alone: one empty sequence of score 0
            best[b, 0] = 0.0
            continue
        v[:] = -np.inf
        for c in range(M):
            x = e[b, 0, c] + end[c] if n == 1 else e[b, 0, c]
            v[c, 0] = x + start[c]
        for t in range(1, n):
            _order(v[:, 0], order)
            for c in range(M):
                x = e[b, t, c] + end[c] if t == n - 1 else e[b, t, c]
                bound = x + column_top[c]
                a = order[0]
                w = x + columns[c, a]
                for j in range(k):  # the first list as it is (the row is empty)
                    new[c, j] = v[a, j] + w
                    back[t, c, j] = a * k + j
                for i in range(1, M):
                    a = order[i]
                    if not v[a, 0] + bound > new[c, k - 1]:
                        break
                    w = x + columns[c, a]
                    for j in range(k):
                        cand = v[a, j] + w
                        if not cand > new[c, k - 1]:  # the rest of v[a] is no better
                            break
                        _insert(new, back, t, c, k, cand, a * k + j)
            v, new = new, v
        top[:] = -np.inf
        for c in range(M):
            for j in range(k):
                if not v[c, j] > top[0, k - 1]:
                    break
                _insert(top, final, 0, 0, k, v[c, j], c * k + j)
        best[b] = top[0]
        for r in range(k):
            if not top[0, r] > -np.inf:
                continue
            c, j = divmod(final[0, 0, r], k)
            for t in range(n - 1, -1, -1):
                labels[b, r, t] = c
                if t:
                    c, j = divmod(back[t, c, j], k)


def _second_order(e, trigram, lengths, k, labels, best):  # pragma: no cover - compiled
    """The states (A, c) flat as A * M + c; for each (p, c) the A go by decreasing v[(A, p), 0], as the
    previous labels of the first order do."""
    batch, n_max, M = e.shape
    S = (M + 1) * M
    v = np.empty((S, k), dtype=e.dtype)
    new = np.empty((S, k), dtype=e.dtype)
    back = np.zeros((max(n_max, 1), S, k), dtype=np.int64)  # previous state * k + j
    top = np.empty((1, k), dtype=e.dtype)
    final = np.zeros((1, 1, k), dtype=np.int64)
    order = np.zeros((M, M + 1), dtype=np.int64)
    heads = np.empty(M + 1, dtype=e.dtype)
    column_top = np.empty((M, M), dtype=e.dtype)  # [p, c]: max over A of trigram[A, 1 + p, c]
    for p in range(M):
        for c in range(M):
            column_top[p, c] = trigram[:, 1 + p, c].max()
    for b in range(batch):
        n = lengths[b]
        if n == 0:
            best[b, 0] = 0.0
            continue
        v[:] = -np.inf
        for c in range(M):
            v[c, 0] = e[b, 0, c] + trigram[0, 0, c]  # the state (start, c)
        for t in range(1, n):
            new[:M] = -np.inf  # the states (start, c) are never reached again
            for p in range(M):
                for A in range(M + 1):
                    heads[A] = v[A * M + p, 0]
                _order(heads, order[p])
            for p in range(M):
                for c in range(M):
                    x = e[b, t, c]
                    s = (1 + p) * M + c
                    bound = x + column_top[p, c]
                    before = order[p, 0] * M + p
                    w = x + trigram[order[p, 0], 1 + p, c]
                    for j in range(k):  # the first list as it is (the row is empty)
                        new[s, j] = v[before, j] + w
                        back[t, s, j] = before * k + j
                    for i in range(1, M + 1):
                        A = order[p, i]
                        before = A * M + p  # the state (A, p)
                        if not v[before, 0] + bound > new[s, k - 1]:
                            break
                        w = x + trigram[A, 1 + p, c]
                        for j in range(k):
                            cand = v[before, j] + w
                            if not cand > new[s, k - 1]:
                                break
                            _insert(new, back, t, s, k, cand, before * k + j)
            v, new = new, v
        top[:] = -np.inf
        for s in range(S):
            for j in range(k):
                if not v[s, j] > top[0, k - 1]:
                    break
                _insert(top, final, 0, 0, k, v[s, j], s * k + j)
        best[b] = top[0]
        for r in range(k):
            if not top[0, r] > -np.inf:
                continue
            s, j = divmod(final[0, 0, r], k)
            for t in range(n - 1, -1, -1):
                labels[b, r, t] = s % M
                if t:
                    s, j = divmod(back[t, s, j], k)
