"""Factored scores F (see :mod:`.scorers`) laid out as the dense tensors of :mod:`spacy_nldm.structs`.

:func:`expand_tree`: the NLDM's F (B, N, 2, M+1, M) as arc scores (B, N+1, N+1, M, M); :func:`expand_chain`:
a chain's F (B, N, 1, M+1, M) or (B, N, M+1, M+1, M) as potentials (B, N, M, M) or (B, N, M, M, M). Each is one
copy forward and one backward (autograd functions), read by :mod:`.structure` and :mod:`.smoothing`.
"""
from typing import Optional

import torch

Tensor = torch.Tensor


def expand_tree(F: Tensor, max_dist: Optional[int]) -> Tensor:
    """(B, N, 2, M+1, K) -> (B, N+1, N+1, M, K): ``scores[:, h, d] = F[:, d-1, 0 if h < d else 1, label of h
    (0 = root), label of d]``; only the arcs up to ``max_dist`` long (None: all) are written."""
    return _ExpandTree.apply(F, max_dist)


def expand_chain(F: Tensor, order: int) -> Tensor:
    """(B, N, 1, M+1, K) (order 1) or (B, N, M+1, M+1, K) (order 2) -> potentials (B, N, M, K) or
    (B, N, M, M, K); the start state (context 0) is read at the positions before the first token."""
    return _ExpandChain.apply(F, order)


class _ExpandTree(torch.autograd.Function):
    """scores[:, h, d] = F[:, d-1, 0 if h < d else 1, label of h (0 = root), label of d]."""

    @staticmethod
    def forward(ctx, F: Tensor, max_dist: Optional[int]) -> Tensor:
        B, N, _, C, M = F.shape
        ctx.max_dist, ctx.shape = max_dist, F.shape
        scores = F.new_zeros(B, N + 1, N + 1, C - 1, M)
        scores[:, 0, 1:, 0, :] = F[:, :, 0, 0, :]  # root arcs; structs drops those over max_dist
        for w in range(1, N if max_dist is None else min(max_dist, N - 1) + 1):
            # diagonal element i is the arc i -> i + w (offset w) or i + w -> i (offset -w); i >= 1
            scores.diagonal(w, 1, 2)[..., 1:] = F[:, w:, 0, 1:].permute(0, 2, 3, 1)
            scores.diagonal(-w, 1, 2)[..., 1:] = F[:, : N - w, 1, 1:].permute(0, 2, 3, 1)
        return scores

    @staticmethod
    def backward(ctx, d_scores: Tensor):
        N = ctx.shape[1]
        dF = d_scores.new_zeros(ctx.shape)
        dF[:, :, 0, 0, :] = d_scores[:, 0, 1:, 0, :]
        for w in range(1, N if ctx.max_dist is None else min(ctx.max_dist, N - 1) + 1):
            dF[:, w:, 0, 1:] += d_scores.diagonal(w, 1, 2)[..., 1:].permute(0, 3, 1, 2)
            dF[:, : N - w, 1, 1:] += d_scores.diagonal(-w, 1, 2)[..., 1:].permute(0, 3, 1, 2)
        return dF, None


class _ExpandChain(torch.autograd.Function):
    """pot[:, t, a, (p,) c] = F[:, t, (a+1,) p+1, c], with the start state (context 0) read at the
    positions before the first token; one copy forward, one backward, no concatenation."""

    @staticmethod
    def forward(ctx, F: Tensor, order: int) -> Tensor:
        B, N, _, C, K = F.shape
        M = C - 1
        ctx.order, ctx.shape = order, F.shape
        if order == 1:
            pot = F.new_empty(B, N, M, K)
            pot[:, 1:] = F[:, 1:, 0, 1:]
            pot[:, 0] = F[:, 0, 0, :1]  # start transitions (structs reads row 0)
            return pot
        pot = F.new_empty(B, N, M, M, K)
        pot[:, 2:] = F[:, 2:, 1:, 1:]
        if N > 1:
            pot[:, 1] = F[:, 1, :1, 1:]  # y_{t-2} is the start state
        pot[:, 0] = F[:, 0, :1, :1]
        return pot

    @staticmethod
    def backward(ctx, d_pot: Tensor):
        dF = d_pot.new_zeros(ctx.shape)
        if ctx.order == 1:
            dF[:, 1:, 0, 1:] = d_pot[:, 1:]
            dF[:, 0, 0, 0] = d_pot[:, 0].sum(1)
            return dF, None
        dF[:, 2:, 1:, 1:] = d_pot[:, 2:]
        if ctx.shape[1] > 1:
            dF[:, 1, 0, 1:] = d_pot[:, 1].sum(1)
        dF[:, 0, 0, 0] = d_pot[:, 0].sum((1, 2))
        return dF, None
