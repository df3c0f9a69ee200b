"""Arc scores as the tree algorithm reads them: one span width at a time, masked, from the dense
(B, N+1, N+1, M, M) tensor or from :class:`DirectionalScores`."""
from typing import Optional, Tuple

import torch

from .semiring import NEG

Tensor = torch.Tensor


def _diagonals(scores: Tensor, w: int) -> Tuple[Tensor, Tensor]:
    """Views of the arcs of the spans of width w, [label of start, label of end] layout, (B, S, M, M)."""
    arc_right = scores.diagonal(offset=w, dim1=1, dim2=2).permute(0, 3, 1, 2)  # start -> end
    arc_left = scores.diagonal(offset=-w, dim1=1, dim2=2).permute(0, 3, 2, 1)  # end -> start
    return arc_right, arc_left


class DirectionalScores:
    """Arc scores that depend on the dependent, the arc's direction and the two labels only,
    not on the head's position: ``F[b, d-1, 0, a, c]`` scores every arc h -> d with h < d and
    ``F[b, d-1, 1, a, c]`` every arc with h > d, head label ``a - 1`` (``a = 0``: the root, only
    for direction 0) and dependent label c; shape (B, N, 2, M+1, M).

    :func:`log_partition` accepts it in place of the dense (B, N+1, N+1, M, M) tensor, which it
    equals after expansion; the arcs are then read, and their gradients written, in this compact
    form, so no O(n^2 M^2) arc tensor or gradient is ever allocated.
    """

    def __init__(self, F: Tensor):
        if F.dim() != 5 or F.shape[2] != 2 or F.shape[3] != F.shape[4] + 1:
            raise ValueError(f"directional scores must have shape (B, N, 2, M+1, M), got {tuple(F.shape)}")
        self.F = F

    @property
    def shape(self) -> Tuple[int, int, int, int, int]:
        """The shape of the dense arc tensor these scores stand for."""
        B, N, _, _, M = self.F.shape
        return (B, N + 1, N + 1, M, M)


class ArcScores:
    """The arc scores and their allowed arcs (B, N+1, N+1), read one span width at a time.

    Masks are applied per width, so that only the widths the algorithm reads are touched (with
    ``max_dist``, O(n k M^2) rather than O(n^2 M^2)). Disallowed arcs, padding and -inf read as NEG.
    ``tensor`` is what gradients are taken with respect to; subclasses say how width w is stored.
    """

    def __init__(self, tensor: Tensor, allowed: Tensor, shape: Tuple[int, ...]):
        self.tensor, self.allowed, self.shape = tensor, allowed, shape  # shape: of the dense (B, N+1, N+1, M, M)
        self.neg = torch.full((), NEG, dtype=tensor.dtype, device=tensor.device)

    def detach(self) -> "ArcScores":
        return type(self)(self.tensor.detach(), self.allowed, self.shape)

    def raw(self, w: int, tensor: Tensor) -> Tuple[Tensor, Tensor]:
        """Unmasked right and left arcs of width w read from ``tensor``, (B, S, M, M) each."""
        raise NotImplementedError

    def scatter(self, grad: Tensor, w: int, grad_right: Tensor, grad_left: Tensor) -> None:
        """Add gradients of the width-w arcs (as ``raw`` lays them out) into ``grad`` (like ``tensor``)."""
        raise NotImplementedError

    def width(self, w: int, tensor: Optional[Tensor] = None) -> Tuple[Tensor, Tensor]:
        raw = self.raw(w, self.tensor if tensor is None else tensor)
        return tuple(torch.where(ok, arc.clamp_min(NEG), self.neg) for arc, ok in zip(raw, self._ok(w)))

    def exp_width(self, w: int) -> Optional[Tuple[Tuple[Tensor, Tensor], Tuple[Tensor, Tensor]]]:
        """The masked arcs of width w in exp space, per direction (e (B, S, M, M), m (B, S)) with
        arc = log(e) + m (a disallowed span: e = 1, m = NEG), where that saves work: None here
        (dense arcs would need one exp per arc and width, as the log-space path does)."""
        return None

    def add_grad(self, grad: Tensor, w: int, grad_right: Tensor, grad_left: Tensor) -> None:
        """Add gradients w.r.t. the masked arcs of width w into ``grad`` (like ``tensor``).

        Disallowed arcs get none. Arcs clamped to NEG (-inf scores) need no mask: their share of
        every item underflows to exactly 0 whenever the sentence has a structure of finite score.
        """
        self.scatter(grad, w, *(torch.where(ok, g, 0.0) for ok, g in zip(self._ok(w), (grad_right, grad_left))))

    def _ok(self, w: int) -> Tuple[Tensor, Tensor]:
        return (
            self.allowed.diagonal(offset=w, dim1=1, dim2=2)[..., None, None],
            self.allowed.diagonal(offset=-w, dim1=1, dim2=2)[..., None, None],
        )


class DenseArcs(ArcScores):
    """Arcs of a dense (B, N+1, N+1, M, M) score tensor: its diagonals."""

    def raw(self, w: int, tensor: Tensor) -> Tuple[Tensor, Tensor]:
        return _diagonals(tensor, w)

    def scatter(self, grad: Tensor, w: int, grad_right: Tensor, grad_left: Tensor) -> None:
        for target, g in zip(_diagonals(grad, w), (grad_right, grad_left)):
            target.add_(g)


class DirectionalArcs(ArcScores):
    """Arcs of :class:`DirectionalScores` F (B, N, 2, M+1, M): the right arcs of width w are
    F[:, w-1, 0, :M] from the root (only its row 0 is ever used) and F[:, w:, 0, 1:] from tokens;
    the left arcs are F[:, :N-w, 1, 1:] transposed (span start 0, the root, is never a dependent)."""

    def raw(self, w: int, tensor: Tensor) -> Tuple[Tensor, Tensor]:
        B, N, _, _, M = tensor.shape
        right = torch.cat([tensor[:, w - 1 : w, 0, :M], tensor[:, w:, 0, 1:]], dim=1)
        into_root = tensor.new_zeros(B, 1, M, M)
        left = torch.cat([into_root, tensor[:, : N - w, 1, 1:].transpose(-1, -2)], dim=1)
        return right, left

    def exp_width(self, w: int) -> Tuple[Tuple[Tensor, Tensor], Tuple[Tensor, Tensor]]:
        """As :meth:`ArcScores.exp_width`, from exponentials of F taken once for all widths."""
        if not hasattr(self, "_exp"):
            F = self.tensor.clamp_min(NEG)
            tok_top = F[:, :, :, 1:].amax((-1, -2))  # (B, N, 2): token heads
            root_top = F[:, :, 0, 0].amax(-1)  # (B, N): the root as head
            self._exp = (
                torch.exp(F[:, :, :, 1:] - tok_top[..., None, None]), tok_top,
                torch.exp(F[:, :, 0, 0] - root_top[..., None]), root_top,
            )
        tok, tok_top, root, root_top = self._exp
        B, N, _, M, _ = tok.shape
        right = torch.cat([root[:, w - 1 : w, None, :].expand(B, 1, M, M), tok[:, w:, 0]], dim=1)
        right_top = torch.cat([root_top[:, w - 1 : w], tok_top[:, w:, 0]], dim=1)
        left = torch.cat([tok.new_ones(B, 1, M, M), tok[:, : N - w, 1].transpose(-1, -2)], dim=1)
        left_top = torch.cat([tok_top.new_full((B, 1), NEG), tok_top[:, : N - w, 1]], dim=1)
        ok_right, ok_left = self._ok(w)
        return tuple(
            (torch.where(ok, e, 1.0), torch.where(ok[..., 0, 0], top, NEG))
            for e, top, ok in ((right, right_top, ok_right), (left, left_top, ok_left))
        )

    def scatter(self, grad: Tensor, w: int, grad_right: Tensor, grad_left: Tensor) -> None:
        N = grad.shape[1]
        grad[:, w - 1, 0, 0].add_(grad_right[:, 0, 0])  # root -> w: the root's label is 0
        grad[:, w:, 0, 1:].add_(grad_right[:, 1:])
        grad[:, : N - w, 1, 1:].add_(grad_left[:, 1:].transpose(-1, -2))
