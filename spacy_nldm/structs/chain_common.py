"""What :mod:`.chain` and its fast lanes (:mod:`.chain_bounded`, :mod:`.chain_factored`, :mod:`.chain_second`)
share. It imports none of them, and the lanes do not import :mod:`.chain`."""
import torch

Tensor = torch.Tensor


def real_tokens(lengths: Tensor, n: int) -> Tensor:
    """(B, N) bool: token t is within its sentence."""
    return torch.arange(n, device=lengths.device)[None, :] < lengths[:, None]


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


def theta(dtype: torch.dtype) -> float:
    """log THETA, the smallest sum an exp-space step trusts: the square root of the smallest normal
    number, so that the mass lost to underflow (at most one smallest normal per term) is negligible next
    to it. -log THETA is 43.7 nats in float32, 354 in float64."""
    return 0.5 * float(torch.log(torch.tensor(torch.finfo(dtype).tiny, dtype=torch.float64)))
