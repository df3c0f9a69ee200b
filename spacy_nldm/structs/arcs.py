"""Arc scores as the tree algorithm reads them: one span width at a time, masked, from the dense
(B, N+1, N+1, M, M) tensor or from :class:`DirectionalScores`.

For width w the spans are (s, s+w), s = 0..N-w, and a stage reads two (B, S, M, M) tensors indexed
[label of the start, label of the end]: ``right`` (arc s -> s+w) and ``left`` (arc s+w -> s). An arc
is allowed when both ends are within the sentence, it does not point into the root and ``arc_mask``
allows it; disallowed arcs read as -inf (whatever the scores hold there, NaN included).
"""
from typing import NamedTuple, Optional, Tuple

import torch

from .semiring import exp_

Tensor = torch.Tensor


class DirectionalScores:
    """Arc scores that depend on the dependent, the arc's direction and the two labels only,
    not on the head's position: ``F[b, d-1, 0, a, c]`` scores every arc h -> d with h < d and
    ``F[b, d-1, 1, a, c]`` every arc with h > d, head label ``a - 1`` (``a = 0``: the root, only
    for direction 0) and dependent label c; shape (B, N, 2, M+1, M).

    ``distance_bias`` (2, K), optional: ``distance_bias[x, w-1]`` is added to every arc between two
    tokens of length w (``|h - d| = w``) and direction x, the last column to arcs of length K and more;
    arcs from the root get none. It is differentiable like F (:func:`~.tree.log_partition` gives its
    gradient, the expected number of arcs of each direction and length). Or (2, K, M, M), a score per
    direction, length and label pair: ``distance_bias[x, w-1, a, c]`` is added to such an arc when its
    head carries label a and its dependent label c (its gradient: the expected number of those arcs).

    :func:`~.tree.log_partition`, :func:`~.tree.viterbi` and :func:`~.tree.marginals` accept it in
    place of the dense (B, N+1, N+1, M, M) tensor, which it equals after expansion (plus
    :func:`distance_bias_matrix`); the arcs are then read, and their gradients written, in this compact
    form, so no O(n^2 M^2) tensor is allocated.

    ``token_independent = True`` is the caller's statement that every token's scores are one emission row
    plus one shared table, ``F[b, d, x, a, c] = e[b, d, c] + table[x, a, c]`` (as the components' bilinear
    and emission_transition scorers make them). The compiled lane then reads ``e = F[:, :, 0, 1]`` and the
    table relative to it from the first real token, and exponentiates M numbers per token instead of
    2 (M+1) M; the results are those of F up to the rounding of F's entries (their last bit in float32).
    """

    def __init__(self, F: Tensor, distance_bias: Optional[Tensor] = None, token_independent: bool = False):
        if not isinstance(F, Tensor) or F.dim() != 5 or F.shape[2] != 2 or F.shape[3] != F.shape[4] + 1:
            shape = tuple(F.shape) if isinstance(F, Tensor) else type(F).__name__
            raise ValueError(f"directional scores must have shape (B, N, 2, M+1, M), got {shape}")
        if distance_bias is not None and not _bias_shape_ok(distance_bias, F.shape[-1]):
            shape = tuple(distance_bias.shape) if isinstance(distance_bias, Tensor) else type(distance_bias).__name__
            raise ValueError(f"distance_bias must have shape (2, K) or (2, K, M, M), K >= 1, M = {F.shape[-1]} "
                             f"(the labels), got {shape}")
        self.F = F
        self.distance_bias = distance_bias
        self.token_independent = bool(token_independent)

    @property
    def shape(self) -> Tuple[int, int, int, int, int]:
        """The shape of the dense arc tensor these scores stand for."""
        B, N, _, _, M = self.F.shape
        return (B, N + 1, N + 1, M, M)


def _bias_shape_ok(bias, m: int) -> bool:
    """Whether ``bias`` is a (2, K) or a (2, K, m, m) tensor, K >= 1."""
    if not isinstance(bias, Tensor) or bias.dim() not in (2, 4) or bias.shape[0] != 2 or bias.shape[1] < 1:
        return False
    return bias.dim() == 2 or tuple(bias.shape[2:]) == (m, m)


def _bias_cells(n1: int, k: int, max_dist: Optional[int], device) -> Tuple[Tensor, Tensor, Tensor]:
    """(n1, n1) each, [h, d]: the offset d - h, the bias column of the arc h -> d (K = ``k`` columns), and
    whether the arc gets a bias (between tokens, at most ``max_dist`` long)."""
    positions = torch.arange(n1, device=device)
    offset = positions[None, :] - positions[:, None]  # d - h
    column = (offset.abs() - 1).clamp(0, k - 1)
    tokens = (positions[:, None] >= 1) & (positions[None, :] >= 1) & (offset != 0)
    if max_dist is not None:
        tokens = tokens & (offset.abs() <= max_dist)
    return offset, column, tokens


def distance_bias_matrix(distance_bias: Tensor, n1: int, max_dist: Optional[int] = None) -> Tensor:
    """(n1, n1) [h, d]: the bias of the arc h -> d between tokens (h, d >= 1) of length at most
    ``max_dist``, 0 elsewhere (root arcs, self-arcs, longer arcs); differentiable. A label-pair bias
    (2, K, M, M) gives (n1, n1, M, M) [h, d, label of h, label of d]."""
    offset, column, tokens = _bias_cells(n1, distance_bias.shape[1], max_dist, distance_bias.device)
    pair_axes = (None,) * (distance_bias.dim() - 2)  # a label-pair bias: the (M, M) axes to broadcast over
    bias = torch.where((offset > 0)[(...,) + pair_axes], distance_bias[0][column], distance_bias[1][column])
    return torch.where(tokens[(...,) + pair_axes], bias, 0.0)


def gather_distance_bias(distance_bias: Tensor, labels: Tensor, max_dist: Optional[int] = None) -> Tensor:
    """(B, N+1, N+1, K, K): the bias of each arc h -> d between tokens when h carries label
    ``labels[b, h, i]`` and d label ``labels[b, d, j]`` (``labels`` (B, N+1, K) label ids, row 0 the
    root's, whatever it holds), for a label-pair bias (2, K_b, M, M); 0 on the arcs that get none (as
    :func:`distance_bias_matrix`). Never builds the (N+1, N+1, M, M) matrix; differentiable."""
    offset, column, tokens = _bias_cells(labels.shape[1], distance_bias.shape[1], max_dist, labels.device)
    direction = (offset < 0).long()  # 0: head on the left
    bias = distance_bias[direction[None, :, :, None, None], column[None, :, :, None, None],
                         labels[:, :, None, :, None], labels[:, None, :, None, :]]
    return torch.where(tokens[None, :, :, None, None], bias, 0.0)


class WidthArcs(NamedTuple):
    """The arcs of the spans of one width, (B, S, M, M) each, [label of start, label of end]."""

    right: Tensor  # s -> s+w
    left: Tensor  # s+w -> s


class ArcScores:
    """Masked arcs of one width at a time; ``tensor`` is what gradients are taken with respect to.

    ``lengths`` (B,) long; ``arc_mask`` (B or 1, N+1, N+1) bool or None; ``bias`` a second differentiable
    input or None (:class:`DirectionalArcs`: the distance bias), whose gradient :meth:`scatter` sums into
    ``bias_grad``. Subclasses say how the arcs of width w are stored (:meth:`raw`) and how their
    gradients go back (:meth:`scatter`).
    """

    def __init__(self, tensor: Tensor, lengths: Tensor, arc_mask: Optional[Tensor], shape: Tuple[int, ...],
                 bias: Optional[Tensor] = None):
        self.tensor, self.lengths, self.arc_mask, self.shape, self.bias = tensor, lengths, arc_mask, shape, bias
        self.bias_grad: Optional[Tensor] = None

    def detach(self) -> "ArcScores":
        bias = None if self.bias is None else self.bias.detach()
        return type(self)(self.tensor.detach(), self.lengths, self.arc_mask, self.shape, bias)

    def raw(self, w: int, tensor: Tensor) -> WidthArcs:
        raise NotImplementedError

    def scatter(self, grad: Tensor, w: int, arcs: WidthArcs) -> None:
        raise NotImplementedError

    def new_grad(self, limit: int) -> Tensor:
        """A gradient like ``tensor`` for :meth:`add_grad` to fill, widths 1..limit: zeros (and
        ``bias_grad`` zeroed)."""
        self._zero_bias_grad()
        return torch.zeros_like(self.tensor)

    def _zero_bias_grad(self) -> None:
        self.bias_grad = None if self.bias is None else torch.zeros_like(self.bias)

    def allowed(self, w: int) -> WidthArcs:
        """(B, S) bool each: which arcs of width w exist."""
        n1 = self.shape[1]
        ends = torch.arange(w, n1, device=self.lengths.device)
        inside = ends[None, :] <= self.lengths[:, None]  # (B, S): s + w <= n_b
        right, left = inside, inside.clone()
        left[:, 0] = False  # never into the root
        if self.arc_mask is not None:
            right = right & self.arc_mask.diagonal(w, 1, 2)
            left = left & self.arc_mask.diagonal(-w, 1, 2)
        return WidthArcs(right, left)

    def width(self, w: int, tensor: Optional[Tensor] = None) -> WidthArcs:
        """The arcs of width w with disallowed ones at -inf, read from ``tensor`` (default: the scores)."""
        raw = self.raw(w, self.tensor if tensor is None else tensor)
        return WidthArcs(*(torch.where(ok[..., None, None], arc, float("-inf")) for arc, ok in zip(raw, self.allowed(w))))

    def attach(self, inner: Tensor, w: int) -> WidthArcs:
        """The incomplete items of width w: inner (B, S, M, M) plus the right and the left arcs."""
        arcs = self.width(w)
        return WidthArcs(inner + arcs.right, inner + arcs.left)

    def attach_exp(self, inner: Tensor, w: int, out: WidthArcs) -> WidthArcs:
        """:meth:`attach` in exp space: ``inner`` (B, S, M, M) [a, c] an exp-space factor of the inner items,
        writes inner * exp(arc - shift) into ``out.right`` ([a, c]) and ``out.left`` ([c, a], as the left
        incomplete chart stores them) and returns the shifts (B, S) each: the span's largest arc of that
        direction, so every arc factor is at most 1 (those below the smallest normal float are 0).
        Disallowed arcs give 0."""
        arcs = self.width(w)
        shifts = []
        for arc, target, transpose in ((arcs.right, out.right, False), (arcs.left, out.left, True)):
            top = arc.flatten(2).amax(-1).clamp_min_(torch.finfo(arc.dtype).min)
            factor = exp_(arc - top[..., None, None])
            if transpose:
                torch.mul(inner.transpose(-1, -2), factor.transpose(-1, -2), out=target)
            else:
                torch.mul(inner, factor, out=target)
            shifts.append(top)
        return WidthArcs(*shifts)

    def add_grad(self, grad: Tensor, w: int, arcs: WidthArcs) -> None:
        """Add the gradients of the masked arcs of width w into ``grad`` (made by :meth:`new_grad`, called
        once per width); disallowed arcs get none."""
        masked = (torch.where(ok[..., None, None], g, 0.0) for g, ok in zip(arcs, self.allowed(w)))
        self.scatter(grad, w, WidthArcs(*masked))


class DenseArcs(ArcScores):
    """Arcs of a dense (B, N+1, N+1, M, M) score tensor: its diagonals."""

    def raw(self, w: int, tensor: Tensor) -> WidthArcs:
        return _diagonals(tensor, w)

    def new_grad(self, limit: int) -> Tensor:
        """Each diagonal w = 1..limit is written once (:meth:`scatter` copies), so with every width
        only the main diagonal (self-arcs) needs zeros: no pass over the whole tensor."""
        self._zero_bias_grad()
        if limit < self.shape[1] - 1:
            return torch.zeros_like(self.tensor)
        grad = torch.empty_like(self.tensor)
        grad.diagonal(0, 1, 2).zero_()
        return grad

    def scatter(self, grad: Tensor, w: int, arcs: WidthArcs) -> None:
        for target, g in zip(_diagonals(grad, w), arcs):
            target.copy_(g)


def _diagonals(scores: Tensor, w: int) -> WidthArcs:
    """Views of the arcs of width w of a dense tensor, [label of start, label of end] layout."""
    right = scores.diagonal(offset=w, dim1=1, dim2=2).permute(0, 3, 1, 2)  # start -> end
    left = scores.diagonal(offset=-w, dim1=1, dim2=2).permute(0, 3, 2, 1)  # end -> start
    return WidthArcs(right, left)


class DirectionalArcs(ArcScores):
    """Arcs of :class:`DirectionalScores` F (B, N, 2, M+1, M): the right arcs of width w are
    F[:, w-1, 0, 0] from the root (row 0, the root's label; the other rows are never used) and
    F[:, w:, 0, 1:] from tokens; the left arcs are F[:, :N-w, 1, 1:] transposed (span start 0, the
    root, is never a dependent: its row is a placeholder). The distance bias (``bias``, (2, K) or
    (2, K, M, M)) of width w is added to the arcs between tokens (span starts 1 and up)."""

    @property
    def label_bias(self) -> bool:
        """Whether the distance bias depends on the arc's labels ((2, K, M, M))."""
        return self.bias is not None and self.bias.dim() == 4

    def width_bias(self, w: int) -> Optional[WidthArcs]:
        """The distance bias of the right and the left arcs of width w, or None: 0-dim tensors, or with
        label pairs (M, M) each, laid out as the arcs are ([label of start, label of end])."""
        if self.bias is None:
            return None
        column = min(w, self.bias.shape[1]) - 1
        left = self.bias[1, column]
        return WidthArcs(self.bias[0, column], left.transpose(-1, -2) if self.label_bias else left)

    def raw(self, w: int, tensor: Tensor) -> WidthArcs:
        B, N, _, _, M = tensor.shape
        bias = self.width_bias(w) or WidthArcs(0.0, 0.0)
        root = tensor[:, w - 1 : w, 0, 0, None, :].expand(B, 1, M, M)
        right = torch.cat([root, tensor[:, w:, 0, 1:] + bias.right], dim=1)
        left = torch.cat([root, tensor[:, : N - w, 1, 1:].transpose(-1, -2) + bias.left], dim=1)
        return WidthArcs(right, left)

    def width(self, w: int, tensor: Optional[Tensor] = None) -> WidthArcs:
        """As :meth:`ArcScores.width`, masking each piece straight into the result (no concatenation)."""
        tensor = self.tensor if tensor is None else tensor
        B, N, _, _, M = tensor.shape
        ok_right, ok_left = self.allowed(w)
        minus_inf = tensor.new_full((), float("-inf"))
        right, left = tensor.new_empty(B, N + 1 - w, M, M), tensor.new_empty(B, N + 1 - w, M, M)
        root = tensor[:, w - 1 : w, 0, 0, None, :].expand(B, 1, M, M)
        torch.where(ok_right[:, :1, None, None], root, minus_inf, out=right[:, :1])
        torch.where(ok_right[:, 1:, None, None], tensor[:, w:, 0, 1:], minus_inf, out=right[:, 1:])
        left[:, 0] = float("-inf")  # the root is never a dependent
        torch.where(ok_left[:, 1:, None, None], tensor[:, : N - w, 1, 1:].transpose(-1, -2), minus_inf, out=left[:, 1:])
        return self._add_bias(WidthArcs(right, left), w)

    def _add_bias(self, arcs: WidthArcs, w: int) -> WidthArcs:
        """Adds the distance bias of width w to the token spans (starts 1 and up) of ``arcs``, in place."""
        bias = self.width_bias(w)
        if bias is not None:
            arcs.right[:, 1:] += bias.right
            arcs.left[:, 1:] += bias.left
        return arcs

    def attach(self, inner: Tensor, w: int) -> WidthArcs:
        """inner + arcs in one pass per direction, without masks: the scores of dependents past each
        sentence's end are zeroed once (:meth:`clean`), and every arc that leaves the sentence meets an
        inner item of -inf (an item ending past the sentence), so it is -inf whatever its score."""
        if self.arc_mask is not None:
            return super().attach(inner, w)
        F = self.clean()
        B, N, _, _, M = F.shape
        right, left = torch.empty_like(inner), torch.empty_like(inner)
        torch.add(inner[:, :1], F[:, w - 1 : w, 0, 0, None, :], out=right[:, :1])  # root -> w
        torch.add(inner[:, 1:], F[:, w:, 0, 1:], out=right[:, 1:])  # s -> s+w
        left[:, 0] = float("-inf")  # the root is never a dependent
        torch.add(inner[:, 1:], F[:, : N - w, 1, 1:].transpose(-1, -2), out=left[:, 1:])  # s+w -> s
        return self._add_bias(WidthArcs(right, left), w)

    def attach_exp(self, inner: Tensor, w: int, out: WidthArcs) -> WidthArcs:
        """As :meth:`ArcScores.attach_exp`, from exponentials of F taken once per call (:meth:`exps`): a
        dependent's arcs are the same at every width, only the spans they belong to move. No masks, as
        in :meth:`attach`: an arc that leaves the sentence meets an inner factor of 0."""
        if self.arc_mask is not None or self.label_bias:  # (a label-pair bias: the arcs' own largest values)
            return super().attach_exp(inner, w, out)
        tokens, token_top, root, root_top = self.exps()
        N = tokens.shape[1]
        torch.mul(inner[:, :1], root[:, w - 1 : w, None, :], out=out.right[:, :1])  # root -> w (root label 0)
        torch.mul(inner[:, 1:], tokens[:, w:, 0], out=out.right[:, 1:])  # s -> s+w
        out.left[:, 0] = 0.0  # the root is never a dependent
        torch.mul(inner[:, 1:].transpose(-1, -2), tokens[:, : N - w, 1], out=out.left[:, 1:])  # s+w -> s, [c, a]
        right = torch.cat([root_top[:, w - 1 : w], token_top[:, w:, 0]], dim=1)
        left = torch.cat([token_top.new_full((token_top.shape[0], 1), torch.finfo(tokens.dtype).min),
                          token_top[:, : N - w, 1]], dim=1)
        return self._add_bias(WidthArcs(right, left), w)  # a constant per width: part of the shift

    def exps(self) -> Tuple[Tensor, Tensor, Tensor, Tensor]:
        """exp(F - shift) of the cleaned scores: the token rows (B, N, 2, M, M) with one shift (B, N, 2)
        per dependent and direction, and the root's row (B, N, M) with one shift (B, N) per dependent."""
        if getattr(self, "_exps", None) is None:
            F = self.clean()
            tokens, root = F[:, :, :, 1:], F[:, :, 0, 0]
            token_top = tokens.flatten(3).amax(-1).clamp_min_(torch.finfo(F.dtype).min)
            root_top = root.amax(-1).clamp_min_(torch.finfo(F.dtype).min)
            self._exps = (exp_(tokens - token_top[..., None, None]), token_top, exp_(root - root_top[..., None]), root_top)
        return self._exps

    def clean(self) -> Tensor:
        """F with the rows of dependents past each sentence's end at 0 (padding may hold NaN)."""
        if getattr(self, "_clean", None) is None:
            positions = torch.arange(1, self.tensor.shape[1] + 1, device=self.tensor.device)
            real = positions[None, :] <= self.lengths[:, None]
            self._clean = torch.where(real[:, :, None, None, None], self.tensor, 0.0)
        return self._clean

    def add_grad(self, grad: Tensor, w: int, arcs: WidthArcs) -> None:
        """Without an arc mask no mask is needed: an arc that :meth:`attach` left unmasked is part of an
        item of -inf, whose share of everything is exactly 0."""
        if self.arc_mask is not None:
            return super().add_grad(grad, w, arcs)
        self.scatter(grad, w, arcs)

    def scatter(self, grad: Tensor, w: int, arcs: WidthArcs) -> None:
        N = grad.shape[1]
        grad[:, w - 1, 0, 0].add_(arcs.right[:, 0, 0])  # root -> w: the root's label is 0
        grad[:, w:, 0, 1:].add_(arcs.right[:, 1:])
        grad[:, : N - w, 1, 1:].add_(arcs.left[:, 1:].transpose(-1, -2))
        if self.bias_grad is not None:  # every arc of width w between tokens carries the bias once
            column = min(w, self.bias_grad.shape[1]) - 1
            if self.label_bias:  # per label pair; the left arcs are laid out [label of d, label of h]
                self.bias_grad[0, column] += arcs.right[:, 1:].sum((0, 1))
                self.bias_grad[1, column] += arcs.left[:, 1:].sum((0, 1)).transpose(-1, -2)
            else:
                self.bias_grad[0, column] += arcs.right[:, 1:].sum()
                self.bias_grad[1, column] += arcs.left[:, 1:].sum()
