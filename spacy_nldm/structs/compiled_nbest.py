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
    global _insert
    if not _KERNELS:
        from numba import njit

        _insert = njit(inline="always")(_insert)  # the loops read it as a module global
        _KERNELS["first"] = njit(cache=True, nogil=True)(_first_order)
        _KERNELS["second"] = njit(cache=True, nogil=True)(_second_order)
    return _KERNELS[order]


def _insert(values, a_of, j_of, k, cand, a, j):  # pragma: no cover - compiled
    """Put cand (from (a, j)) into the sorted buffer ``values`` (k,) if it beats its k-th; whether it did."""
    if not cand > values[k - 1]:
        return False
    pos = k - 1
    while pos > 0 and cand > values[pos - 1]:
        values[pos], a_of[pos], j_of[pos] = values[pos - 1], a_of[pos - 1], j_of[pos - 1]
        pos -= 1
    values[pos], a_of[pos], j_of[pos] = cand, a, j
    return True


def _first_order(e, columns, start, end, lengths, k, labels, best):  # pragma: no cover - compiled
    batch, n_max, M = e.shape
    v = np.empty((M, k), dtype=e.dtype)
    new = np.empty((M, k), dtype=e.dtype)
    back_a = np.zeros((max(n_max, 1), M, k), dtype=np.int64)
    back_j = np.zeros((max(n_max, 1), M, k), dtype=np.int64)
    final_a = np.zeros(k, dtype=np.int64)
    final_j = np.zeros(k, dtype=np.int64)
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
            new[:] = -np.inf
            for c in range(M):
                x = e[b, t, c] + end[c] if t == n - 1 else e[b, t, c]
                for a in range(M):
                    w = x + columns[c, a]
                    for j in range(k):
                        if not _insert(new[c], back_a[t, c], back_j[t, c], k, v[a, j] + w, a, j):
                            break
            v, new = new, v
        for c in range(M):
            for j in range(k):
                if not _insert(best[b], final_a, final_j, k, v[c, j], c, j):
                    break
        for r in range(k):
            if not best[b, r] > -np.inf:
                continue
            c, j = final_a[r], final_j[r]
            for t in range(n - 1, -1, -1):
                labels[b, r, t] = c
                if t:
                    c, j = back_a[t, c, j], back_j[t, c, j]


def _second_order(e, trigram, lengths, k, labels, best):  # pragma: no cover - compiled
    batch, n_max, M = e.shape
    v = np.empty((M + 1, M, k), dtype=e.dtype)  # [A, c, rank]: A = 1 + y_{t-1}, 0 the start state
    new = np.empty((M + 1, M, k), dtype=e.dtype)
    back_a = np.zeros((max(n_max, 1), M + 1, M, k), dtype=np.int64)
    back_j = np.zeros((max(n_max, 1), M + 1, M, k), dtype=np.int64)
    final_a = np.zeros(k, dtype=np.int64)
    final_j = np.zeros(k, dtype=np.int64)
    for b in range(batch):
        n = lengths[b]
        if n == 0:
            best[b, 0] = 0.0
            continue
        v[:] = -np.inf
        for c in range(M):
            v[0, c, 0] = e[b, 0, c] + trigram[0, 0, c]
        for t in range(1, n):
            new[:] = -np.inf
            for p in range(M):
                for c in range(M):
                    x = e[b, t, c]
                    for A in range(M + 1):
                        w = x + trigram[A, 1 + p, c]
                        for j in range(k):
                            if not _insert(new[1 + p, c], back_a[t, 1 + p, c], back_j[t, 1 + p, c], k,
                                          v[A, p, j] + w, A, j):
                                break
            v, new = new, v
        for A in range(M + 1):
            for c in range(M):
                for j in range(k):
                    if not _insert(best[b], final_a, final_j, k, v[A, c, j], A * M + c, j):
                        break
        for r in range(k):
            if not best[b, r] > -np.inf:
                continue
            A, c = divmod(final_a[r], M)
            j = final_j[r]
            for t in range(n - 1, -1, -1):
                labels[b, r, t] = c
                if t:
                    A, c, j = back_a[t, A, c, j], A - 1, back_j[t, A, c, j]
