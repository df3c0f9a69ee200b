"""What :mod:`.chain` and its fast lanes (:mod:`.chain_bounded`, :mod:`.chain_checked`,
:mod:`.chain_factored`) share. It imports none of them, and the lanes do not import :mod:`.chain`."""
from typing import NamedTuple

import torch

Tensor = torch.Tensor


class Logs(NamedTuple):
    """Log values ``rel + shift[..., None]`` of alpha or beta: ``rel`` (B, T, S), each token's maximum 0
    (-inf throughout where no state is reachable), and ``shift`` (B, T) the per-token offsets.

    The shifts grow with the position (t times the scores' scale), so in float32 absolute values would
    round by an ulp of t * std (5e-4 at std 300, t = 30); the marginals of token t depend only on
    differences within it, and are formed from the relative values, which round by an ulp of the scores'
    own size."""

    rel: Tensor
    shift: Tensor

    def index_copy(self, rows: Tensor, other: "Logs") -> "Logs":
        return Logs(self.rel.index_copy(0, rows, other.rel), self.shift.index_copy(0, rows, other.shift))


def real_tokens(lengths: Tensor, n: int) -> Tensor:
    """(B, N) bool: token t is within its sentence."""
    return torch.arange(n, device=lengths.device)[None, :] < lengths[:, None]


def running_sums(steps: Tensor, backward: bool = False) -> Tensor:
    """(B, T, ...) per-step offsets -> (B, T+1, ...) the offset of each token's values: forward, the sum of
    the steps up to it (0 before the first); backward, of the steps after it (0 after the last)."""
    zero = torch.zeros_like(steps[:, :1])
    if backward:
        return torch.cat([steps.flip(1).cumsum(1).flip(1), zero], 1)
    return torch.cat([zero, steps.cumsum(1)], 1)


def as_steps(potentials: Tensor) -> Tensor:
    """(B, N, M[, M], M) -> (B, N, A, P, C): A the oldest label of the state, P the rest (1 for order 1)."""
    batch, n = potentials.shape[:2]
    m = potentials.shape[-1]
    p = m ** (potentials.dim() - 4)
    return potentials.reshape(batch, n, m, p, m)


def start_state(batch: int, size: int, like: Tensor) -> Tensor:
    """log alpha before token 0, (B, S): the start state (index 0) has log value 0, the others -inf."""
    alpha = like.new_full((batch, size), float("-inf"))
    alpha[:, 0] = 0.0
    return alpha


def identity(m: int, p: int, like: Tensor) -> Tensor:
    """Potentials (A, P, C) of a token that changes nothing (a padding token): 0 where the new label c
    repeats the newest label of the state (a for order 1, p for order 2), -inf elsewhere."""
    keep = torch.eye(m, dtype=torch.bool, device=like.device)
    keep = keep.reshape(m, 1, m) if p == 1 else keep.reshape(1, m, m)
    zero = torch.zeros((), dtype=like.dtype, device=like.device)
    return torch.where(keep, zero, float("-inf"))


def theta(dtype: torch.dtype) -> float:
    """log THETA, the smallest sum an exp-space step trusts: the square root of the smallest normal
    number, so that the mass lost to underflow (at most one smallest normal per term) is negligible next
    to it. -log THETA is 43.7 nats in float32, 354 in float64."""
    return 0.5 * float(torch.log(torch.tensor(torch.finfo(dtype).tiny, dtype=torch.float64)))
