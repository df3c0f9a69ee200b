"""The canonical tree as first written (a dense (N+1, N+1) chart, before the banded ones): tolerant
first-order Eisner over dense (N+1, N+1) charts, every span of every width. Kept as the reference that the
banded version (O(N k) memory with max_dist) must match bit for bit: same heads, same float64 scores."""
from typing import List, Optional, Tuple

import numpy
import torch

#: relative tolerance of the maximisations: far above float32 rounding (~1e-7 per score), far below
#: score differences that mean something
TOL = 1e-5
#: most (N+1)^2 position pairs that one bucket of segments holds
BUDGET = 1 << 21
NEG = float("-inf")


def dense_canonical_heads(F: torch.Tensor, labels: torch.Tensor, lengths: torch.Tensor,
                    max_dist: Optional[int] = None, tol: float = TOL) -> Tuple[torch.Tensor, torch.Tensor]:
    """Heads (S, L) (0 = root, positions 1..n) and scores (S,) of the canonical tree of each segment,
    given its factored scores F (S, L, 2, M+1, M) and decoded labels (S, L). Positions beyond a
    segment's length get head 0."""
    heads = torch.zeros_like(labels)
    scores = torch.zeros(labels.shape[0], dtype=torch.float64)
    lens = lengths.tolist()
    order = sorted((i for i, n in enumerate(lens) if n > 0), key=lens.__getitem__)
    start = 0
    while start < len(order):
        size = max(1, BUDGET // ((lens[order[start]] + 1) ** 2))
        group = order[start : start + size]
        n = lens[group[-1]]  # the longest of the group
        idx = torch.tensor(group, dtype=torch.long)
        sub = F[idx.to(F.device), :n].detach().to("cpu", torch.float64)
        group_heads, group_scores = _eisner(_arc_scores(sub, labels[idx, :n].cpu(), lengths[idx].cpu(), max_dist),
                                            [lens[i] for i in group], max_dist, tol)
        heads[idx, :n] = torch.from_numpy(group_heads).to(heads.device)
        scores[idx] = torch.from_numpy(group_scores)
        start += len(group)
    return heads, scores


def _arc_scores(F: torch.Tensor, labels: torch.Tensor, lengths: torch.Tensor, max_dist: Optional[int]) -> torch.Tensor:
    """S[b, h, d]: the score of arc h -> d (positions, 0 = root) with the labels fixed; -inf where
    there is no arc (into the root, to itself, beyond the length, longer than max_dist)."""
    B, N = labels.shape
    pos = torch.arange(N + 1)
    dep = F.gather(-1, labels[:, :, None, None, None].expand(B, N, *F.shape[2:4], 1))[..., 0]  # (B, N, 2, C)
    code = torch.cat([labels.new_zeros(B, 1), labels + 1], dim=1)  # (B, N+1): label code of each position
    h, d = pos[:, None], pos[None, 1:]  # arcs into tokens 1..N
    direction = (h > d).long().expand(N + 1, N)
    b = torch.arange(B)[:, None, None]
    S = dep[b, (d - 1).expand(N + 1, N)[None], direction[None], code[:, :, None].expand(B, N + 1, N)]  # (B, N+1, N)
    real = pos[None, :] <= lengths[:, None]  # (B, N+1)
    ok = (h != d)[None] & real[:, :, None] & real[:, None, 1:]
    if max_dist is not None:
        ok = ok & ((h - d).abs() <= max_dist)[None]
    S = torch.where(ok, S, torch.full((), NEG, dtype=S.dtype))
    return torch.cat([torch.full((B, N + 1, 1), NEG, dtype=S.dtype), S], dim=2)  # no arc into the root


def _pick(values: torch.Tensor, lengths: torch.Tensor, tol: float) -> torch.Tensor:
    """Index (..,) of the candidate (last axis) with the shortest arcs among those within ``tol``
    (relative) of the best; the first of them on a tie."""
    best = values.max(-1, keepdim=True).values
    near = values >= best - tol * best.abs().clamp_min(1.0)
    return torch.where(near, lengths, torch.iinfo(lengths.dtype).max).argmin(-1)


def _eisner(S: torch.Tensor, lens: List[int], max_dist: Optional[int], tol: float):
    """Tolerant first-order Eisner over arc scores S (B, N+1, N+1); heads (B, N) and tree scores (B,)."""
    B, N1, _ = S.shape
    N = N1 - 1
    k = N if max_dist is None else max(1, min(max_dist, N))
    shape = (B, N1, N1)
    value = {t: torch.full(shape, NEG, dtype=torch.float64) for t in ("IR", "IL", "CR", "CL")}
    length = {t: torch.zeros(shape, dtype=torch.int64) for t in value}
    split = {t: torch.zeros(shape, dtype=torch.int64) for t in value}
    diag = torch.arange(N1)
    value["CR"][:, diag, diag] = 0.0
    value["CL"][:, diag, diag] = 0.0
    bidx = torch.arange(B)[:, None, None]

    def best(kind, rs, first, second, i, j, extra_value=0.0, extra_length=0):
        """Fill kind[:, i, j] with the tolerant best over split points rs (n, R) of first + second."""
        v = first[0] + second[0]
        ln = first[1] + second[1]
        choice = _pick(v, ln, tol)  # (B, n)
        v = v.gather(-1, choice[..., None])[..., 0]
        ln = ln.gather(-1, choice[..., None])[..., 0]
        value[kind][:, i, j] = v + extra_value
        length[kind][:, i, j] = ln + extra_length
        split[kind][:, i, j] = rs[torch.arange(len(i))[None, :], choice]

    for w in range(1, N1):
        i = torch.arange(0, N1 - w)
        j = i + w
        if w <= k:  # incomplete items: the arc i -> j (IR) or j -> i (IL), split at r in [i, j)
            rs = i[:, None] + torch.arange(w)[None, :]
            first = (value["CR"][bidx, i[:, None], rs], length["CR"][bidx, i[:, None], rs])
            second = (value["CL"][bidx, rs + 1, j[:, None]], length["CL"][bidx, rs + 1, j[:, None]])
            best("IR", rs, first, second, i, j, S[:, i, j], w)
            best("IL", rs, first, second, i, j, S[:, j, i], w)
        reach = min(w, k)
        # complete right: IR[i, r] + CR[r, j], r in (i, i + reach]
        rs = i[:, None] + 1 + torch.arange(reach)[None, :]
        best("CR", rs, (value["IR"][bidx, i[:, None], rs], length["IR"][bidx, i[:, None], rs]),
             (value["CR"][bidx, rs, j[:, None]], length["CR"][bidx, rs, j[:, None]]), i, j)
        # complete left: CL[i, r] + IL[r, j], r in [j - reach, j)
        rs = j[:, None] - reach + torch.arange(reach)[None, :]
        best("CL", rs, (value["CL"][bidx, i[:, None], rs], length["CL"][bidx, i[:, None], rs]),
             (value["IL"][bidx, rs, j[:, None]], length["IL"][bidx, rs, j[:, None]]), i, j)

    splits = {t: s.numpy() for t, s in split.items()}
    arcs = S.numpy()
    heads = numpy.zeros((B, N), dtype="int64")
    scores = numpy.zeros(B, dtype="float64")
    for b, n in enumerate(lens):
        stack = [("CR", 0, n)]
        while stack:
            kind, i, j = stack.pop()
            if i == j:
                continue
            r = int(splits[kind][b, i, j])
            if kind == "CR":
                stack += [("IR", i, r), ("CR", r, j)]
            elif kind == "CL":
                stack += [("CL", i, r), ("IL", r, j)]
            else:
                head, dep = (i, j) if kind == "IR" else (j, i)
                heads[b, dep - 1] = head
                scores[b] += arcs[b, head, dep]
                stack += [("CR", i, r), ("CL", r + 1, j)]
    return heads, scores


def factored_scores(kind, S, N, M, generator):
    """F (S, N, 2, M+1, M): token-dependent arcs ("token"), or an emission plus one transition table
    ("transition", as emission_transition makes them: many exactly tied trees)."""
    if kind == "token":
        return torch.randn(S, N, 2, M + 1, M, generator=generator)
    emission = torch.randn(S, N, 1, 1, M, generator=generator)
    transition = torch.randn(1, 1, 2, M + 1, M, generator=generator)
    return emission + transition
