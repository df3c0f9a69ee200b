"""Brute-force references: enumerate every label sequence and every projective tree (tiny n and M only);
and :func:`torch_lane`, in which the structured core computes with its torch stages, the reference of the
compiled loops."""
import itertools
from functools import lru_cache

import numpy as np
import torch


@lru_cache(maxsize=None)
def projective_trees(n):
    """All head vectors (heads[d-1] for d = 1..n, 0 = root) of projective trees with a free root."""
    trees = []
    for heads in itertools.product(range(n + 1), repeat=n):
        if any(h == d for d, h in enumerate(heads, start=1)):
            continue
        if _is_tree(heads) and _is_projective(heads):
            trees.append(heads)
    return tuple(trees)


def _is_tree(heads):
    for d in range(1, len(heads) + 1):
        seen, node = set(), d
        while node != 0:
            if node in seen:
                return False
            seen.add(node)
            node = heads[node - 1]
    return True


def _is_projective(heads):
    arcs = [tuple(sorted((h, d))) for d, h in enumerate(heads, start=1)]
    for (a, b), (c, d) in itertools.combinations(arcs, 2):
        if a < c < b < d or c < a < d < b:
            return False
    return True


def enumerate_tree_model(scores, n, label_mask=None, max_dist=None, arc_mask=None):
    """One sentence. scores (N+1, N+1, M, M) numpy; returns (log Z, best score, best (labels, heads),
    arc marginals like scores, label marginals (n, M))."""
    m = scores.shape[-1]
    label_sets = [
        [c for c in range(m) if label_mask is None or label_mask[d, c]] for d in range(1, n + 1)
    ]
    labelings = np.array(list(itertools.product(*label_sets)), dtype=int).reshape(-1, n)
    totals, structures = [], []
    for heads in projective_trees(n):
        if max_dist is not None and any(abs(h - d) > max_dist for d, h in enumerate(heads, start=1)):
            continue
        if arc_mask is not None and not all(arc_mask[h, d] for d, h in enumerate(heads, start=1)):
            continue
        total = np.zeros(len(labelings))
        for d, h in enumerate(heads, start=1):
            head_label = labelings[:, h - 1] if h > 0 else np.zeros(len(labelings), dtype=int)
            total += scores[h, d, head_label, labelings[:, d - 1]]
        totals.append(total)
        structures.append(heads)
    totals = np.stack(totals)  # (trees, labelings)
    top = totals.max()
    log_z = top + np.log(np.exp(totals - top).sum())
    t_best, l_best = np.unravel_index(totals.argmax(), totals.shape)
    probs = np.exp(totals - log_z)
    arc = np.zeros_like(scores)
    label = np.zeros((n, m))
    for t, heads in enumerate(structures):
        for li, labels in enumerate(labelings):
            p = probs[t, li]
            for d, h in enumerate(heads, start=1):
                head_label = labels[h - 1] if h > 0 else 0
                arc[h, d, head_label, labels[d - 1]] += p
                label[d - 1, labels[d - 1]] += p
    return log_z, totals.max(), (labelings[l_best], structures[t_best]), arc, label


def enumerate_chain(potentials, n, label_mask=None):
    """One sentence of a linear-chain CRF (order from potentials.ndim - 2). Returns (log Z, best, labels, marginals)."""
    order = potentials.ndim - 2
    m = potentials.shape[-1]
    sets = [[c for c in range(m) if label_mask is None or label_mask[t, c]] for t in range(n)]
    best, best_labels, scores, seqs = -np.inf, None, [], []
    for labels in itertools.product(*sets):
        padded = (0,) * order + labels
        total = sum(potentials[(t,) + padded[t : t + order + 1]] for t in range(n))
        scores.append(total)
        seqs.append(labels)
        if total > best:
            best, best_labels = total, labels
    scores = np.array(scores)
    log_z = scores.max() + np.log(np.exp(scores - scores.max()).sum())
    marg = np.zeros((n, m))
    for p, labels in zip(np.exp(scores - log_z), seqs):
        for t, c in enumerate(labels):
            marg[t, c] += p
    return log_z, best, np.array(best_labels, dtype=int), marg


def expand_directional(F):
    """Definition of the dense arc scores of factored ones, by loops: scores[b, h, d, a, c] =
    F[b, d-1, 0 if h < d else 1, a + 1 (0 if h is the root), c]; self arcs and arcs into the root are 0."""
    B, N, _, _, M = F.shape
    scores = torch.zeros(B, N + 1, N + 1, M, M, dtype=F.dtype)
    for h in range(N + 1):
        for d in range(1, N + 1):
            if h == 0:
                scores[:, 0, d, 0] = F[:, d - 1, 0, 0]
            elif h != d:
                scores[:, h, d] = F[:, d - 1, 0 if h < d else 1, 1:]
    return scores


def chain_reference(potentials, lengths):
    """float64 log Z (B,) and token marginals (B, N, M) by a plain logsumexp forward pass and autograd."""
    leaf = potentials.detach().double().clone().requires_grad_(True)
    batch, n, m = leaf.shape[0], leaf.shape[1], leaf.shape[-1]
    steps = leaf.reshape(batch, n, m, -1, m)  # [a, p, c]
    alpha = torch.full((batch, steps.shape[2] * steps.shape[3]), -1e30, dtype=torch.float64)  # finite: no NaN grad
    alpha[:, 0] = 0.0
    for t in range(n):
        new = torch.logsumexp(alpha.reshape(batch, m, -1, 1) + steps[:, t], 1).flatten(1)
        alpha = torch.where((t < lengths)[:, None], new, alpha)
    log_z = torch.logsumexp(alpha, 1)
    (grad,) = torch.autograd.grad(log_z.sum(), leaf)
    return log_z.detach(), grad.sum(dim=tuple(range(2, grad.dim() - 1)))


def tree_reference(scores, lengths, **kw):
    """The latent tree's float64 log Z (B,) and arc marginals (by autograd) on the reference lane, and the best
    score by the max semiring: exact up to float64 rounding at any scale (the lane itself is checked against
    :func:`enumerate_tree_model`)."""
    from spacy_nldm.structs import MaxSemiring, log_partition

    leaf = scores.detach().double().requires_grad_(True)
    log_z = log_partition(leaf, lengths, lane="reference", **kw)
    (arcs,) = torch.autograd.grad(log_z.sum(), leaf)
    best = log_partition(scores.detach().double(), lengths, semiring=MaxSemiring, **kw)
    return log_z.detach(), arcs, best.detach()


def assert_heads_form_a_tree(heads):
    """From every token the heads (a token's head index, None at the root) reach the root, with no cycle."""
    for start in range(len(heads)):
        seen, i = set(), start
        while i is not None:
            assert i not in seen and 0 <= i < len(heads), heads
            seen.add(i)
            i = heads[i]

