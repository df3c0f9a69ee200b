"""The chains' compiled list Viterbi (numba): :func:`~.nbest.crf_nbest` of :class:`~.chain.ChainScores` and
:class:`~.chain_second.SecondOrderScores` on the CPU, one loop per sentence, without the potentials, in the
scores' dtype. Order 1, with the additions of :mod:`.compiled_chain` (so its best is crf_viterbi's score):

    V_0[c] = (e_0[c] (+ end[c] if n = 1)) + start[c]
    V_t[c, :] = k-max over (a, j) of V_{t-1}[a, j] + (e_t[c] (+ end[c] at the last token) + T[a, c])

order 2 over the states (A, c), A = 1 + y_{t-1} (0: the start state), with W the trigram:

    V_t[1 + p, c, :] = k-max over (A, j) of V_{t-1}[A, p, j] + (e_t[c] + W[A, 1 + p, c])

Each V_{t-1}[a, :] is sorted (best first), so a state's k-max is a merge of sorted lists, in two passes
over the previous states: the first takes each list's head V_{t-1}[a, 0] + X[a, c] and copies the list of
the best head (the pass Viterbi makes), the second merges in the lists whose head beats the k-th so far,
each until a candidate does not (the rest of that list cannot). Among equal scores the order is
unspecified.
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
    global _insert, _merge, _finish
    if not _KERNELS:
        from numba import njit

        # the loops read these as module globals
        _insert = njit(inline="always")(_insert)
        _merge = njit(inline="always")(_merge)
        _finish = njit(inline="always")(_finish)
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


def _merge(v, new, back, t, s, k, rows, w, heads):  # pragma: no cover - compiled
    """new[s] (k,), sorted: the k best of v[rows[a], j] + w[a] over the lists a and their ranks j, with
    back[t, s] their pointers rows[a] * k + j; heads (len(rows),) is scratch. Two passes: the best head's
    list copied as it is, then the lists whose head beats the k-th merged in, each until one does not."""
    first = 0
    for a in range(len(rows)):
        heads[a] = v[rows[a], 0] + w[a]
        if heads[a] > heads[first]:
            first = a
    for j in range(k):  # the best head's list as it is (the row is empty)
        new[s, j] = v[rows[first], j] + w[first]
        back[t, s, j] = rows[first] * k + j
    for a in range(len(rows)):
        if a == first or not heads[a] > new[s, k - 1]:
            continue
        for j in range(k):
            cand = v[rows[a], j] + w[a]
            if not cand > new[s, k - 1]:  # the rest of v[rows[a]] is no better
                break
            _insert(new, back, t, s, k, cand, rows[a] * k + j)


def _finish(v, back, n, k, M, labels_b, best_b, top, final):  # pragma: no cover - compiled
    """The k best of all the last lists v (S, k) into best_b (k,), and their sequences, read back through
    back, into labels_b (k, N): a state s is the label s % M (order 1: s is the label)."""
    top[:] = -np.inf
    for s in range(v.shape[0]):
        for j in range(k):
            if not v[s, j] > top[0, k - 1]:
                break
            _insert(top, final, 0, 0, k, v[s, j], s * k + j)
    best_b[:] = top[0]
    for r in range(k):
        if not top[0, r] > -np.inf:
            continue
        s, j = divmod(final[0, 0, r], k)
        for t in range(n - 1, -1, -1):
            labels_b[r, t] = s % M
            if t:
                s, j = divmod(back[t, s, j], k)


def _first_order(e, columns, start, end, lengths, k, labels, best):  # pragma: no cover - compiled
    """For each c the lists of every a, merged with the weights e_t[c] + T[a, c]."""
    batch, n_max, M = e.shape
    v = np.empty((M, k), dtype=e.dtype)
    new = np.empty((M, k), dtype=e.dtype)
    back = np.zeros((max(n_max, 1), M, k), dtype=np.int64)  # a * k + j
    top = np.empty((1, k), dtype=e.dtype)
    final = np.zeros((1, 1, k), dtype=np.int64)
    heads = np.empty(M, dtype=e.dtype)
    w = np.empty(M, dtype=e.dtype)
    rows = np.arange(M)
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
            for c in range(M):
                x = e[b, t, c] + end[c] if t == n - 1 else e[b, t, c]
                for a in range(M):
                    w[a] = x + columns[c, a]
                _merge(v, new, back, t, c, k, rows, w, heads)
            v, new = new, v
        _finish(v, back, n, k, M, labels[b], best[b], top, final)


def _second_order(e, trigram, lengths, k, labels, best):  # pragma: no cover - compiled
    """The states (A, c) flat as A * M + c; each new state (1 + p, c) merges the lists of the states (A, p)
    with the weights e_t[c] + W[A, 1 + p, c]."""
    batch, n_max, M = e.shape
    S = (M + 1) * M
    v = np.empty((S, k), dtype=e.dtype)
    new = np.empty((S, k), dtype=e.dtype)
    back = np.zeros((max(n_max, 1), S, k), dtype=np.int64)  # previous state * k + j
    top = np.empty((1, k), dtype=e.dtype)
    final = np.zeros((1, 1, k), dtype=np.int64)
    heads = np.empty(M + 1, dtype=e.dtype)
    w = np.empty(M + 1, dtype=e.dtype)
    rows = np.empty(M + 1, dtype=np.int64)
    for b in range(batch):
        n = lengths[b]
        if n == 0:
            best[b, 0] = 0.0
            continue
        v[:] = -np.inf
        for c in range(M):
            v[c, 0] = e[b, 0, c] + trigram[0, 0, c]  # the state (start, c)
        for t in range(1, n):
            new[:M] = -np.inf  # the states (start, c) are not reached again
            for p in range(M):
                for A in range(M + 1):  # from the states (A, p)
                    rows[A] = A * M + p
                for c in range(M):
                    x = e[b, t, c]
                    for A in range(M + 1):
                        w[A] = x + trigram[A, 1 + p, c]
                    _merge(v, new, back, t, (1 + p) * M + c, k, rows, w, heads)
            v, new = new, v
        _finish(v, back, n, k, M, labels[b], best[b], top, final)
