"""The NLDM with the chain's adjacent-label factor too: log Z over label sequences and projective trees of
``tree score + sum_t trans[y_{t-1}, y_t]`` (t = 1..n, y_0 the root's start state).

Every adjacent pair (r, r+1) is joined exactly once in Eisner's derivation: where an incomplete item of
[i, j] is built from CR[i, r] and CL[r+1, j]. So the pair's factor goes there, and the complete items that
meet there carry the label of their far end too (r for CR[i, r], r+1 for CL[r+1, j]). With ``max_dist = k``
a join spans at most k positions, so only the complete items narrower than k need the far end; the wider
ones (the tail CR[i, n], as in :mod:`.inside`) keep one label. Labels live in one space of C = M+1 (0: the
root's, 1..M the tokens'); position 0 allows only 0, the tokens only 1..M.

```
J[i, j, p, q]  = sum_{r=i..j-1} sum_{u, v} CR[i, r, p, u] * trans[u, v] * CL[r+1, j, q, v]
IR[i, j, p, q] = J[i, j, p, q] * s(i -> j, p, q)          IL[i, j, q, p] = J[i, j, p, q] * s(j -> i, q, p)
CR[i, j, a, e] = sum_{r=i+1..j, c} IR[i, r, a, c] * CR[r, j, c, e]      (j - i <= k; e: the label of j)
CL[i, j, a, e] = sum_{r=i..j-1, c} CL[i, r, c, e] * IL[r, j, a, c]      (j - i < k;  e: the label of i)
T[i, a] = sum_e CR[i, n, a, e] (n - i <= k),  T[i, a] = sum_{d=1..k, c} IR[i, i+d, a, c] * T[i+d, c]
log Z = T[0, 0]
```

Time O(n k^2 C^3 + n k C^2), memory O(n k C^2). The items are kept in float64 exp space with one shift each
(:class:`Items`; an entry is lost only where it lies over 700 nats below its item's largest), so that the
contractions are matrix products; the result is differentiable by autograd: its gradient with respect to F
is the arc marginals, summed over heads, and with respect to ``trans`` the expected count of each adjacent
pair.
"""
from typing import List, Optional

import torch

Tensor = torch.Tensor

#: the log value of an impossible label (finite, so that no shift meets inf - inf)
IMPOSSIBLE = -1e30


class Items:
    """Chart items in exp space: log value = log(values) + shift[..., None, None]; values (..., C, C) float64
    (an item made by :func:`sum_items` or :meth:`from_log` has largest entry 1), shift (...) float64. The shifts
    are computed without gradient: subtracted from the values and added back, they cancel, so log Z's gradient
    flows through the values alone."""

    def __init__(self, values: Tensor, shift: Tensor):
        self.values, self.shift = values, shift

    @staticmethod
    def from_log(log_values: Tensor) -> "Items":
        with torch.no_grad():
            shift = log_values.amax((-2, -1))
        return Items((log_values - shift[..., None, None]).exp(), shift)

    def normalised(self):
        with torch.no_grad():
            top = self.values.amax((-2, -1)).clamp_min(1e-300)
        return Items(self.values / top[..., None, None], self.shift + top.log())

    def __getitem__(self, index):
        return Items(self.values[index], self.shift[index])

    def times(self, other):
        """Elementwise product (log: sum) of two items (values of at most 1: left unnormalised)."""
        return Items(self.values * other.values, self.shift + other.shift)

    def transposed(self):
        return Items(self.values.transpose(-1, -2), self.shift)


def sum_items(terms: List[Items]) -> Items:
    """Sum (log: log-sum-exp) of items of the same shape, normalised."""
    if len(terms) == 1:
        return terms[0].normalised()
    with torch.no_grad():
        shift = torch.stack([t.shift for t in terms]).amax(0)
    values = sum(t.values * (t.shift - shift).exp()[..., None, None] for t in terms)
    return Items(values, shift).normalised()


def matmul_items(a: Items, b: Items) -> Items:
    """Matrix product (log: log-sum-exp over the shared label) of two items."""
    return Items(torch.matmul(a.values, b.values), a.shift + b.shift)


def _pad_root_label(scores: Tensor) -> Tensor:
    """(..., M) dependent-label scores -> (..., C): the root's label 0 impossible as a dependent."""
    return torch.cat([scores.new_full((*scores.shape[:-1], 1), IMPOSSIBLE), scores], dim=-1)


def _bias_of(bias: Optional[Tensor], direction: int, width: int):
    if bias is None:
        return 0.0
    return bias[direction, min(width, bias.shape[1]) - 1]


def tree_chain_log_partition(F: Tensor, trans: Tensor, lengths: Tensor, *, max_dist: Optional[int] = None,
                             distance_bias: Optional[Tensor] = None) -> Tensor:
    """log Z (B,) float64 of the NLDM times the chain factor.

    F (B, N, 2, M+1, M): :class:`~.arcs.DirectionalScores`' layout (``F[b, d-1, x, a, c]`` scores the arc
    into token d of direction x, 0 = head on the left, with head label a, 0 = the root, and dependent label
    c); trans (M+1, M): ``trans[p, c]`` scores label c right after label p - 1 (p = 0: the first token);
    lengths (B,) >= 1; distance_bias (2, K) or None: added to the arcs between two tokens by direction and
    length (the last column for K and longer). Arcs longer than ``max_dist`` are dropped, root arcs included.
    """
    if distance_bias is not None and distance_bias.dim() != 2:
        raise ValueError("the chain factor takes a distance bias of shape (2, K), not one per label pair")
    B, N, _, C, M = F.shape
    F = F.to(torch.float64)
    chain = Items.from_log(_pad_root_label(trans.to(device=F.device, dtype=torch.float64)))  # (C, C)
    bias = None if distance_bias is None else distance_bias.to(device=F.device, dtype=torch.float64)
    lengths = lengths.to(F.device).long()
    P = N + 1
    k = N if max_dist is None else max(1, min(max_dist, N))

    # The one-position items CR[i, i] and CL[i, i] are the identity over the labels position i allows (the
    # root's 0 at position 0, 1..M at a token). Multiplying by them is skipped: an arc's score already makes
    # label 0 impossible for a dependent, so only the pair (0, 1) needs the root's row of the chain.
    chain_after = Items(chain.values.expand(P - 1, C, C).clone(), chain.shift.expand(P - 1))  # CR[i, i] x chain
    chain_after.values[0, 1:] = 0.0  # the root's label only at position 0
    chain_after.values[1:, 0] = 0.0  # a token's labels only elsewhere
    CR: List[Optional[Items]] = [None]  # CR[w][:, i] = CR[i, i + w]; (B, P - w, C, C); width 0: the identity
    CL: List[Optional[Items]] = [None]
    IR: List[Optional[Items]] = [None]
    IL: List[Optional[Items]] = [None]
    for w in range(1, k + 1):
        n_i = P - w
        joins = []
        for s in range(w):  # split r = i + s: CR[i, i+s], the pair (r, r+1), CL[i+s+1, i+w]
            if s == 0:
                left = chain_after[:n_i].values.expand(B, n_i, C, C), chain_after[:n_i].shift.expand(B, n_i)
                left = Items(*left)
            else:
                left = matmul_items(CR[s][:, :n_i], chain)  # [p, v]
            if w - 1 - s == 0:  # CL[r+1, r+1]: the identity
                joins.append(left)
            else:
                right = CL[w - 1 - s][:, s + 1: s + 1 + n_i]  # [q, v]
                joins.append(matmul_items(left, right.transposed()))  # [p, q]
        J = sum_items(joins)
        # arcs i -> i+w: dependent i+w, direction 0; the root (i = 0) has no distance bias
        right_arcs = _pad_root_label(F[:, w - 1: w - 1 + n_i, 0])  # (B, n_i, C, C): [head p, dep q]
        if bias is not None:
            token_heads = torch.arange(n_i, device=F.device) > 0
            right_arcs = right_arcs + torch.where(token_heads, _bias_of(bias, 0, w), 0.0)[None, :, None, None]
        IR.append(J.times(Items.from_log(right_arcs)))
        # arcs i+w -> i: dependent i (never the root), direction 1: [head label a of i+w, dep label c of i]
        left_arcs = _pad_root_label(F[:, :n_i - 1, 1]) + _bias_of(bias, 1, w)
        left_arcs = torch.cat([F.new_full((B, 1, C, C), IMPOSSIBLE), left_arcs], dim=1)
        IL.append(J.transposed().times(Items.from_log(left_arcs)))
        # CR[i, i+w] = sum_s IR[i, i+s] CR[i+s, i+w] (s = w: CR[i+w, i+w], the identity)
        CR.append(sum_items([IR[w][:, :n_i]] + [matmul_items(IR[s][:, :n_i], CR[w - s][:, s: s + n_i])
                                                for s in range(1, w)]))
        if w < k:  # CL[i, i+w] = sum_s CL[i, i+s] IL[i+s, i+w] (s = 0: CL[i, i], the identity)
            CL.append(sum_items([IL[w][:, :n_i]] + [matmul_items(IL[w - s][:, s: s + n_i], CL[s][:, :n_i])
                                                    for s in range(1, w)]))

    batch = torch.arange(B, device=F.device)
    W = int(lengths.max()) + 1
    starts = (lengths[:, None] - torch.arange(W, device=F.device)[None, :]).clamp_min(0)  # (B, W): n_b - w
    # the incomplete items the tail reads, gathered once per width and unbound (one gradient scatter each)
    # (read for w > k only, where n_b - w + d <= n_b; the clamp keeps the unread w <= k in range)
    tail_items = [None]
    for d in range(1, k + 1):
        at = (batch[:, None], starts.clamp_max(P - 1 - d))
        tail_items.append((IR[d].values[at].unbind(1), IR[d].shift[at].unbind(1)))
    tails: List[Tensor] = []  # tails[w] (B, C) in log space: T[n_b - w]
    for w in range(W):
        if w <= k:
            if w == 0:  # CR[n_b, n_b]: every label of the last token
                tails.append(F.new_zeros(B, C))
                continue
            item = CR[w][batch, starts[:, w].clamp_max(P - w - 1)]
            tails.append(item.values.sum(-1).clamp_min(1e-300).log() + item.shift[:, None])
            continue
        terms = []
        for d in range(1, k + 1):  # IR[i, i+d] (values, shift) times T[i+d]
            values, shift = tail_items[d][0][w], tail_items[d][1][w]
            after = tails[w - d]
            with torch.no_grad():
                top = after.amax(-1, keepdim=True)
            total = torch.matmul(values, (after - top).exp()[..., None])[..., 0]
            terms.append(total.clamp_min(1e-300).log() + shift[:, None] + top)
        tails.append(terms[0] if len(terms) == 1 else torch.logsumexp(torch.stack(terms), 0))
    return torch.stack(tails, 1)[batch, lengths, 0]


def tree_chain_label_marginals(F: Tensor, trans: Tensor, lengths: Tensor, *, max_dist: Optional[int] = None,
                               distance_bias: Optional[Tensor] = None) -> Tensor:
    """P(y_d = c | x), shape (B, N, M): d log Z / d F summed over the arc's direction and head label (every
    tree has one arc into each token)."""
    with torch.enable_grad():
        F = F.detach().requires_grad_(True)
        log_z = tree_chain_log_partition(F, trans.detach(), lengths, max_dist=max_dist,
                                         distance_bias=None if distance_bias is None else distance_bias.detach())
        (grad,) = torch.autograd.grad(log_z.sum(), F)
    return grad.sum((2, 3)).to(F.dtype)


def chain_gold_score(trans: Tensor, labels: Tensor, lengths: Tensor) -> Tensor:
    """(B,) sum over t = 1..n of trans[y_{t-1} + 1, y_t] (y_0 + 1 = 0, the start), labels (B, N)."""
    B, N = labels.shape
    previous = torch.cat([labels.new_zeros(B, 1), labels[:, :-1] + 1], dim=1)
    pairs = trans[previous, labels]  # (B, N)
    real = torch.arange(N, device=labels.device)[None, :] < lengths.to(labels.device)[:, None]
    return (pairs * real).sum(1)
