"""One tree for each equally scored class of decoded latent trees.

The edge scorers give an arc h -> d a score that depends on the dependent d, the arc's direction
and the two labels, not on where the head is (see :mod:`.scorers`). A tree's score therefore
depends only on each token's label and its head's direction and label, and every projective tree
that keeps those (the tree's *pattern*) scores exactly the same. Viterbi returns one of them, and
which one is decided by rounding: a doc's scores that differ in the last bit with its batch
neighbours (matrix products of other shapes) can change its heads, though nothing else changes.

:func:`canonical_heads` replaces the decoded tree by a fixed member of its class: the one with the
shortest arcs in all (ties between those broken by position, always the same way), found by an
exact Viterbi on small integer scores, so that equal patterns give equal heads.
"""
from typing import Optional

import torch

from .. import structs

#: most positions squared that one canonicalisation call holds (its (B, N+1, N+1) scores)
BUDGET = 1 << 22


def canonical_heads(labels: torch.Tensor, heads: torch.Tensor, lengths: torch.Tensor,
                    max_dist: Optional[int] = None) -> torch.Tensor:
    """Heads (S, L) of the canonical tree of each decoded (labels, heads) (S, L) of the given
    lengths (S,): same labels, same direction and label of every token's head (so the same score),
    the smallest sum of arc lengths among those trees. Positions beyond a length stay 0."""
    out = torch.zeros_like(heads)
    lens = lengths.tolist()
    order = sorted((i for i, n in enumerate(lens) if n > 0), key=lens.__getitem__)
    start = 0
    while start < len(order):
        n = lens[order[start]]
        size = max(1, BUDGET // ((n + 1) ** 2))
        group = order[start : start + size]
        n = lens[group[-1]]  # the longest of the group (sorted by length)
        idx = torch.tensor(group, dtype=torch.long, device=heads.device)
        out[idx, :n] = _canonical(labels[idx, :n], heads[idx, :n], lengths[idx], max_dist)
        start += len(group)
    return out


def _canonical(labels: torch.Tensor, heads: torch.Tensor, lengths: torch.Tensor,
               max_dist: Optional[int]) -> torch.Tensor:
    B, N = labels.shape
    device = labels.device
    pos = torch.arange(N + 1, device=device)
    # label code of each position: 0 for the root, 1 + label for a token
    code = torch.cat([labels.new_zeros(B, 1), labels + 1], dim=1)  # (B, N+1)
    head_code = code.gather(1, heads)  # (B, N): the label code of each token's head
    head_right = heads > pos[None, 1:]  # (B, N): the head is right of the token
    h, d = pos[:, None], pos[None, 1:]  # arcs h -> d for tokens d = 1..N
    allowed = (code[:, :, None] == head_code[:, None, :]) & ((h > d)[None] == head_right[:, None, :])
    arc_mask = torch.cat([torch.zeros_like(allowed[:, :, :1]), allowed], dim=2)  # (B, N+1, N+1)
    length = (pos[:, None] - pos[None, :]).abs().to(torch.float32)  # small integers: sums are exact
    scores = (-length).expand(B, N + 1, N + 1)[..., None, None].contiguous()
    _, _, best = structs.viterbi(scores, lengths, max_dist=max_dist, arc_mask=arc_mask)
    return best
