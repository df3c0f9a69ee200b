"""The tree's compiled decoders (numba), one loop per sentence in float64: Viterbi of
:class:`~.tree.DirectionalScores` with back-pointers (:func:`viterbi`) and the canonical tree of given labels
(:func:`canonical_heads`). Both make the choices of the reference in :mod:`.tree` (its max semiring, its
tolerant max), ties included.
"""
from typing import List, Optional, Tuple

import numpy as np
import torch

Tensor = torch.Tensor


# -- the canonical tree of given labels (:func:`~.tree.canonical_heads`) -----------------------------------
# Banded charts: with arcs up to k long only items of width <= k can be part of a tree, plus the tail
# CR[i, n]; item (i, i + w) is stored at [b, i, w], the tail by its distance to the end: O(n k^2) time and
# O(n k) memory per sentence, the choices of the reference (tolerant max) bit for bit.

#: most chart cells ((n+1) x (k+1) per sentence) one group of sentences holds
BUDGET = 1 << 21


def canonical_tree(dep: np.ndarray, codes: np.ndarray, bias: Optional[np.ndarray], lengths: np.ndarray, limit: int,
                   tol: float) -> Tuple[np.ndarray, np.ndarray]:
    """Heads (B, N) int64 of the canonical trees and their scores (B,) float64, from dep (B, N, 2, M+1) float64
    (each dependent's scores at its own label, by direction and head label code: :func:`label_scores`), the
    positions' label codes (B, N+1) (label + 1, 0 = the root), the distance bias (2, K) float64 or None,
    lengths (B,) int64 and the longest arc ``limit``. A score is the sum of the tree's arcs, dependent by
    dependent, as the reference adds them."""
    kernels = _kernels()
    B, N = dep.shape[:2]
    heads = np.zeros((B, N), dtype=np.int64)
    b64 = np.zeros((2, 0)) if bias is None else bias
    lens = [int(n) for n in lengths.tolist()]
    for group in _groups(lens, limit):
        rows = np.asarray(group, dtype=np.int64)
        n = lens[group[-1]]  # the longest of the group
        k = max(1, min(limit, n))
        right, left = np.empty((len(group), n + 1, k + 1)), np.empty((len(group), n + 1, k + 1))
        kernels["arcs"](dep, codes, lengths, rows, b64, right, left)
        group_heads = np.zeros((len(group), n), dtype=np.int64)
        kernels["eisner"](right, left, lengths[rows], tol, group_heads)
        heads[rows, :n] = group_heads
    score = np.zeros(B)
    kernels["score"](dep, codes, heads, lengths, b64, score)
    return heads, score


def label_scores(emissions: np.ndarray, table: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """dep (B, N, 2, M+1) float64 of factored scores at given labels: dep[b, d, x, c] = emissions[b, d, y] +
    table[x, c, y] with y = labels[b, d] (emissions (B, N, M), table (2, M+1, M) float64, labels (B, N))."""
    B, N = labels.shape
    dep = np.empty((B, N, 2, table.shape[1]))
    _kernels()["label_scores"](emissions, table, labels, dep)
    return dep


def _groups(lens: List[int], limit: int) -> List[List[int]]:
    """Non-empty sentences by increasing length, in groups of at most BUDGET chart cells (all of them in one
    where they fit)."""
    present = sorted((i for i, n in enumerate(lens) if n > 0), key=lens.__getitem__)
    if not present:
        return []
    longest = lens[present[-1]]
    if len(present) * (longest + 1) * (max(1, min(limit, longest)) + 1) <= BUDGET:
        return [present]
    groups: List[List[int]] = []
    for i in present:
        cells = (lens[i] + 1) * (max(1, min(limit, lens[i])) + 1)
        if groups and (len(groups[-1]) + 1) * cells <= BUDGET:
            groups[-1].append(i)
        else:
            groups.append([i])
    return groups


def _label_scores_loop(emissions, table, labels, dep):
    B, N = labels.shape
    for b in range(B):
        for d in range(N):
            y = labels[b, d]
            e = emissions[b, d, y]
            for x in range(2):
                for c in range(table.shape[1]):
                    dep[b, d, x, c] = e + table[x, c, y]


def _band_arcs_loop(dep, codes, lens, rows, bias, right, left):
    """right[g, i, w]: the arc i -> i + w of sentence rows[g], dep[., i + w - 1, 0, code of i]; left[g, i, w]: the
    arc i + w -> i, dep[., i - 1, 1, code of i + w]; -inf where there is no such arc (w = 0, into the root,
    beyond the sentence); arcs between tokens (i >= 1) get the bias of their direction and length."""
    G, N1, K1 = right.shape
    K = bias.shape[1]
    for g in range(G):
        b = rows[g]
        n = lens[b]
        for i in range(N1):
            for w in range(K1):
                right[g, i, w] = -np.inf
                left[g, i, w] = -np.inf
                if w == 0 or i + w > n:
                    continue
                right[g, i, w] = dep[b, i + w - 1, 0, codes[b, i]]
                if i >= 1:
                    left[g, i, w] = dep[b, i - 1, 1, codes[b, i + w]]
                    if K > 0:
                        column = min(w, K) - 1
                        right[g, i, w] += bias[0, column]
                        left[g, i, w] += bias[1, column]


def _tree_score_loop(dep, codes, heads, lens, bias, score):
    """score[b]: the sum over the dependents d = 1..n, in order, of the arc heads[b, d-1] -> d's score (dep, plus
    the bias of its direction and length where the head is a token)."""
    B, N = heads.shape
    K = bias.shape[1]
    for b in range(B):
        total = 0.0
        for j in range(min(N, lens[b])):
            h, d = heads[b, j], j + 1
            x = 1 if h > d else 0
            arc = dep[b, j, x, codes[b, h]]
            if K > 0 and h > 0:
                arc += bias[x, min(max(abs(h - d), 1), K) - 1]
            total += arc
        score[b] = total


_KERNELS = {}


def _kernels():
    """The numba-compiled loops of the canonical tree, compiled at the first call."""
    global _pick
    if not _KERNELS:
        from numba import njit

        _pick = njit(inline="always")(_pick)  # the loop reads it as a module global
        compile_ = njit(cache=True, nogil=True)
        _KERNELS.update(eisner=compile_(_eisner_loops), arcs=compile_(_band_arcs_loop),
                        score=compile_(_tree_score_loop), label_scores=compile_(_label_scores_loop))
    return _KERNELS


def _eisner_loops(right, left, lens, tol, heads):  # noqa: C901 - the four items and the tail, as in the text
    """Per segment b of length n, items (i, i + w) at [i, w] for w <= k, kinds IR, IL, CR, CL = 0..3:

    IR[i, j] = max_{r=i..j-1} CR[i, r] + CL[r+1, j] + s(i -> j);  IL likewise with s(j -> i)
    CR[i, j] = max_{r=i+1..j} IR[i, r] + CR[r, j];               CL[i, j] = max_{r=i..j-1} CL[i, r] + IL[r, j]
    T[t] = CR[n - t, n] for t <= k, else max_{d=1..k} IR[n - t, n - t + d] + T[t - d]

    Each max is tolerant (:func:`~.tree.canonical_heads`): among the candidates (split points in increasing
    order) within ``tol`` of the best, the one with the least total arc length, the first on a tie."""
    B, N1, K1 = right.shape
    k = K1 - 1
    neg = -np.inf
    value = np.empty((4, N1, K1))
    length = np.zeros((4, N1, K1), np.int64)
    split = np.zeros((4, N1, K1), np.int64)
    cand_v = np.empty(K1 + N1)
    cand_l = np.zeros(K1 + N1, np.int64)
    tail_v = np.empty(N1)
    tail_l = np.zeros(N1, np.int64)
    tail_split = np.zeros(N1, np.int64)
    stack = np.zeros((4 * N1 + 4, 3), np.int64)
    for b in range(B):
        n = lens[b]
        if n <= 0:
            continue
        kb = min(k, n)
        value[:] = neg
        for i in range(n + 1):
            value[2, i, 0] = 0.0
            value[3, i, 0] = 0.0
            length[2, i, 0] = length[3, i, 0] = 0
        for w in range(1, kb + 1):
            for i in range(n - w + 1):
                for m in range(w):  # IR, IL: split r = i + m
                    cand_v[m] = value[2, i, m] + value[3, i + m + 1, w - 1 - m]
                    cand_l[m] = length[2, i, m] + length[3, i + m + 1, w - 1 - m]
                c = _pick(cand_v, cand_l, w, tol)
                value[0, i, w] = cand_v[c] + right[b, i, w]
                value[1, i, w] = cand_v[c] + left[b, i, w]
                length[0, i, w] = length[1, i, w] = cand_l[c] + w
                split[0, i, w] = split[1, i, w] = i + c
            for i in range(n - w + 1):
                for m in range(w):  # CR: split r = i + 1 + m
                    cand_v[m] = value[0, i, 1 + m] + value[2, i + 1 + m, w - 1 - m]
                    cand_l[m] = length[0, i, 1 + m] + length[2, i + 1 + m, w - 1 - m]
                c = _pick(cand_v, cand_l, w, tol)
                value[2, i, w], length[2, i, w], split[2, i, w] = cand_v[c], cand_l[c], i + 1 + c
                for m in range(w):  # CL: split r = i + m
                    cand_v[m] = value[3, i, m] + value[1, i + m, w - m]
                    cand_l[m] = length[3, i, m] + length[1, i + m, w - m]
                c = _pick(cand_v, cand_l, w, tol)
                value[3, i, w], length[3, i, w], split[3, i, w] = cand_v[c], cand_l[c], i + c
        for t in range(min(k, n) + 1):  # the tail, by distance t to the end
            tail_v[t], tail_l[t] = value[2, n - t, t], length[2, n - t, t]
        for dist in range(k + 1, n + 1):
            start = n - dist
            for c in range(k):  # d = c + 1: IR[start, start + d] + T[dist - d]
                cand_v[c] = value[0, start, c + 1] + tail_v[dist - 1 - c]
                cand_l[c] = length[0, start, c + 1] + tail_l[dist - 1 - c]
            c = _pick(cand_v, cand_l, k, tol)
            tail_v[dist], tail_l[dist], tail_split[dist] = cand_v[c], cand_l[c], start + 1 + c
        # backtrack from CR[0, n]: kind, i, j on a stack
        top = 0
        stack[0, 0], stack[0, 1], stack[0, 2] = 2, 0, n
        while top >= 0:
            kind, i, j = stack[top, 0], stack[top, 1], stack[top, 2]
            top -= 1
            if i == j:
                continue
            r = tail_split[n - i] if j - i > k else split[kind, i, j - i]
            if kind == 2:
                top += 1
                stack[top, 0], stack[top, 1], stack[top, 2] = 0, i, r
                top += 1
                stack[top, 0], stack[top, 1], stack[top, 2] = 2, r, j
            elif kind == 3:
                top += 1
                stack[top, 0], stack[top, 1], stack[top, 2] = 3, i, r
                top += 1
                stack[top, 0], stack[top, 1], stack[top, 2] = 1, r, j
            else:
                if kind == 0:
                    heads[b, j - 1] = i
                else:
                    heads[b, i - 1] = j
                top += 1
                stack[top, 0], stack[top, 1], stack[top, 2] = 2, i, r
                top += 1
                stack[top, 0], stack[top, 1], stack[top, 2] = 3, r + 1, j


def _pick(values, lengths, count, tol):
    """Index of the candidate (of the first ``count``) with the least arc length among those within
    ``tol`` (relative) of the best; the first of them on a tie."""
    best = -np.inf
    for c in range(count):
        if values[c] > best:
            best = values[c]
    floor = best - tol * max(abs(best), 1.0)
    choice, shortest = 0, np.iinfo(np.int64).max
    for c in range(count):
        if values[c] >= floor and lengths[c] < shortest:
            choice, shortest = c, lengths[c]
    return choice



# -- Viterbi (the max semiring) -------------------------------------------------------------------------


def viterbi(F: Tensor, bias: Optional[Tensor], lengths: Tensor, limit: int) -> Tuple[Tensor, Tensor, Tensor]:
    """The best (labels, tree) of DirectionalScores F (B, N, 2, M+1, M) (CPU), the distance bias (2, K_b) or
    None, lengths (B,) (0 for impossible sentences) and the longest arc ``limit`` (>= 1): labels (B, N), heads
    (B, N) (0 = the root; 0 beyond each length and where no tree is finite) and the best score (B,) float64.
    The reference's recurrences in the max semiring in float64, ties to the first split and label pair as
    the reference takes them."""
    B, N, _, _, M = F.shape
    real = torch.arange(N, device=lengths.device)[None, :] < lengths[:, None]
    packed = np.ascontiguousarray(F.detach()[real].to(torch.float64).numpy())  # (T, 2, M+1, M)
    lens = np.ascontiguousarray(lengths.detach().cpu().numpy().astype(np.int64))
    offsets = np.zeros(B, dtype=np.int64)
    offsets[1:] = np.cumsum(lens)[:-1]
    b64 = np.zeros((2, 0)) if bias is None else np.ascontiguousarray(bias.detach().to(torch.float64).cpu().numpy())
    best = np.zeros(B)
    labels, heads = np.zeros(packed.shape[0], dtype=np.int64), np.zeros(packed.shape[0], dtype=np.int64)
    _viterbi_kernel()(packed, offsets, b64, lens, int(limit), best, labels, heads)
    out_labels, out_heads = torch.zeros(B, N, dtype=torch.long), torch.zeros(B, N, dtype=torch.long)
    out_labels[real], out_heads[real] = torch.from_numpy(labels), torch.from_numpy(heads)
    found = torch.from_numpy(best) > -np.inf
    keep = found[:, None]
    return out_labels * keep, out_heads * keep, torch.from_numpy(best)


_VITERBI = None


def _viterbi_kernel():
    global _VITERBI
    if _VITERBI is None:
        from numba import njit

        _VITERBI = njit(cache=True, nogil=True)(_viterbi_batch)
    return _VITERBI


def _viterbi_batch(F, offsets, bias, lengths, limit, best, labels, heads):  # noqa: C901 - the items, as in tree.py
    """Per sentence b of length n (its rows of the packed F from offsets[b]), items [s, w] for w <= K:
    CR[s, w, a], CL[s, w, c], IR / IL[s, w, a, c] and the tail T[i, a], each with the arg-max that won it
    (inner split r; (d, c) for CR and the tail; (e, a) for CL), then the backtrack from the root."""
    B = lengths.shape[0]
    M = F.shape[3]
    Kb = bias.shape[1]
    neg = -np.inf
    N = 1
    for b in range(B):
        N = max(N, lengths[b])
    KK = max(1, min(limit, N))
    P = N + 1
    CR, CL = np.full((P, KK + 1, M), neg), np.full((P, KK + 1, M), neg)
    CRb, CLb = np.zeros((P, KK + 1, M), np.int64), np.zeros((P, KK + 1, M), np.int64)
    IR, IL = np.full((P, KK + 1, M, M), neg), np.full((P, KK + 1, M, M), neg)
    Ik = np.zeros((P, KK + 1, M, M), np.int64)
    T, Tb = np.full((P, M), neg), np.zeros((P, M), np.int64)
    stack = np.zeros((4 * P + 8, 5), np.int64)
    for b in range(B):
        n, o = lengths[b], offsets[b]
        if n <= 0:
            best[b] = 0.0
            continue
        K = min(KK, n)
        CR[: n + 1] = neg
        CL[: n + 1] = neg
        IR[: n + 1] = neg
        IL[: n + 1] = neg
        for i in range(n + 1):  # CR[i, i, a] = CL[i, i, a] = 0; the root carries label 0
            for a in range(M if i > 0 else 1):
                CR[i, 0, a] = 0.0
                CL[i, 0, a] = 0.0
        for w in range(1, K + 1):
            col = min(w, Kb) - 1
            for s in range(n - w + 1):
                t = s + w
                ah = 1 if s == 0 else M
                for a in range(ah):
                    for c in range(M):
                        # inner(s, t, a, c) = max_r CR[s, r, a] + CL[r+1, t, c]
                        top, arg = neg, s
                        for r in range(s, t):
                            v = CR[s, r - s, a] + CL[r + 1, t - r - 1, c]
                            if v > top:
                                top, arg = v, r
                        Ik[s, w, a, c] = arg
                        if s == 0:
                            IR[s, w, a, c] = top + F[o + t - 1, 0, 0, c]
                        else:
                            rb = bias[0, col] if Kb > 0 else 0.0
                            lb = bias[1, col] if Kb > 0 else 0.0
                            IR[s, w, a, c] = top + (F[o + t - 1, 0, a + 1, c] + rb)
                            IL[s, w, a, c] = top + (F[o + s - 1, 1, c + 1, a] + lb)
            for s in range(n - w + 1):
                ah = 1 if s == 0 else M
                for a in range(ah):  # CR[s, t, a] = max_{d, c} IR[s, s+d, a, c] + CR[s+d, t, c]
                    top, arg = neg, 0
                    for d in range(1, w + 1):
                        for c in range(M):
                            v = IR[s, d, a, c] + CR[s + d, w - d, c]
                            if v > top:
                                top, arg = v, (d - 1) * M + c
                    CR[s, w, a], CRb[s, w, a] = top, arg
                if s == 0:
                    continue
                for c in range(M):  # CL[s, t, c] = max_{e, a} CL[s, s+e, a] + IL[s+e, t, a, c]
                    top, arg = neg, 0
                    for e in range(w):
                        for a in range(M):
                            v = CL[s, e, a] + IL[s + e, w - e, a, c]
                            if v > top:
                                top, arg = v, e * M + a
                    CL[s, w, c], CLb[s, w, c] = top, arg
        if n <= K:
            best[b] = CR[0, n, 0]
        else:  # the tail T[i, a] = CR[i, n, a] (n - i <= K), else max_{d, c} IR[i, i+d, a, c] + T[i+d, c]
            for i in range(n - K, n + 1):
                for a in range(M):
                    T[i, a] = CR[i, n - i, a]
            for i in range(n - K - 1, -1, -1):
                for a in range(M):
                    top, arg = neg, 0
                    if a < (1 if i == 0 else M):
                        for d in range(1, K + 1):
                            for c in range(M):
                                v = IR[i, d, a, c] + T[i + d, c]
                                if v > top:
                                    top, arg = v, (d - 1) * M + c
                    T[i, a], Tb[i, a] = top, arg
            best[b] = T[0, 0]
        if not best[b] > neg:
            continue
        # backtrack: rows (kind, s, t, a, c); kinds 0 IR, 1 IL, 2 CR (label a), 3 CL (label c), 4 T (i = s, a)
        top_ = 0
        stack[0, 0], stack[0, 1], stack[0, 2], stack[0, 3], stack[0, 4] = (2, 0, n, 0, 0) if n <= K else (4, 0, n, 0, 0)
        while top_ >= 0:
            kind, s, t, a, c = stack[top_, 0], stack[top_, 1], stack[top_, 2], stack[top_, 3], stack[top_, 4]
            top_ -= 1
            if kind == 4:
                if n - s <= K:
                    top_ += 1
                    stack[top_, 0], stack[top_, 1], stack[top_, 2], stack[top_, 3] = 2, s, n, a
                else:
                    d, c2 = Tb[s, a] // M + 1, Tb[s, a] % M
                    top_ += 1
                    stack[top_, 0], stack[top_, 1], stack[top_, 2], stack[top_, 3], stack[top_, 4] = 0, s, s + d, a, c2
                    top_ += 1
                    stack[top_, 0], stack[top_, 1], stack[top_, 3] = 4, s + d, c2
            elif kind == 2:
                if s < t:
                    d, c2 = CRb[s, t - s, a] // M + 1, CRb[s, t - s, a] % M
                    top_ += 1
                    stack[top_, 0], stack[top_, 1], stack[top_, 2], stack[top_, 3], stack[top_, 4] = 0, s, s + d, a, c2
                    top_ += 1
                    stack[top_, 0], stack[top_, 1], stack[top_, 2], stack[top_, 3] = 2, s + d, t, c2
            elif kind == 3:
                if s < t:
                    e, a2 = CLb[s, t - s, c] // M, CLb[s, t - s, c] % M
                    top_ += 1
                    stack[top_, 0], stack[top_, 1], stack[top_, 2], stack[top_, 4] = 3, s, s + e, a2
                    top_ += 1
                    stack[top_, 0], stack[top_, 1], stack[top_, 2], stack[top_, 3], stack[top_, 4] = 1, s + e, t, a2, c
            else:
                if kind == 0:  # the arc s -> t: t gets label c
                    heads[o + t - 1], labels[o + t - 1] = s, c
                else:  # the arc t -> s: s gets label a
                    heads[o + s - 1], labels[o + s - 1] = t, a
                r = Ik[s, t - s, a, c]
                top_ += 1
                stack[top_, 0], stack[top_, 1], stack[top_, 2], stack[top_, 3] = 2, s, r, a
                top_ += 1
                stack[top_, 0], stack[top_, 1], stack[top_, 2], stack[top_, 4] = 3, r + 1, t, c
