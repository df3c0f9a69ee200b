"""Input checks shared by the tree and the chains, and the result type of decoding.

Conventions: scores are float32 or float64 (half precision is refused: its range of 65504 cannot hold
the sums of a sentence's scores); ``lengths`` is an integer tensor (B,); ``-inf`` is a legal score (an
impossible arc or label) and ``+inf`` or NaN at a position that is read is an error, reported with the
sentence and position by :func:`raise_if_not_finite`.
"""
from typing import NamedTuple, Optional

import torch

Tensor = torch.Tensor


class Decoded(NamedTuple):
    """The best structure of each sentence, as every decoder here and in :mod:`spacy_nldm.models` returns it.

    ``labels`` (B, N): label ids of tokens 1..N; ``heads`` (B, N): head positions 0..N (0 = the root),
    None for the chains; ``score`` (B,): the structure's score (``-inf`` for an impossible sentence).
    Labels and heads are 0 beyond ``lengths`` and for impossible sentences.
    """

    labels: Tensor
    heads: Optional[Tensor]
    score: Tensor


def check_scores(scores: Tensor, name: str = "scores") -> None:
    if not isinstance(scores, Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(scores).__name__}")
    if scores.dtype not in (torch.float32, torch.float64):
        raise ValueError(
            f"{name} must be float32 or float64, got {scores.dtype} (half precision cannot hold a sentence's "
            f"summed scores: convert with .float())"
        )


def check_lengths(lengths, batch: int, most: int, device) -> Tensor:
    """``lengths`` as a long tensor on ``device``; a clear error unless it is an integer tensor (B,) in 0..most."""
    if not isinstance(lengths, Tensor):
        raise TypeError(f"lengths must be an integer torch.Tensor of shape ({batch},), got {type(lengths).__name__}")
    if lengths.is_floating_point() or lengths.is_complex() or lengths.dtype == torch.bool:
        raise TypeError(f"lengths must be an integer tensor, got {lengths.dtype}")
    if lengths.shape != (batch,):
        raise ValueError(f"lengths must have shape ({batch},), got {tuple(lengths.shape)}")
    if batch and (int(lengths.min()) < 0 or int(lengths.max()) > most):
        raise ValueError(f"lengths must lie in 0..{most}, got {lengths.tolist()}")
    return lengths.to(device=device, dtype=torch.long)


def check_label_mask(label_mask: Optional[Tensor], shape: tuple) -> Optional[Tensor]:
    if label_mask is None:
        return None
    if not isinstance(label_mask, Tensor) or tuple(label_mask.shape) != tuple(shape):
        got = tuple(label_mask.shape) if isinstance(label_mask, Tensor) else type(label_mask).__name__
        raise ValueError(f"label_mask must have shape {tuple(shape)}, got {got}")
    return label_mask.to(dtype=torch.bool)


def raise_if_not_finite(result: Tensor, bad_position) -> None:
    """Raise a ValueError if some sentence's result is +inf or NaN. ``bad_position(b)`` names the first
    +inf or NaN score that sentence ``b`` reads (a string), and is called only when there is one."""
    if bool(torch.isfinite(result).all()):
        return
    bad = torch.isnan(result) | (result == float("inf"))
    if bool(bad.any()):
        b = int(bad.nonzero()[0, 0])
        raise ValueError(f"sentence {b}: {bad_position(b)}; scores must be finite or -inf where they are read")
