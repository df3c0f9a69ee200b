"""One latent tree for the decoded labels, whatever the rounding of equally scored trees.

The edge scorers give an arc h -> d a score that depends on the dependent d, the arc's direction
and the two labels, not on where the head is (see :mod:`.scorers`). Many projective trees therefore
score the same, or within rounding of each other: every tree that keeps each token's head direction
and head label scores exactly the same, and with a transition-like interaction (``emission_transition``,
or early in training) so does every tree with the same *multiset* of (direction, head label, label).
Viterbi returns one of them, decided by the last bits of the scores, and those change with a doc's
batch neighbours (matrix products of other shapes): the labels stay, the heads move.

:func:`canonical_heads` decodes the tree again for the decoded labels with a first-order Eisner
algorithm whose maximisations are *tolerant*: among the candidates within ``tol`` (relative) of the
best, the one whose subtrees have the shortest arcs in all wins, ties going to the first split point.
The result is the tree with the shortest arcs among the (near-)best ones, a function of the scores
that noise far below ``tol`` does not change. Its score is the sum of its arcs' scores, at most a few
``tol`` below the Viterbi score (equal for exactly tied trees).

Banded charts (as in :mod:`spacy_nldm.structs`, see ``docs/algorithm.md``): with arcs up to
``max_dist`` = k long, only items of width <= k can be part of a tree, plus the tail CR[i, n] (a wider
left-complete item, or a right-complete one ending before n, would need an arc longer than k to
attach). Item (i, i + w) is stored at [b, i, w], w <= k, and the tail by its distance to the end, so
work is O(n k^2) and memory O(n k) per segment (O(n^3) and O(n^2) without max_dist, k = n). Each
width is one vectorised step over all spans and all segments of a group; the tail is one step per
position. The choices are those of the dense (N+1, N+1) algorithm, bit for bit (``tests/dense_trees.py``).
"""
from typing import List, Optional, Tuple

import numpy
import torch

#: relative tolerance of the maximisations: far above float32 rounding (~1e-7 per score), far below
#: score differences that mean something
TOL = 1e-5
#: most chart cells ((n+1) x (k+1) per segment) one group of segments holds
BUDGET = 1 << 21
NEG = float("-inf")


def canonical_heads(F: torch.Tensor, labels: torch.Tensor, lengths: torch.Tensor,
                    max_dist: Optional[int] = None, tol: float = TOL,
                    distance_bias: Optional[torch.Tensor] = None) -> Tuple[torch.Tensor, torch.Tensor]:
    """Heads (S, L) (0 = root, positions 1..n) and scores (S,) float64 of the canonical tree of each
    segment, given its factored scores F (S, L, 2, M+1, M), the distance bias (2, K) or (2, K, M, M) or None (see
    :class:`~spacy_nldm.structs.DirectionalScores`) and decoded labels (S, L). Positions beyond a
    segment's length get head 0. Segments are independent of each other (and of their grouping)."""
    heads = numpy.zeros(labels.shape, dtype=numpy.int64)
    scores = numpy.zeros(labels.shape[0], dtype=numpy.float64)
    if labels.numel() == 0:
        return torch.from_numpy(heads).to(labels.device, labels.dtype), torch.from_numpy(scores)
    lens = [int(n) for n in lengths.tolist()]
    S, L = labels.shape
    # dep[s, d-1, direction, head label code] = F[s, d-1, direction, code, label of d]: small, whatever M
    dep = F.detach().gather(-1, labels.to(F.device)[:, :, None, None, None].expand(S, L, *F.shape[2:4], 1))[..., 0]
    dep = dep.to("cpu", torch.float64).numpy()
    codes = numpy.zeros((S, L + 1), dtype=numpy.int64)  # label code of each position, 0 = the root
    codes[:, 1:] = labels.cpu().numpy() + 1
    bias = None if distance_bias is None else distance_bias.detach().to("cpu", torch.float64).numpy()
    for group in _groups(lens, max_dist):
        n = lens[group[-1]]  # the longest of the group
        right, left = _band_arcs(dep[group, :n], codes[group, : n + 1], [lens[i] for i in group], _width(n, max_dist))
        if bias is not None:  # arcs between tokens (span starts 1 and up) of length w
            _add_bias(right, left, bias, codes[group, : n + 1])
        heads[group, :n], scores[group] = _eisner(right, left, [lens[i] for i in group], tol)
    return torch.from_numpy(heads).to(labels.device, labels.dtype), torch.from_numpy(scores)


def _add_bias(right: numpy.ndarray, left: numpy.ndarray, bias: numpy.ndarray, codes: numpy.ndarray) -> None:
    """Add the distance bias (2, K) or (2, K, M, M) to the banded arcs (B, N+1, k+1) between tokens, in place;
    ``codes`` (B, N+1) are the positions' label codes (label + 1, 0 = the root)."""
    k = right.shape[-1] - 1
    columns = numpy.minimum(numpy.arange(1, k + 1), bias.shape[1]) - 1
    if bias.ndim == 2:
        right[:, 1:, 1:] += bias[0, columns]
        left[:, 1:, 1:] += bias[1, columns]
        return
    n = codes.shape[1] - 1
    starts = numpy.arange(1, n + 1)[:, None]
    ends = numpy.minimum(starts + numpy.arange(1, k + 1)[None, :], n)  # past the end: -inf arcs, any label
    start_label = numpy.maximum(codes[:, starts] - 1, 0)  # (B, n, 1)
    end_label = numpy.maximum(codes[:, ends] - 1, 0)  # (B, n, k)
    right[:, 1:, 1:] += bias[0, columns[None, None, :], start_label, end_label]  # start -> end
    left[:, 1:, 1:] += bias[1, columns[None, None, :], end_label, start_label]  # end -> start


def _width(n: int, max_dist: Optional[int]) -> int:
    """Widest item kept in the band for segments of up to n tokens."""
    return max(1, n if max_dist is None else min(max_dist, n))


def _groups(lens: List[int], max_dist: Optional[int]) -> List[List[int]]:
    """Non-empty segments by increasing length, in groups of at most BUDGET chart cells."""
    groups: List[List[int]] = []
    for i in sorted((i for i, n in enumerate(lens) if n > 0), key=lens.__getitem__):
        cells = (lens[i] + 1) * (_width(lens[i], max_dist) + 1)
        if groups and (len(groups[-1]) + 1) * cells <= BUDGET:
            groups[-1].append(i)
        else:
            groups.append([i])
    return groups


def _band_arcs(dep: numpy.ndarray, codes: numpy.ndarray, lens: List[int], k: int) -> Tuple[numpy.ndarray, numpy.ndarray]:
    """Arc scores with the labels fixed, float64 (B, N+1, k+1), from the scores dep (B, N, 2, M+1) of
    each token's label and the label codes (B, N+1) of the positions: right[b, i, w] of the arc
    i -> i + w, left[b, i, w] of the arc i + w -> i; -inf where there is no such arc (w = 0, into the
    root, beyond the segment's length)."""
    B, N = dep.shape[:2]
    i = numpy.arange(N + 1)[:, None]
    w = numpy.arange(k + 1)[None, :]
    j = numpy.minimum(i + w, N)
    b = numpy.arange(B)[:, None, None]
    right = dep[b, numpy.maximum(j - 1, 0)[None], 0, codes[:, :, None]]
    left = dep[b, numpy.maximum(i - 1, 0)[None], 1, codes[b, j[None]]]
    real = (i + w)[None] <= numpy.asarray(lens)[:, None, None]
    ok = real & (w >= 1)[None]
    right = numpy.where(ok, right, NEG)
    left = numpy.where(ok & (i >= 1)[None], left, NEG)
    return right, left


def _eisner(right: numpy.ndarray, left: numpy.ndarray, lens: List[int], tol: float):
    """Tolerant first-order Eisner over banded arc scores (B, N+1, k+1); heads (B, N) and tree scores (B,)."""
    B, N1, _ = right.shape
    heads = numpy.zeros((B, N1 - 1), dtype=numpy.int64)
    scores = numpy.zeros(B, dtype=numpy.float64)
    _compiled_eisner()(right, left, numpy.asarray(lens, dtype=numpy.int64), tol, heads, scores)
    return heads, scores


_COMPILED = None


def _compiled_eisner():
    global _COMPILED, _pick
    if _COMPILED is None:
        from numba import njit

        _pick = njit(inline="always")(_pick)  # the loop reads it as a module global
        _COMPILED = njit(cache=True, nogil=True)(_eisner_loops)
    return _COMPILED


def _eisner_loops(right, left, lens, tol, heads, scores):  # noqa: C901 - the four items and the tail, as in the text
    """Per segment b of length n, items (i, i + w) at [i, w] for w <= k, kinds IR, IL, CR, CL = 0..3:

    IR[i, j] = max_{r=i..j-1} CR[i, r] + CL[r+1, j] + s(i -> j);  IL likewise with s(j -> i)
    CR[i, j] = max_{r=i+1..j} IR[i, r] + CR[r, j];               CL[i, j] = max_{r=i..j-1} CL[i, r] + IL[r, j]
    T[t] = CR[n - t, n] for t <= k, else max_{d=1..k} IR[n - t, n - t + d] + T[t - d]

    Each max is tolerant (:func:`canonical_heads`): among the candidates (split points in increasing
    order) within ``tol`` of the best, the one with the least total arc length, the first on a tie."""
    B, N1, K1 = right.shape
    k = K1 - 1
    neg = -numpy.inf
    value = numpy.empty((4, N1, K1))
    length = numpy.zeros((4, N1, K1), numpy.int64)
    split = numpy.zeros((4, N1, K1), numpy.int64)
    cand_v = numpy.empty(K1 + N1)
    cand_l = numpy.zeros(K1 + N1, numpy.int64)
    tail_v = numpy.empty(N1)
    tail_l = numpy.zeros(N1, numpy.int64)
    tail_split = numpy.zeros(N1, numpy.int64)
    stack = numpy.zeros((4 * N1 + 4, 3), numpy.int64)
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
        total = 0.0
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
                    total += right[b, i, j - i]
                else:
                    heads[b, i - 1] = j
                    total += left[b, i, j - i]
                top += 1
                stack[top, 0], stack[top, 1], stack[top, 2] = 2, i, r
                top += 1
                stack[top, 0], stack[top, 1], stack[top, 2] = 3, r + 1, j
        scores[b] = total


def _pick(values, lengths, count, tol):
    """Index of the candidate (of the first ``count``) with the least arc length among those within
    ``tol`` (relative) of the best; the first of them on a tie."""
    best = -numpy.inf
    for c in range(count):
        if values[c] > best:
            best = values[c]
    floor = best - tol * max(abs(best), 1.0)
    choice, shortest = 0, numpy.iinfo(numpy.int64).max
    for c in range(count):
        if values[c] >= floor and lengths[c] < shortest:
            choice, shortest = c, lengths[c]
    return choice

