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
from typing import Dict, List, Optional, Tuple

import numpy
import torch

#: relative tolerance of the maximisations: far above float32 rounding (~1e-7 per score), far below
#: score differences that mean something
TOL = 1e-5
#: most chart cells ((n+1) x (k+1) per segment) one group of segments holds
BUDGET = 1 << 21
NEG = float("-inf")
KINDS = ("IR", "IL", "CR", "CL")


def canonical_heads(F: torch.Tensor, labels: torch.Tensor, lengths: torch.Tensor,
                    max_dist: Optional[int] = None, tol: float = TOL,
                    distance_bias: Optional[torch.Tensor] = None) -> Tuple[torch.Tensor, torch.Tensor]:
    """Heads (S, L) (0 = root, positions 1..n) and scores (S,) float64 of the canonical tree of each
    segment, given its factored scores F (S, L, 2, M+1, M), the distance bias (2, K) or None (see
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
            k = right.shape[-1] - 1
            columns = numpy.minimum(numpy.arange(1, k + 1), bias.shape[1]) - 1
            right[:, 1:, 1:] += bias[0, columns]
            left[:, 1:, 1:] += bias[1, columns]
        heads[group, :n], scores[group] = _eisner(right, left, [lens[i] for i in group], tol)
    return torch.from_numpy(heads).to(labels.device, labels.dtype), torch.from_numpy(scores)


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


def _pick(values: numpy.ndarray, lengths: numpy.ndarray, tol: float) -> numpy.ndarray:
    """Index (..,) of the candidate (last axis) with the shortest arcs among those within ``tol``
    (relative) of the best; the first of them on a tie."""
    best = values.max(-1, keepdims=True)
    near = values >= best - tol * numpy.maximum(numpy.abs(best), 1.0)
    return numpy.where(near, lengths, numpy.iinfo(lengths.dtype).max).argmin(-1)


def _chosen(values: numpy.ndarray, lengths: numpy.ndarray, tol: float):
    """The tolerant best candidate: its value, its arc length and its index."""
    choice = _pick(values, lengths, tol)
    return (numpy.take_along_axis(values, choice[..., None], -1)[..., 0],
            numpy.take_along_axis(lengths, choice[..., None], -1)[..., 0], choice)


def _eisner(right: numpy.ndarray, left: numpy.ndarray, lens: List[int], tol: float):
    """Tolerant first-order Eisner over banded arc scores (B, N+1, k+1); heads (B, N) and tree scores (B,)."""
    B, N1, K1 = right.shape
    N, k = N1 - 1, K1 - 1
    value: Dict[str, numpy.ndarray] = {t: numpy.full((B, N1, K1), NEG) for t in KINDS}  # item (i, i+w) at [:, i, w]
    length = {t: numpy.zeros((B, N1, K1), dtype=numpy.int64) for t in KINDS}  # its arcs' total length
    split = {t: numpy.zeros((B, N1, K1), dtype=numpy.int64) for t in KINDS}  # its split point r
    value["CR"][:, :, 0] = 0.0
    value["CL"][:, :, 0] = 0.0
    for w in range(1, k + 1):  # every item of width w at once: spans (i, j = i + w), i < count
        count = N1 - w
        i = numpy.arange(count)[:, None]
        m = numpy.arange(w)[None, :]  # candidate offsets, split points in increasing order
        # IR[i, j] = max_{r=i..j-1} CR[i, r] + CL[r+1, j] + s(i -> j); IL the same with s(j -> i)
        rows, cols = i + m + 1, w - 1 - m
        v, ln, c = _chosen(value["CR"][:, :count, :w] + value["CL"][:, rows, cols],
                           length["CR"][:, :count, :w] + length["CL"][:, rows, cols], tol)
        for kind, arcs in (("IR", right), ("IL", left)):
            value[kind][:, :count, w] = v + arcs[:, :count, w]
            length[kind][:, :count, w] = ln + w
            split[kind][:, :count, w] = i[:, 0] + c
        # CR[i, j] = max_{r=i+1..j} IR[i, r] + CR[r, j]
        rows, cols = i + 1 + m, w - 1 - m
        value["CR"][:, :count, w], length["CR"][:, :count, w], c = _chosen(
            value["IR"][:, :count, 1 : w + 1] + value["CR"][:, rows, cols],
            length["IR"][:, :count, 1 : w + 1] + length["CR"][:, rows, cols], tol)
        split["CR"][:, :count, w] = i[:, 0] + 1 + c
        # CL[i, j] = max_{r=i..j-1} CL[i, r] + IL[r, j]
        rows, cols = i + m, w - m
        value["CL"][:, :count, w], length["CL"][:, :count, w], c = _chosen(
            value["CL"][:, :count, :w] + value["IL"][:, rows, cols],
            length["CL"][:, :count, :w] + length["IL"][:, rows, cols], tol)
        split["CL"][:, :count, w] = i[:, 0] + c
    tail_split = _tail(value, length, lens, k, tol)
    return _backtrack(split, tail_split, right, left, lens, k)


def _tail(value, length, lens: List[int], k: int, tol: float) -> numpy.ndarray:
    """Split points of the tail CR[n - t, n] of each segment (n its length) for the distances t > k,
    at [b, t]: T[t] = max_{d=1..k} IR[n - t, n - t + d] + T[t - d], T[t] = CR[n - t, n] for t <= k."""
    B, N1, K1 = value["CR"].shape
    top = max(lens)
    tail_split = numpy.zeros((B, top + 1), dtype=numpy.int64)
    if top < K1:
        return tail_split
    n = numpy.asarray(lens)
    b = numpy.arange(B)
    t = numpy.arange(K1)
    starts = numpy.maximum(n[:, None] - t[None], 0)  # (B, k+1); distances beyond a segment are never read
    tail_value = numpy.full((B, top + 1), NEG)
    tail_length = numpy.zeros((B, top + 1), dtype=numpy.int64)
    tail_value[:, :K1] = value["CR"][b[:, None], starts, t[None]]
    tail_length[:, :K1] = length["CR"][b[:, None], starts, t[None]]
    inc_value, inc_length = value["IR"][:, :, 1:], length["IR"][:, :, 1:]  # IR[i, i + d] at [:, i, d - 1]
    for dist in range(K1, top + 1):
        start = numpy.maximum(n - dist, 0)  # (B,)
        # candidates d = 1..k: IR[i, i + d] + CR[i + d, n], CR[i + d, n] = T[dist - d]
        v, ln, c = _chosen(inc_value[b, start] + tail_value[:, dist - 1 :: -1][:, : K1 - 1],
                           inc_length[b, start] + tail_length[:, dist - 1 :: -1][:, : K1 - 1], tol)
        tail_value[:, dist], tail_length[:, dist] = v, ln
        tail_split[:, dist] = start + 1 + c
    return tail_split


def _backtrack(split, tail_split, right, left, lens: List[int], k: int):
    """Heads (B, N) and scores (B,) (sum of the tree's arc scores, in float64) from the split points."""
    B, N1 = right.shape[:2]
    heads = numpy.zeros((B, N1 - 1), dtype="int64")
    scores = numpy.zeros(B, dtype="float64")
    for b, n in enumerate(lens):
        stack = [("CR", 0, n)]
        while stack:
            kind, i, j = stack.pop()
            if i == j:
                continue
            if j - i > k:  # only the tail is wider than the band
                r = int(tail_split[b, n - i])
            else:
                r = int(split[kind][b, i, j - i])
            if kind == "CR":
                stack += [("IR", i, r), ("CR", r, j)]
            elif kind == "CL":
                stack += [("CL", i, r), ("IL", r, j)]
            else:
                if kind == "IR":
                    heads[b, j - 1] = i
                    scores[b] += right[b, i, j - i]
                else:
                    heads[b, i - 1] = j
                    scores[b] += left[b, i, j - i]
                stack += [("CR", i, r), ("CL", r + 1, j)]
    return heads, scores
