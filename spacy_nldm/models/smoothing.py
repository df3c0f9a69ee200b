"""Label smoothing for the structured taggers: the structured counterpart of spaCy's ``tagger`` setting.

spaCy's ``tagger`` with ``label_smoothing = a`` trains each token on the target that gives the gold
label 1 - a and every other label a / (M - 1): a mixture of the gold one-hot (weight 1 - b) and the
uniform distribution (weight b), with b = a M / (M - 1). Our components mix the same two targets at the
level of the whole output:

    loss = (1 - b) * (-log P(y* | x)) + b * U(x)

``U`` is the cross-entropy of the uniform distribution over the outputs against the model:

* chain (CRF): ``U = log Z - E_u[score(y)]``, the cross-entropy of the uniform distribution over label
  sequences, exactly;
* latent tree (NLDM): ``U = log Z - E_u[score(y, tree)] - log #trees``, with labels and trees uniform and
  independent. Since log S(y) >= E_tree[score(y, tree)] + log #trees (Jensen's inequality over a uniform
  tree), U bounds the uniform label cross-entropy ``-E_u[log P(y | x)]`` from above.

Both are exact and cheap: the model is log-linear in its factored scores ``F`` (and the distance bias),
so ``E_u[score] = <mu, F> + <mu_bias, bias>`` with ``mu`` the gradient of log Z at zero scores, which
depends only on the sentence length (cached per length). When the interactions vanish (every context
scores a label alike, no distance bias), both equal spaCy's per-token smoothed cross-entropy: the loss
*is* the ``tagger``'s. ``b = 0`` is the plain negative log-likelihood.
"""
import math
from functools import lru_cache
from typing import Optional, Tuple

import torch

from .layout import expand_chain

Tensor = torch.Tensor


def mixture_weight(label_smoothing: float, n_labels: int) -> float:
    """spaCy's ``label_smoothing`` a (the gold label keeps 1 - a) as the weight b of the uniform target."""
    if label_smoothing == 0.0:
        return 0.0
    if n_labels < 2:
        raise ValueError(f"label_smoothing needs at least 2 labels, not {n_labels}")
    limit = (n_labels - 1) / n_labels
    if not 0.0 <= label_smoothing <= limit:
        raise ValueError(f"label_smoothing must be in [0, {limit:.3f}] with {n_labels} labels, not {label_smoothing}")
    return label_smoothing * n_labels / (n_labels - 1)


def uniform_expectation(F: Tensor, lengths: Tensor, moments, weights: Tensor, bias: Optional[Tensor] = None
                        ) -> Tensor:
    """Sum over the segments of F (S, L, X, C, M) (``lengths`` (S,)) of ``weights`` (S,) times
    ``E_u[score] + constant``; ``moments(n, M)`` gives, for a segment of ``n`` tokens, ``(mu (n, X, C, M),
    mu_bias (2, K) or None, constant)``: the expected counts of F's entries and of the bias's lengths under the
    uniform distribution, and the constant added to E_u[score] (log #trees for the tree, 0 for chains); ``bias``
    (2, K): the tree's distance bias, or the second-order chain's trigram table (counted by ``mu_bias`` alike).

    The sum is linear in F, so its gradient is the weighted counts laid out like F: :class:`_LinearInF`
    writes them once in the backward pass, where indexing F once per sentence length would make autograd
    allocate, zero and add an F-sized gradient per length (the second-order chain's F has (M+1)^2 M entries
    per token).
    """
    lens = lengths.to(F.device)
    weights = weights.to(device=F.device, dtype=F.dtype)
    groups = []  # (rows, weights of the rows, mu) per sentence length
    constant_total = F.new_zeros(())
    bias_counts = None
    for n in sorted(set(int(v) for v in lengths.tolist()) - {0}):
        rows = ((lens == n) & (weights != 0)).nonzero().flatten()
        if not len(rows):
            continue
        mu, mu_bias, constant = moments(n, F.shape[-1])
        w = weights[rows]
        groups.append((rows, w, mu.to(device=F.device, dtype=F.dtype)))
        constant_total = constant_total + w.sum() * constant
        if mu_bias is not None and bias is not None:
            term = w.sum() * mu_bias.to(device=F.device, dtype=F.dtype)
            bias_counts = term if bias_counts is None else bias_counts + term
    total = _LinearInF.apply(F, groups) + constant_total
    if bias_counts is not None:
        total = total + (bias_counts * bias).sum()
    return total


class _LinearInF(torch.autograd.Function):
    """sum over groups (rows (R,), w (R,), mu (n, ...)) of sum_r w_r <F[r, :n], mu>, and its gradient."""

    @staticmethod
    def forward(ctx, F: Tensor, groups) -> Tensor:
        ctx.groups, ctx.shape = groups, F.shape
        total = F.new_zeros(())
        for rows, w, mu in groups:
            n = mu.shape[0]
            total += (w * (F[rows, :n] * mu).flatten(1).sum(1)).sum()
        return total

    @staticmethod
    def backward(ctx, d_total: Tensor):
        d_F = d_total.new_zeros(ctx.shape)
        for rows, w, mu in ctx.groups:
            d_F[rows, : mu.shape[0]] = (d_total * w).view(-1, *[1] * mu.dim()) * mu
        return d_F, None


def _moments(log_z, F_shape, bias_shape: Optional[Tuple[int, int]], n: int, m: int):
    """The gradient of ``log_z(F, bias)`` at zero scores F (1, n, X, C, m) (and bias), in float64, and
    ``log_z(0) - n log m``."""
    F = torch.zeros(1, n, *F_shape, m, dtype=torch.float64, requires_grad=True)
    inputs = [F]
    bias = None
    if bias_shape is not None:
        bias = torch.zeros(*bias_shape, dtype=torch.float64, requires_grad=True)
        inputs.append(bias)
    value = log_z(F, torch.tensor([n]), bias).sum()
    grads = torch.autograd.grad(value, inputs)
    constant = float(value.detach()) - n * math.log(m)
    return grads[0][0], (grads[1] if bias is not None else None), constant


@lru_cache(maxsize=4096)
def tree_moments(n: int, m: int, max_dist: Optional[int], bias_lengths: int):
    """Moments of the NLDM's uniform distribution (labels x projective trees, arcs up to ``max_dist``)."""
    from .. import structs

    def log_z(F, lengths, bias):
        return structs.log_partition(structs.DirectionalScores(F, bias), lengths, max_dist=max_dist)

    return _moments(log_z, (2, m + 1), (2, bias_lengths) if bias_lengths else None, n, m)


@lru_cache(maxsize=4096)
def chain_moments(n: int, m: int, order: int, trigram: bool = False):
    """Moments of the uniform distribution over label sequences (constant 0). ``trigram`` (order 2): for F
    in the first-order layout (n, 1, M+1, M) plus a trigram table (M+1, M+1, M) in the bias's place (see
    :class:`~.structure.Chain`): the counts of the full layout summed over the label two back, and over
    the tokens."""
    if trigram:
        mu, _, constant = chain_moments(n, m, 2)  # (n, M+1, M+1, M)
        return mu.sum(1, keepdim=True), mu.sum(0), constant
    from .. import structs

    def log_z(F, lengths, bias):
        return structs.crf_log_partition(expand_chain(F, order), lengths)

    shape = (1, m + 1) if order == 1 else (m + 1, m + 1)
    return _moments(log_z, shape, None, n, m)
