"""Linear-chain CRFs of order 1 and 2: the paper's baselines, on the same semirings as the tree.

``potentials`` hold every score of the chain, emissions and transitions together:

- order 1: shape (B, N, M, M); ``potentials[b, t, a, c]`` scores label c at token t (0-based) after
  label a at token t-1. Token 0 follows the start state, read from row a = 0, so start transitions
  live in ``potentials[:, 0, 0, :]``.
- order 2: shape (B, N, M, M, M); ``potentials[b, t, a, p, c]`` scores y_t = c after y_{t-2} = a and
  y_{t-1} = p; missing previous labels are the start state, index 0.

The order is read from ``potentials.dim()``. ``lengths`` (B,) counts real tokens; ``label_mask``
(B, N, M) bool restricts the labels of each token. End transitions are added by the caller into
the last real token's potentials (see :func:`chain_potentials`).
"""
from typing import Optional, Tuple

import torch

from .semiring import NEG, LogSemiring, MaxSemiring

Tensor = torch.Tensor


def crf_log_partition(potentials: Tensor, lengths: Tensor, *, label_mask: Optional[Tensor] = None) -> Tensor:
    """log Z of the chain (or log S with a gold ``label_mask``), shape (B,); differentiable."""
    return _forward(LogSemiring, *_prepare(potentials, lengths, label_mask))


def crf_viterbi(
    potentials: Tensor, lengths: Tensor, *, label_mask: Optional[Tensor] = None
) -> Tuple[Tensor, Tensor]:
    """Best label sequence: ``best`` (B,) and ``labels`` (B, N), 0 beyond ``lengths``."""
    with torch.enable_grad():
        leaf = potentials.detach().requires_grad_(True)
        best = _forward(MaxSemiring, *_prepare(leaf, lengths, label_mask))
        (chosen,) = torch.autograd.grad(best.sum(), leaf)
    labels = _token_label_sums(chosen).argmax(-1)
    return best.detach(), labels * _real(lengths, potentials.shape[1], potentials.device)


def crf_marginals(potentials: Tensor, lengths: Tensor, *, label_mask: Optional[Tensor] = None) -> Tensor:
    """P(y_t = c | x), shape (B, N, M), 0 beyond ``lengths``."""
    with torch.enable_grad():
        leaf = potentials.detach().requires_grad_(True)
        log_z = crf_log_partition(leaf, lengths, label_mask=label_mask)
        (marg,) = torch.autograd.grad(log_z.sum(), leaf)
    return _token_label_sums(marg)


def chain_potentials(
    emissions: Tensor,
    transitions: Tensor,
    lengths: Tensor,
    start: Optional[Tensor] = None,
    end: Optional[Tensor] = None,
) -> Tensor:
    """Potentials from the usual parametrisation.

    emissions (B, N, M); transitions (M, M) for order 1 or (M, M, M) for order 2, indexed by the
    previous label(s) then the current one; start (M,) scores the first label, end (M,) the last.
    The start state is index 0 of the previous-label axes, so its transition rows are replaced by
    ``start`` at token 0 (and, for order 2, by ``transitions[0]`` as the y_{t-2} of token 1).
    """
    batch, n, m = emissions.shape
    order = transitions.dim() - 1
    lead = (1,) * order
    pot = emissions.reshape(batch, n, *lead, m) + transitions.reshape(1, 1, *transitions.shape)
    first = emissions[:, 0].reshape(batch, *lead, m).expand(batch, *((m,) * order), m).clone()
    if start is not None:
        first = first + start
    pot = torch.cat([first[:, None], pot[:, 1:]], dim=1)
    if end is not None:
        last = torch.nn.functional.one_hot((lengths - 1).clamp_min(0), n).to(pot.dtype)
        last = last * (lengths > 0).to(pot.dtype)[:, None]
        pot = pot + last.reshape(batch, n, *((1,) * order), 1) * end
    return pot


def _prepare(potentials: Tensor, lengths: Tensor, label_mask: Optional[Tensor]):
    if potentials.dim() not in (4, 5):
        raise ValueError(
            f"potentials must be (B, N, M, M) for order 1 or (B, N, M, M, M) for order 2, got {tuple(potentials.shape)}"
        )
    batch, n = potentials.shape[:2]
    m = potentials.shape[-1]
    if any(size != m for size in potentials.shape[2:]):
        raise ValueError(f"the label axes of potentials must have equal sizes, got {tuple(potentials.shape)}")
    lengths = torch.as_tensor(lengths, device=potentials.device).long()
    if lengths.shape != (batch,) or (batch and (int(lengths.min()) < 0 or int(lengths.max()) > n)):
        raise ValueError(f"lengths must have shape ({batch},) with values in 0..{n}, got {lengths.tolist()}")
    if label_mask is not None:
        if label_mask.shape != (batch, n, m):
            raise ValueError(f"label_mask must have shape ({batch}, {n}, {m}), got {tuple(label_mask.shape)}")
        order = potentials.dim() - 3
        neg = torch.full((), NEG, dtype=potentials.dtype, device=potentials.device)
        ok = label_mask.to(device=potentials.device, dtype=torch.bool).reshape(batch, n, *((1,) * order), m)
        potentials = torch.where(ok, potentials, neg)
    return potentials, lengths


def _forward(semiring, potentials: Tensor, lengths: Tensor) -> Tensor:
    """Forward algorithm; the state is the last ``order`` labels, (B, M) or (B, M, M).

    One step is alpha'[p, c] = (+)_a alpha[a, p] * pot[t, a, p, c] (order 1: no p), a semiring
    contraction over a for every (p, c), done by ``semiring.contract`` with the potentials
    encoded once for all tokens (one shift per (token, a, p): the max over c).
    """
    batch, n = potentials.shape[:2]
    m = potentials.shape[-1]
    carried = m if potentials.dim() == 5 else 1  # P: the previous label carried in the state (order 2)
    # (B, N, A, P, C) -> (B, N, P, A, C): contraction axis A next to the output axis C
    pot = potentials.reshape(batch, n, m, carried, m).transpose(2, 3)
    pot_value, pot_shift = semiring.encode(pot.reshape(batch * n * carried, m, m), 1)
    # one tensor per token: indexing [:, t] instead would make autograd zero-fill the whole
    # potentials tensor for every token in the backward pass
    pot_values = pot_value.reshape(batch, n, carried, m, m).unbind(1)
    pot_shifts = pot_shift.reshape(batch, n, carried, m).unbind(1) if pot_shift is not None else [None] * n
    alpha = torch.full((batch, m, carried), NEG, dtype=potentials.dtype, device=potentials.device)
    alpha[:, 0, 0] = 0.0  # the start state
    for t in range(n):
        alpha_t = alpha.transpose(1, 2)  # (B, P, A)
        if pot_shifts[t] is None:  # max semiring: log values throughout
            x, x_shift = alpha_t[:, :, None, :, None], None
        else:  # log semiring: alpha rides in the shifts, its scaled value is 1
            x, x_shift = torch.ones_like(alpha_t)[:, :, None, :, None], alpha_t
        step = semiring.contract(x, x_shift, pot_values[t].unsqueeze(3), pot_shifts[t])  # (B, P, 1, C)
        step = step.reshape(batch, m, carried)  # [p, c] becomes the next [a, p]
        running = (t < lengths).reshape(batch, 1, 1)
        alpha = torch.where(running, step, alpha)
    total = semiring.reduce(alpha.flatten(1), dim=1)
    return torch.where(lengths > 0, total, torch.zeros_like(total))


def _token_label_sums(per_potential: Tensor) -> Tensor:
    """Sum a potentials-shaped tensor over all but (batch, token, current label)."""
    return per_potential.sum(dim=tuple(range(2, per_potential.dim() - 1)))


def _real(lengths: Tensor, n: int, device) -> Tensor:
    return torch.arange(n, device=device)[None, :] < torch.as_tensor(lengths, device=device)[:, None]
