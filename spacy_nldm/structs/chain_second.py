"""Second-order linear-chain CRF on factored scores: per-token emissions plus one trigram table.

:class:`SecondOrderScores` holds ``emissions`` (B, N, M) and ``trigram`` (M+1, M+1, M). Label c at token t
after y_{t-2} = a and y_{t-1} = p scores

    emissions[b, t, c] + trigram[A, P, c],   A = 0 if t < 2 else 1 + a,   P = 0 if t < 1 else 1 + p

(index 0 of the trigram's first two axes is the start state). These are the order-2 potentials of
:mod:`.chain` without their (B, N, M, M, M) tensor: :meth:`SecondOrderScores.potentials` builds them,
and the lane here computes the same numbers from the two factors.

The lane runs the forward recursion over the states (y_{t-1}, y_t) in exp space, in float64, one
batched matrix product per token (p the batch axis of the product):

    alpha_t[b, p, c] = exp(emissions[b, t, c]) * sum_A alpha_{t-1}[b, A, p] * exp(trigram[A, 1 + p, c])

each alpha_t divided by its sum (the logs of the sums add up to log Z; constants to autograd). It is
exact where the trigram spans at most ``SPAN`` nats: a path through a label whose exponential underflowed (more than 708 nats
below its token's best) differs from the best path's by at most 3 SPAN nats of trigram scores (the three
trigrams that read the label), so it weighs less than exp(3 SPAN - 708) = 1e-47 of the total, below
float64 rounding. Wider trigrams, or +inf and NaN, take the potentials' lanes of :mod:`.chain`.
Forbidden trigrams (-inf, :mod:`.constraints`) are exact zeros; the span is over the finite entries, and
since a path through an underflowed label may then have no allowed neighbour, the lane checks a
posteriori that no product which is not a structural zero underflowed (:func:`_no_underflow`); the
sentences it cannot vouch for go to the potentials' lanes. Gradients
(and the marginals, as the gradient of log Z) come from autograd through the recursion, which keeps
one (B, M+1, M) state per token. Viterbi runs in log space (max over A), exact at any scale.
"""
from typing import NamedTuple, Optional, Tuple

import numpy
import torch

from .chain_common import real_tokens
from .checks import Decoded, check_lengths, check_scores

Tensor = torch.Tensor
#: the widest trigram (max - min, nats) the exp-space lane takes (see the module's docstring)
SPAN = 200.0


class SecondOrderScores(NamedTuple):
    """emissions (B, N, M) and trigram (M+1, M+1, M); axis 0 and 1 of the trigram: y_{t-2} and y_{t-1}
    as 1 + label, 0 the start state."""

    emissions: Tensor
    trigram: Tensor

    def check(self, lengths) -> Tensor:
        """Validate shapes and dtypes; returns ``lengths`` as a long tensor."""
        check_scores(self.emissions, "emissions")
        if self.emissions.dim() != 3:
            raise ValueError(f"emissions must be (B, N, M), got {tuple(self.emissions.shape)}")
        batch, n, m = self.emissions.shape
        check_scores(self.trigram, "trigram")
        if tuple(self.trigram.shape) != (m + 1, m + 1, m) or self.trigram.dtype != self.emissions.dtype:
            raise ValueError(f"trigram must be {self.emissions.dtype} of shape {(m + 1, m + 1, m)}, got "
                             f"{self.trigram.dtype} {tuple(self.trigram.shape)}")
        return check_lengths(lengths, batch, n, self.emissions.device)

    def potentials(self, lengths: Optional[Tensor] = None) -> Tensor:
        """The order-2 potentials (B, N, M, M, M) of :mod:`.chain` (start state = index 0)."""
        E, W = self.emissions, self.trigram
        B, N, M = E.shape
        pot = E[:, :, None, None, :] + W[1:, 1:][None, None]  # a new tensor: written in below
        if N > 1:
            pot[:, 1] = (E[:, 1, None, :] + W[0, 1:])[:, None]
        pot[:, 0] = (E[:, 0] + W[0, 0])[:, None, None, :]
        return pot


def takes(scores: SecondOrderScores) -> bool:
    """Whether the exp-space lane takes these scores: a trigram without +inf or NaN whose finite entries
    (at least one) span at most ``SPAN`` nats."""
    W = scores.trigram.detach()
    if W.numel() == 0 or bool(W.isnan().any() | (W == torch.inf).any()):
        return False
    finite = W > -torch.inf
    if not bool(finite.any()):
        return False
    return float(W.max() - W[finite].min()) <= SPAN


def log_partition(scores: SecondOrderScores, lengths: Tensor, label_mask: Optional[Tensor] = None
                  ) -> Tuple[Tensor, Tensor]:
    """log Z (B,) by the exp-space recursion (the caller checks :func:`takes`) and the sentences (B,) bool
    it is exact for (the others' log Z is to be redone on the potentials); ``label_mask`` (B, N, M)
    restricts each token's labels. A sentence no label sequence fits gets -inf; length 0 gets 0."""
    E, W = scores.emissions.to(torch.float64), scores.trigram.to(torch.float64)
    B, N, M = E.shape
    lengths = lengths.to(E.device)
    if label_mask is not None:
        E = E.masked_fill(~label_mask.to(E.device), -torch.inf)
    if N == 0 or B == 0:
        return scores.emissions.new_zeros(B), torch.ones(B, dtype=torch.bool, device=E.device)
    real = real_tokens(lengths, N)
    top = E.detach().max(-1, keepdim=True).values  # (B, N, 1); the shifts are constants to autograd
    possible = (torch.isfinite(top[..., 0]) | ~real).all(-1)  # a real token without a finite label: -inf
    top = torch.where(torch.isfinite(top), top, torch.zeros_like(top))
    X = torch.exp(E - top)  # (B, N, M), 0 where masked
    w_top = W.detach().max()
    expW = torch.exp(W - w_top)  # (M+1, M+1, M), 0 where forbidden
    into = expW[:, 1:].permute(1, 0, 2)  # (p, A, c): the step into token t >= 1
    first = X[:, 0] * expW[0, 0]  # (B, M)
    total = first.sum(-1)
    dead = real[:, 0] & (total == 0)  # no allowed label sequence (forbidden trigrams, not only masks)
    safe = torch.where(total > 0, total, torch.ones_like(total)).detach()
    log_z = top[:, 0, 0] + w_top + torch.log(safe)
    state = torch.cat([first[:, None] / safe[:, None, None], E.new_zeros(B, M, M)], 1)  # (B, A, p)
    structural = bool((W == -torch.inf).any())  # forbidden trigrams: check for underflow (_no_underflow)
    lows = [_smallest_term(state.detach())] if structural else []
    for t in range(1, N):
        alive = real[:, t]
        new = torch.bmm(state.permute(2, 0, 1), into).permute(1, 0, 2) * X[:, t, None, :]  # (B, p, c)
        total = new.sum((1, 2))
        ok = alive & (total > 0)
        dead = dead | (alive & (total == 0))
        safe = torch.where(ok, total, torch.ones_like(total)).detach()
        log_z = log_z + torch.where(ok, top[:, t, 0] + w_top + torch.log(safe), torch.zeros_like(total))
        next_state = torch.cat([E.new_zeros(B, 1, M), new / safe[:, None, None]], 1)
        state = torch.where(ok[:, None, None], next_state, state)
        if structural:
            lows.append(_smallest_term(state.detach()))
    # the last state sums to 1; its sum carries the gradient (the scales are constants to autograd, so that
    # a state no allowed sequence continues gets exactly 0, with no cancellation through the divisions)
    final = state.sum((1, 2))
    log_z = log_z + torch.log(torch.where(final > 0, final, torch.ones_like(final)))
    log_z = torch.where(lengths > 0, log_z, torch.zeros_like(log_z))
    log_z = torch.where(possible & ~dead, log_z, torch.full_like(log_z, -torch.inf))
    exact = _no_underflow(E.detach(), top, W.detach(), torch.stack(lows, 1), real) if structural else (
        torch.ones(B, dtype=torch.bool, device=E.device))
    return log_z.to(scores.emissions.dtype), exact


def _smallest_term(state: Tensor) -> Tensor:
    """The smallest nonzero entry (B,) of a state (B, M+1, M) (+inf where all are 0)."""
    return torch.where(state > 0, state, torch.inf).flatten(1).amin(1)


def _no_underflow(E: Tensor, top: Tensor, W: Tensor, lows: Tensor, real: Tensor) -> Tensor:
    """(B,) bool: no product of the recursion that is not a structural zero fell below 4 times float64's
    smallest normal number (so every value is exact to float64's rounding; a reachable state cannot have
    underflowed to 0). The argument of the module docstring does not hold under forbidden (-inf)
    trigrams: a path through an underflowed label may have no allowed neighbour. A product at token t is
    at least low_{t-1} * exp(min W - max W) * exp(min e_t - max e_t) (finite entries; low_{t-1} the
    smallest nonzero entry of the state before t, 1 before token 0; ``lows`` (B, N) those after each token)."""
    floor = float(torch.log(torch.tensor(4 * torch.finfo(torch.float64).tiny, dtype=torch.float64)))
    finite = W > -torch.inf
    low_w = float(W[finite].min() - W.max())
    low_e = torch.where(E > -torch.inf, E - top, torch.zeros_like(E)).amin(-1)  # (B, N)
    low_state = lows.log()
    before = torch.cat([low_state.new_zeros(low_state.shape[0], 1), low_state[:, :-1]], 1)
    return (torch.where(real, before + low_w + low_e, 0.0) >= floor).all(1)


def marginals(scores: SecondOrderScores, lengths: Tensor, label_mask: Optional[Tensor] = None
              ) -> Tuple[Tensor, Tensor]:
    """P(y_t = c) (B, N, M), the gradient of :func:`log_partition` with respect to the emissions (0 beyond
    ``lengths`` and for sentences without a possible labelling), and the sentences (B,) it is exact for."""
    with torch.enable_grad():
        E = scores.emissions.detach().requires_grad_(True)
        log_z, exact = log_partition(SecondOrderScores(E, scores.trigram.detach()), lengths, label_mask)
        finite = torch.isfinite(log_z)
        if not bool(finite.any()):
            return torch.zeros_like(E), exact
        (grad,) = torch.autograd.grad(log_z[finite].sum(), E)
    return grad, exact


def score(scores: SecondOrderScores, labels: Tensor, lengths: Tensor) -> Tensor:
    """The score (B,) of ``labels`` (B, N): emissions plus trigrams over each sentence's real tokens."""
    E, W = scores.emissions, scores.trigram
    B, N, M = E.shape
    labels = labels.to(E.device)
    real = real_tokens(lengths.to(E.device), N)
    states = torch.cat([labels.new_zeros(B, 2), labels + 1], 1)  # 0 0 (start) then 1 + y
    emitted = E.gather(-1, labels[..., None])[..., 0]
    table = W[states[:, :-2], states[:, 1:-1], labels]
    return torch.where(real, emitted + table, 0.0).sum(1)  # padding may read -inf


def viterbi(scores: SecondOrderScores, lengths: Tensor, label_mask: Optional[Tensor] = None) -> Decoded:
    """Best labels (B, N) and score (B,) in log space (max over the oldest label per token), with
    back-pointers; heads None. A sentence without a possible labelling gets score -inf and labels 0."""
    E, W = scores.emissions.detach(), scores.trigram.detach()
    B, N, M = E.shape
    if label_mask is not None:
        E = E.masked_fill(~label_mask.to(E.device), -torch.inf)
    labels = numpy.zeros((B, max(N, 1)), dtype="int64")
    if N == 0 or B == 0:
        return Decoded(torch.zeros(B, max(N, 1), dtype=torch.long, device=E.device), None, E.new_zeros(B))
    lengths_np = lengths.cpu().numpy()
    into = W[:, 1:][None]  # (1, A, p, c)
    delta = torch.full((B, M + 1, M), -torch.inf, dtype=E.dtype, device=E.device)
    delta[:, 0] = E[:, 0] + W[0, 0]
    pointers = []
    finals = {int(b): delta[b] for b in numpy.flatnonzero(lengths_np == 1)}  # (A, y_{n-1}) at each last token
    for t in range(1, N):
        best, arg = (delta[:, :, :, None] + into).max(1)  # (B, p, c): best A for y_{t-1} = p, y_t = c
        pointers.append(arg)
        delta = torch.cat([delta.new_full((B, 1, M), -torch.inf), best + E[:, t, None, :]], 1)
        finals.update({int(b): delta[b] for b in numpy.flatnonzero(lengths_np == t + 1)})
    pointers = torch.stack(pointers).cpu().numpy() if pointers else None  # (N-1, B, M, M)
    best_scores = torch.full((B,), -torch.inf, dtype=E.dtype, device=E.device)
    for b in range(B):
        n = int(lengths_np[b])
        if n == 0:
            best_scores[b] = 0.0
            continue
        flat = finals[b].reshape(-1)
        k = int(flat.argmax())
        if not bool(torch.isfinite(flat[k])):
            continue  # no possible labelling: score -inf, labels 0
        best_scores[b] = flat[k]
        A, last = divmod(k, M)
        labels[b, n - 1] = last
        if n > 1:
            labels[b, n - 2] = A - 1
        for t in range(n - 1, 1, -1):  # y_{t-2} from the pointer of token t
            labels[b, t - 2] = pointers[t - 1, b, labels[b, t - 1], labels[b, t]] - 1
    return Decoded(torch.from_numpy(labels).to(E.device), None, best_scores)
