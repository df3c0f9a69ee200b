"""Labelled projective dependency trees over a label sequence: the NLDM's inside, Viterbi and marginals.

Conventions (shared by every public function here):

- ``scores[b, h, d, a, c]``, shape (B, N+1, N+1, M, M): score of the arc h -> d when the head h
  carries label a and the dependent d carries label c. Position 0 is the root; its label is
  index 0, so of the root's rows only ``scores[:, 0, :, 0, :]`` is read. Arcs into the root
  and self-arcs are never read.
- ``lengths[b]``: number of real tokens (positions 1..lengths[b]); scores beyond it are ignored.
- ``label_mask`` (B, N+1, M) bool: labels allowed at each position (row 0 is ignored).
- ``max_dist=k``: arcs longer than k are dropped, root arcs included; the incomplete items then
  exist only for spans of width <= k, which cuts the work from O(n^3 M^2) to O(n^2 k M^2).
- ``arc_mask`` (B or 1, N+1, N+1) bool: allowed arcs h -> d.

The recurrences are the labelled Eisner algorithm of DESIGN.md, evaluated width by width,
vectorised over sentences and over all spans of one width; ``_inside`` is generic in the
semiring, so the same code gives log Z (log semiring) and the best tree (max semiring).
Charts are lists indexed by span width; entry w holds the spans (i, i+w) for i = 0..N-w.
"""
from typing import List, Optional, Tuple

import torch

from .semiring import NEG, LogSemiring, MaxSemiring

Tensor = torch.Tensor
Item = Tuple[Tensor, Optional[Tensor]]  # (value, shift) as made by Semiring.encode


def log_partition(
    scores: Tensor,
    lengths: Tensor,
    *,
    label_mask: Optional[Tensor] = None,
    max_dist: Optional[int] = None,
    arc_mask: Optional[Tensor] = None,
) -> Tensor:
    """log of the sum over label sequences and projective trees of exp(tree score), shape (B,).

    With ``label_mask`` set to the gold labels this is log S(x, y); without it, log Z(x).
    Differentiable: its gradient with respect to ``scores`` is the arc marginals.
    """
    scores, base = _prepare(scores, lengths, label_mask, arc_mask)
    return _inside(LogSemiring, scores, base, lengths, max_dist)


def viterbi(
    scores: Tensor,
    lengths: Tensor,
    *,
    label_mask: Optional[Tensor] = None,
    max_dist: Optional[int] = None,
    arc_mask: Optional[Tensor] = None,
) -> Tuple[Tensor, Tensor, Tensor]:
    """Best joint (labels, tree): the paper's approximate MAP.

    Returns ``best`` (B,) its score, ``labels`` (B, N) label ids of tokens 1..N and
    ``heads`` (B, N) head positions in 0..N (0 = root); both are 0 beyond ``lengths``.
    """
    with torch.enable_grad():
        leaf = scores.detach().requires_grad_(True)
        prepared, base = _prepare(leaf, lengths, label_mask, arc_mask)
        best = _inside(MaxSemiring, prepared, base, lengths, max_dist)
        (chosen,) = torch.autograd.grad(best.sum(), leaf)
    labels, heads = _structure(chosen, lengths)
    return best.detach(), labels, heads


def marginals(
    scores: Tensor,
    lengths: Tensor,
    *,
    label_mask: Optional[Tensor] = None,
    max_dist: Optional[int] = None,
    arc_mask: Optional[Tensor] = None,
) -> Tuple[Tensor, Tensor]:
    """Posterior marginals: ``arc`` like ``scores`` (P of arc h->d with labels a, c) and
    ``label`` (B, N, M), P(y_d = c | x) for tokens 1..N (0 beyond ``lengths``)."""
    with torch.enable_grad():
        leaf = scores.detach().requires_grad_(True)
        log_z = log_partition(leaf, lengths, label_mask=label_mask, max_dist=max_dist, arc_mask=arc_mask)
        (arc,) = torch.autograd.grad(log_z.sum(), leaf)
    label = arc.sum(dim=(1, 3))[:, 1:]
    return arc, label


def count_trees(n: int, max_dist: Optional[int] = None) -> int:
    """Number of projective trees over n tokens with a free root (1, 3, 12, 55, 273, ...).

    Runs the inside algorithm on zero scores with one label, so it checks the recurrences too.
    """
    scores = torch.zeros(1, n + 1, n + 1, 1, 1, dtype=torch.float64)
    log_z = log_partition(scores, torch.tensor([n]), max_dist=max_dist)
    return int(round(float(log_z.exp())))


def _prepare(
    scores: Tensor, lengths: Tensor, label_mask: Optional[Tensor], arc_mask: Optional[Tensor]
) -> Tuple[Tensor, Tensor]:
    """Check shapes; fold masks and padding into finite scores; build the base items (B, N+1, M)."""
    if scores.dim() != 5 or scores.shape[1] != scores.shape[2] or scores.shape[3] != scores.shape[4]:
        raise ValueError(f"scores must have shape (B, N+1, N+1, M, M), got {tuple(scores.shape)}")
    if not scores.is_floating_point():
        raise ValueError(f"scores must be a floating point tensor, got {scores.dtype}")
    batch, n1, _, n_labels, _ = scores.shape
    lengths = torch.as_tensor(lengths, device=scores.device)
    if lengths.shape != (batch,):
        raise ValueError(f"lengths must have shape ({batch},), got {tuple(lengths.shape)}")
    if batch and (int(lengths.min()) < 0 or int(lengths.max()) > n1 - 1):
        raise ValueError(f"lengths must lie in 0..{n1 - 1} (scores.shape[1] - 1), got {lengths.tolist()}")
    positions = torch.arange(n1, device=scores.device)
    real = positions[None, :] <= lengths[:, None]  # (B, N+1), the root included
    real_pair = real[:, :, None] & real[:, None, :]
    allowed = positions[None, :, None] != positions[None, None, :]
    allowed = allowed & (positions[None, None, :] != 0)  # no arc into the root
    if arc_mask is not None:
        allowed = allowed & arc_mask.to(device=scores.device, dtype=torch.bool)
    neg = torch.full((), NEG, dtype=scores.dtype, device=scores.device)
    zero = torch.zeros((), dtype=scores.dtype, device=scores.device)
    arc_value = torch.where(allowed, zero, neg)
    # Padding gets finite zeros; real arcs keep their (clamped) scores plus the mask.
    scores = torch.where(
        real_pair[..., None, None], scores.clamp_min(NEG) + arc_value[..., None, None], zero
    )

    if label_mask is None:
        label_ok = torch.ones(batch, n1, n_labels, dtype=torch.bool, device=scores.device)
    else:
        if label_mask.shape != (batch, n1, n_labels):
            raise ValueError(
                f"label_mask must have shape ({batch}, {n1}, {n_labels}), got {tuple(label_mask.shape)}"
            )
        label_ok = label_mask.to(device=scores.device, dtype=torch.bool).clone()
    label_ok[:, 0, :] = False
    label_ok[:, 0, 0] = True  # the root carries label 0
    # Every label choice of a position passes through its width-0 items, so masking them suffices.
    base = torch.where(label_ok, zero, neg)
    return scores, base


def _stack(items: List[Item], slices: List[slice], dim: int, transpose: bool = False) -> Item:
    """Stack slices of several chart entries along a new split dimension: (values, shifts)."""
    values = [item[0][:, sl] for item, sl in zip(items, slices)]
    if transpose:
        values = [v.transpose(-1, -2) for v in values]
    value = torch.stack(values, dim=dim)
    if items[0][1] is None:
        return value, None
    return value, torch.stack([item[1][:, sl] for item, sl in zip(items, slices)], dim=2)


def _inside(semiring, scores: Tensor, base: Tensor, lengths: Tensor, max_dist: Optional[int]) -> Tensor:
    """Labelled Eisner in ``semiring``; returns the root item CR[0, n, 0] of each sentence, (B,)."""
    n1 = scores.shape[1]
    n = n1 - 1
    limit = n if max_dist is None else max(1, min(int(max_dist), n))
    encode, contract = semiring.encode, semiring.contract
    first = encode(base, 1)
    right: List[Item] = [first]  # CR[w]: (B, N+1-w, M), head at the left end i
    left: List[Item] = [first]  # CL[w]: (B, N+1-w, M), head at the right end j
    inc_right: List[Optional[Item]] = [None]  # IR[w]: (B, N+1-w, M, M), [a = label of i, c = label of j]
    inc_left: List[Optional[Item]] = [None]  # IL[w]: same layout, arc j -> i
    root = [base[:, 0, 0]]
    for w in range(1, n + 1):
        spans = n1 - w
        if w <= limit:
            # inner(i, j, a, c) = (+)_{r=i..j-1} CR[i, r, a] * CL[r+1, j, c], split k = r - i
            ks = range(w)
            x, xs = _stack([right[k] for k in ks], [slice(0, spans)] * w, dim=3)
            y, ys = _stack([left[w - 1 - k] for k in ks], [slice(k + 1, k + 1 + spans) for k in ks], dim=2)
            inner = contract(x.unsqueeze(-1), xs, y.unsqueeze(3), ys)  # (B, S, M, M)
            arc_right = scores.diagonal(offset=w, dim1=1, dim2=2).permute(0, 3, 1, 2)
            arc_left = scores.diagonal(offset=-w, dim1=1, dim2=2).permute(0, 3, 2, 1)
            inc_right.append(encode(inner + arc_right, 2))
            inc_left.append(encode(inner + arc_left, 2))
        ds = range(1, min(w, limit) + 1)
        # CR[i, j, a] = (+)_{r, c} IR[i, r, a, c] * CR[r, j, c], with d = r - i
        x, xs = _stack([inc_right[d] for d in ds], [slice(0, spans)] * len(ds), dim=3)
        y, ys = _stack([right[w - d] for d in ds], [slice(d, d + spans) for d in ds], dim=2)
        complete_right = contract(x, xs, y.unsqueeze(-1), ys).squeeze(-1)  # (B, S, M)
        # CL[i, j, c] = (+)_{r, a} CL[i, r, a] * IL[r, j, a, c], with d = j - r
        x, xs = _stack([inc_left[d] for d in ds], [slice(w - d, w - d + spans) for d in ds], dim=3, transpose=True)
        y, ys = _stack([left[w - d] for d in ds], [slice(0, spans)] * len(ds), dim=2)
        complete_left = contract(x, xs, y.unsqueeze(-1), ys).squeeze(-1)
        root.append(complete_right[:, 0, 0])
        right.append(encode(complete_right, 1))
        left.append(encode(complete_left, 1))
    root_by_length = torch.stack(root, dim=1)  # (B, N+1)
    return root_by_length.gather(1, lengths.to(root_by_length.device).long()[:, None]).squeeze(1)


def _structure(chosen: Tensor, lengths: Tensor) -> Tuple[Tensor, Tensor]:
    """One-hot arcs (B, N+1, N+1, M, M) -> labels (B, N) and heads (B, N), 0 beyond lengths."""
    labels = chosen.sum(dim=(1, 3)).argmax(-1)[:, 1:]
    heads = chosen.sum(dim=(3, 4)).argmax(1)[:, 1:]
    n = chosen.shape[1] - 1
    real = torch.arange(1, n + 1, device=chosen.device)[None, :] <= lengths.to(chosen.device)[:, None]
    return labels * real, heads * real
