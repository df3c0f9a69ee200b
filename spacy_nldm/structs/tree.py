"""Labelled projective dependency trees over a label sequence: the NLDM's inside, Viterbi and marginals.

Conventions (shared by every public function here):

- ``scores[b, h, d, a, c]``, shape (B, N+1, N+1, M, M): score of the arc h -> d when the head h
  carries label a and the dependent d carries label c. Position 0 is the root; its label is
  index 0, so of the root's rows only ``scores[:, 0, :, 0, :]`` is read. Arcs into the root
  and self-arcs are never read.
- ``lengths[b]``: number of real tokens (positions 1..lengths[b]); scores beyond it are ignored.
- ``label_mask`` (B, N+1, M) bool: labels allowed at each position (row 0 is ignored).
- ``max_dist=k``: arcs longer than k are dropped, root arcs included; the incomplete items then
  exist only for spans of width <= k, which cuts the work from O(n^3 M^2) to O(n^2 k M^2).
- ``arc_mask`` (B or 1, N+1, N+1) bool: allowed arcs h -> d.

The recurrences are the labelled Eisner algorithm of DESIGN.md, evaluated in stages that are
vectorised over sentences and spans and generic in the semiring, so the same code gives log Z
(log semiring) and the best tree (max semiring):

- for widths w = 1..k (k = max_dist, or n): the incomplete items of width w, then the complete
  ones, all spans of that width at once;
- with max_dist, the right-complete spans wider than k row by row (start i from n-k-1 down to 0),
  every span end at once: they need only incomplete items of width <= k and rows below, so each
  row is one matrix product. Left-complete spans wider than k are never needed.

Complete items are stored [b, span start, span end, label], incomplete ones [b, span start, span
width, labels] up to width k (memory O(B n k M^2)); stages read strided views of these charts.
The backward pass goes over the same stages in reverse: an explicit outside pass for the log
semiring (marginals), a backtrack through the argmax recorded in the forward pass for Viterbi,
and, for any other semiring (the broadcast reference), one stage at a time recomputed under autograd.
"""
from typing import Optional, Tuple

import torch

from .semiring import NEG, LogSemiring, TracingMaxSemiring, decode

Tensor = torch.Tensor
Item = Tuple[Tensor, Optional[Tensor]]  # (value, shift) as made by Semiring.encode


def log_partition(
    scores: Tensor,
    lengths: Tensor,
    *,
    label_mask: Optional[Tensor] = None,
    max_dist: Optional[int] = None,
    arc_mask: Optional[Tensor] = None,
    semiring=LogSemiring,
) -> Tensor:
    """log of the sum over label sequences and projective trees of exp(tree score), shape (B,).

    With ``label_mask`` set to the gold labels this is log S(x, y); without it, log Z(x).
    Differentiable: its gradient with respect to ``scores`` is the arc marginals. ``semiring`` may be
    :class:`~.semiring.BroadcastLogSemiring`, the slow reference. ``scores`` may also be
    :class:`DirectionalScores` (the gradient then flows to its tensor ``F``).
    """
    arcs, base = _prepare(scores, lengths, label_mask, arc_mask)
    return _inside(semiring, arcs, base, lengths, max_dist)


def viterbi(
    scores: Tensor,
    lengths: Tensor,
    *,
    label_mask: Optional[Tensor] = None,
    max_dist: Optional[int] = None,
    arc_mask: Optional[Tensor] = None,
) -> Tuple[Tensor, Tensor, Tensor]:
    """Best joint (labels, tree): the paper's approximate MAP.

    Returns ``best`` (B,) its score, ``labels`` (B, N) label ids of tokens 1..N and
    ``heads`` (B, N) head positions in 0..N (0 = root); both are 0 beyond ``lengths``.
    """
    _check_dense(scores, "viterbi")
    with torch.enable_grad():
        leaf = scores.detach().requires_grad_(True)
        arcs, base = _prepare(leaf, lengths, label_mask, arc_mask)
        best = _inside(TracingMaxSemiring(), arcs, base, lengths, max_dist)
        (chosen,) = torch.autograd.grad(best.sum(), leaf)
    labels, heads = _structure(chosen, lengths)
    return best.detach(), labels, heads


def marginals(
    scores: Tensor,
    lengths: Tensor,
    *,
    label_mask: Optional[Tensor] = None,
    max_dist: Optional[int] = None,
    arc_mask: Optional[Tensor] = None,
) -> Tuple[Tensor, Tensor]:
    """Posterior marginals: ``arc`` like ``scores`` (P of arc h->d with labels a, c) and
    ``label`` (B, N, M), P(y_d = c | x) for tokens 1..N (0 beyond ``lengths``)."""
    _check_dense(scores, "marginals")
    with torch.enable_grad():
        leaf = scores.detach().requires_grad_(True)
        log_z = log_partition(leaf, lengths, label_mask=label_mask, max_dist=max_dist, arc_mask=arc_mask)
        (arc,) = torch.autograd.grad(log_z.sum(), leaf)
    label = arc.sum(dim=(1, 3))[:, 1:]
    return arc, label


def _check_dense(scores, name: str) -> None:
    if not isinstance(scores, Tensor):
        raise TypeError(f"{name} takes the dense (B, N+1, N+1, M, M) score tensor, got {type(scores).__name__}")


def count_trees(n: int, max_dist: Optional[int] = None) -> int:
    """Number of projective trees over n tokens with a free root (1, 3, 12, 55, 273, ...).

    Runs the inside algorithm on zero scores with one label, so it checks the recurrences too.
    """
    scores = torch.zeros(1, n + 1, n + 1, 1, 1, dtype=torch.float64)
    log_z = log_partition(scores, torch.tensor([n]), max_dist=max_dist)
    return int(round(float(log_z.exp())))


def _prepare(
    scores, lengths: Tensor, label_mask: Optional[Tensor], arc_mask: Optional[Tensor]
) -> Tuple["_ArcScores", Tensor]:
    """Check shapes; gather the arc masks and padding into ``_ArcScores``; build the base items (B, N+1, M).
    ``scores`` is the dense (B, N+1, N+1, M, M) tensor or :class:`DirectionalScores`."""
    source = _DirectionalArcs if isinstance(scores, DirectionalScores) else _DenseArcs
    if source is _DirectionalArcs:
        shape, scores = scores.shape, scores.F
    elif not isinstance(scores, Tensor):
        raise TypeError(f"scores must be a tensor or DirectionalScores, got {type(scores).__name__}")
    elif scores.dim() != 5 or scores.shape[1] != scores.shape[2] or scores.shape[3] != scores.shape[4]:
        raise ValueError(f"scores must have shape (B, N+1, N+1, M, M), got {tuple(scores.shape)}")
    else:
        shape = tuple(scores.shape)
    if not scores.is_floating_point():
        raise ValueError(f"scores must be a floating point tensor, got {scores.dtype}")
    batch, n1, _, n_labels, _ = shape
    lengths = torch.as_tensor(lengths, device=scores.device)
    if lengths.shape != (batch,):
        raise ValueError(f"lengths must have shape ({batch},), got {tuple(lengths.shape)}")
    if batch and (int(lengths.min()) < 0 or int(lengths.max()) > n1 - 1):
        raise ValueError(f"lengths must lie in 0..{n1 - 1} (the number of positions - 1), got {lengths.tolist()}")
    positions = torch.arange(n1, device=scores.device)
    real = positions[None, :] <= lengths[:, None]  # (B, N+1), the root included
    real_pair = real[:, :, None] & real[:, None, :]
    allowed = positions[None, :, None] != positions[None, None, :]
    allowed = allowed & (positions[None, None, :] != 0)  # no arc into the root
    if arc_mask is not None:
        if arc_mask.dim() != 3 or arc_mask.shape[0] not in (1, batch) or arc_mask.shape[1:] != (n1, n1):
            raise ValueError(f"arc_mask must have shape ({batch} or 1, {n1}, {n1}), got {tuple(arc_mask.shape)}")
        allowed = allowed & arc_mask.to(device=scores.device, dtype=torch.bool)
    neg = torch.full((), NEG, dtype=scores.dtype, device=scores.device)
    zero = torch.zeros((), dtype=scores.dtype, device=scores.device)

    if label_mask is None:
        label_ok = torch.ones(batch, n1, n_labels, dtype=torch.bool, device=scores.device)
    else:
        if label_mask.shape != (batch, n1, n_labels):
            raise ValueError(
                f"label_mask must have shape ({batch}, {n1}, {n_labels}), got {tuple(label_mask.shape)}"
            )
        label_ok = label_mask.to(device=scores.device, dtype=torch.bool).clone()
    label_ok[:, 0, :] = False
    label_ok[:, 0, 0] = True  # the root carries label 0
    # Every label choice of a position passes through its width-0 items, so masking them suffices.
    base = torch.where(label_ok, zero, neg)
    return source(scores, real_pair & allowed, shape), base


def _band(chart: Tensor, spans: int, count: int, start: int, end: int, start_step: int, end_step: int) -> Tensor:
    """Strided view V[b, s, k, ...] = chart[b, s + start + k * start_step, s + end + k * end_step, ...]
    for s < spans, k < count, of a chart (B, N+1, N+1, ...) indexed [span start, span end]."""
    sb, si, sj = chart.stride()[:3]
    return chart.as_strided(
        (chart.shape[0], spans, count, *chart.shape[3:]),
        (sb, si + sj, start_step * si + end_step * sj, *chart.stride()[3:]),
        chart.storage_offset() + start * si + end * sj,
    )


def _padded_zeros(like: Tensor, shape: Tuple[int, ...]) -> Tensor:
    """Zeros of ``shape`` (B, ...) with one zero slab of shape[1:] before and after it in memory,
    so that strided views may run a little past either end of the chart (they read zeros)."""
    return like.new_zeros((shape[0] + 2,) + tuple(shape[1:]))[1:-1]


class _Charts:
    """The four charts of the labelled Eisner algorithm: right = CR (head at the start), left = CL
    (head at the end), indexed [b, span start, span end, label]; inc_right = IR (arc start -> end)
    and inc_left = IL (arc end -> start) up to width ``limit`` (wider ones do not exist).

    The incomplete charts are laid out so that the items a complete span sums over form one
    contiguous run per head label: IR[i, i+w, a, c] is stored at [b, i, a, w-1, c] and
    IL[i, i+w, a, c] at [b, i+w, c, limit-w, a]. :meth:`bands` and :meth:`cells` hide this and
    return views indexed [.., label of start, label of end].

    Values are stored as the semiring encodes them; ``*_shift`` charts (the same without the label
    axes) exist for the log semiring only.
    """

    names = ("right", "left", "inc_right", "inc_left")

    def __init__(self, shape: Tuple[int, ...], limit: int, like: Tensor, with_shift: bool, zeros: bool = True):
        """Charts for dense scores of ``shape`` (B, N+1, N+1, M, M), dtype and device of ``like``.
        With ``zeros=False`` they are left uninitialised: the stages read only cells that an
        earlier stage wrote (span end >= start, width <= limit)."""
        batch, n1, _, m, _ = shape
        alloc = like.new_zeros if zeros else like.new_empty
        for name in ("right", "left"):  # small: zeroed and padded for the outside pass's views
            setattr(self, name, _padded_zeros(like, (batch, n1, n1, m)))
            setattr(self, name + "_shift", _padded_zeros(like, (batch, n1, n1)) if with_shift else None)
        self.limit = limit
        for name in ("inc_right", "inc_left"):
            setattr(self, name, alloc((batch, n1, m, limit, m)))
            setattr(self, name + "_shift", alloc((batch, n1, limit)) if with_shift else None)

    def set_base(self, base: Item) -> None:
        """Width-0 items CR[i, i] = CL[i, i] from the encoded base (B, N+1, M)."""
        value, shift = base
        for name in ("right", "left"):
            getattr(self, name).diagonal(0, 1, 2).copy_(value.transpose(1, 2))
            if shift is not None:
                getattr(self, name + "_shift").diagonal(0, 1, 2).copy_(shift)

    def bands(self, stage: str, key: int, limit: int, shift: bool = False) -> dict:
        """The chart regions that a stage reads (views). ``key`` is the span width of an
        "incomplete" or "complete" stage and the span start (row) of a "row" stage."""
        sfx = "_shift" if shift else ""
        right, left = getattr(self, "right" + sfx), getattr(self, "left" + sfx)
        inc_right, inc_left = getattr(self, "inc_right" + sfx), getattr(self, "inc_left" + sfx)
        if stage == "row":  # (B, K, ...): IR[i, i+d] and CR[i+d, j] for d = 1..K, j = i+K+1..N
            i = key
            ir = inc_right[:, i, :limit] if shift else inc_right[:, i].transpose(1, 2)
            return {"ir": ir, "cr": right[:, i + 1 : i + limit + 1, i + limit + 1 :]}
        w = key
        spans = right.shape[1] - w
        if stage == "incomplete":  # (B, S, w, ...)
            return {
                "cr": _band(right, spans, w, 0, 0, 0, 1),  # CR[s, s+k], k = 0..w-1
                "cl": _band(left, spans, w, 1, w, 1, 0),  # CL[s+k+1, s+w]
            }
        complete = {  # complete, w <= limit: (B, S, w, ...)
            "cr": _band(right, spans, w, 1, w, 1, 0),  # CR[s+d, s+w]
            "cl": _band(left, spans, w, 0, 0, 0, 1),  # CL[s, s+e]
        }
        if self.limit == 0:  # charts made without incomplete items
            return complete
        top = self.limit
        if shift:
            ir, il = inc_right[:, :spans, :w], inc_left[:, w : w + spans, top - w : top]
        else:
            ir = inc_right[:, :spans, :, :w].transpose(2, 3)
            il = inc_left[:, w : w + spans, :, top - w : top].permute(0, 1, 3, 4, 2)
        return {"ir": ir, "il": il, **complete}  # IR[s, s+d], d = 1..w; IL[s+e, s+w], e = 0..w-1

    def cells(self, stage: str, key: int, limit: int, shift: bool = False) -> dict:
        """The cells that a stage writes, by chart name, as views."""
        sfx = "_shift" if shift else ""
        if stage == "row":  # CR[i, j] for j = i+K+1..N: (B, N-i-K, ...)
            return {"right": getattr(self, "right" + sfx)[:, key, key + limit + 1 :]}
        spans = self.right.shape[1] - key
        if stage == "incomplete":  # IR[s, s+w], IL[s, s+w]
            inc_right, inc_left = getattr(self, "inc_right" + sfx), getattr(self, "inc_left" + sfx)
            u = self.limit - key
            if shift:
                return {"inc_right": inc_right[:, :spans, key - 1], "inc_left": inc_left[:, key:, u]}
            return {"inc_right": inc_right[:, :spans, :, key - 1], "inc_left": inc_left[:, key:, :, u].transpose(-1, -2)}
        return {name: _band(getattr(self, name + sfx), spans, 1, 0, key, 0, 0).squeeze(2) for name in ("right", "left")}


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


class _ArcScores:
    """The arc scores and their allowed arcs (B, N+1, N+1), read one span width at a time.

    Masks are applied per width, so that only the widths the algorithm reads are touched (with
    ``max_dist``, O(n k M^2) rather than O(n^2 M^2)). Disallowed arcs, padding and -inf read as NEG.
    ``tensor`` is what gradients are taken with respect to; subclasses say how width w is stored.
    """

    def __init__(self, tensor: Tensor, allowed: Tensor, shape: Tuple[int, ...]):
        self.tensor, self.allowed, self.shape = tensor, allowed, shape  # shape: of the dense (B, N+1, N+1, M, M)
        self.neg = torch.full((), NEG, dtype=tensor.dtype, device=tensor.device)

    def detach(self) -> "_ArcScores":
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


class _DenseArcs(_ArcScores):
    """Arcs of a dense (B, N+1, N+1, M, M) score tensor: its diagonals."""

    def raw(self, w: int, tensor: Tensor) -> Tuple[Tensor, Tensor]:
        return _diagonals(tensor, w)

    def scatter(self, grad: Tensor, w: int, grad_right: Tensor, grad_left: Tensor) -> None:
        for target, g in zip(_diagonals(grad, w), (grad_right, grad_left)):
            target.add_(g)


class _DirectionalArcs(_ArcScores):
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
        """As :meth:`_ArcScores.exp_width`, from exponentials of F taken once for all widths."""
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
        return tuple(
            (torch.where(ok, e, 1.0), torch.where(ok[..., 0, 0], top, NEG))
            for e, top, ok in ((right, right_top, self._ok(w)[0]), (left, left_top, self._ok(w)[1]))
        )

    def scatter(self, grad: Tensor, w: int, grad_right: Tensor, grad_left: Tensor) -> None:
        N = grad.shape[1]
        grad[:, w - 1, 0, 0].add_(grad_right[:, 0, 0])  # root -> w: the root's label is 0
        grad[:, w:, 0, 1:].add_(grad_right[:, 1:])
        grad[:, : N - w, 1, 1:].add_(grad_left[:, 1:].transpose(-1, -2))


def _incomplete_stage(semiring, bands: dict, shifts: dict, arcs: "_ArcScores", w: int, arc_values=None) -> dict:
    """IR and IL of one width: inner(i, j, a, c) = (+)_{r=i..j-1} CR[i, r, a] * CL[r+1, j, c], plus the arc."""
    operands = (bands["cr"].transpose(2, 3).unsqueeze(-1), shifts["cr"], bands["cl"].unsqueeze(3), shifts["cl"])
    if semiring is LogSemiring and arc_values is None:
        items = _incomplete_in_exp_space(operands, arcs, w)
        if items is not None:
            return items
    inner = semiring.contract(*operands)  # (B, S, M, M)
    arc_right, arc_left = arc_values or arcs.width(w)
    return {"inc_right": inner + arc_right, "inc_left": inner + arc_left}


def _incomplete_in_exp_space(operands: tuple, arcs: "_ArcScores", w: int) -> Optional[dict]:
    """The log semiring's incomplete items, already encoded as (value, shift): inner * exp(arc) is
    formed in exp space from the arcs' factors (``exp_width``), with no exp or log per label pair.

    None when some span's product underflows (its arc and inner item disagree by ~70 nats or
    more, float32): the caller then takes the log-space path, which is exact there too.
    """
    factors = arcs.exp_width(w)
    if factors is None:
        return None
    prod, top = LogSemiring.contract_scaled(*operands)  # (B, S, M, M), max >= 1 per span
    floor = torch.finfo(prod.dtype).tiny * 2.0 ** 24
    items = {}
    for name, (factor, factor_shift) in zip(("inc_right", "inc_left"), factors):
        value = prod * factor
        peak = value.flatten(2).amax(-1)
        if bool((peak < floor).any()):
            return None
        items[name] = (value.div_(peak[..., None, None]), top + factor_shift + torch.log(peak))
    return items


def _complete_stage(semiring, bands: dict, shifts: dict) -> dict:
    """CR and CL of one width w <= max_dist, from incomplete items of widths <= w and complete
    items of widths < w."""
    # CR[i, j, a] = (+)_{r=i+1..j, c} IR[i, r, a, c] * CR[r, j, c]
    right = semiring.contract(bands["ir"].transpose(2, 3), shifts["ir"], bands["cr"].unsqueeze(-1), shifts["cr"])
    # CL[i, j, c] = (+)_{r=i..j-1, a} CL[i, r, a] * IL[r, j, a, c]
    left = semiring.contract(bands["il"].permute(0, 1, 4, 2, 3), shifts["il"], bands["cl"].unsqueeze(-1), shifts["cl"])
    return {"right": right.squeeze(-1), "left": left.squeeze(-1)}


def _row_stage(semiring, bands: dict, shifts: dict) -> dict:
    """CR[i, j] for every j beyond max_dist from i, at once: CR[i, j, a] = (+)_{d<=K, c} IR[i, i+d, a, c]
    * CR[i+d, j, c]. Each incomplete item serves the whole row, so this is a real matrix product.

    Only CR is needed for spans wider than max_dist: a left-complete span that wide could only
    attach to a head outside it by an arc longer than max_dist, so it never reaches the root.
    """
    right = semiring.contract_columns(bands["ir"], shifts["ir"], bands["cr"], shifts["cr"])
    return {"right": right}


def _stages(n: int, limit: int):
    """The order of evaluation: widths 1..limit (incomplete items, then complete ones), then the
    complete spans wider than the limit row by row, from the last start position to the root."""
    for w in range(1, limit + 1):
        yield "incomplete", w
        yield "complete", w
    for i in range(n - limit - 1, -1, -1):
        yield "row", i


def _run_stage(semiring, charts: _Charts, stage: str, w: int, limit: int, arcs: "_ArcScores", bands=None, arc_values=None):
    """The items one stage computes, by chart name: log-space tensors, or (value, shift) pairs
    already encoded (the log semiring's incomplete items)."""
    with_shift = charts.right_shift is not None
    if bands is None:
        bands = charts.bands(stage, w, limit)
    shifts = charts.bands(stage, w, limit, shift=True) if with_shift else dict.fromkeys(bands)
    if stage == "incomplete":
        return _incomplete_stage(semiring, bands, shifts, arcs, w, arc_values)
    return (_complete_stage if stage == "complete" else _row_stage)(semiring, bands, shifts)


class _Inside(torch.autograd.Function):
    """Root items CR[0, w, root label] for every width w, (B, N+1), in log space.

    Forward fills the charts stage by stage without recording a graph. Backward goes over the
    stages in reverse (outside pass, backtrack or recomputation, by semiring) and pushes the
    gradient of each stage's items into the chart regions it read, so memory stays O(B n k M^2).
    """

    @staticmethod
    def forward(ctx, semiring, tensor: Tensor, arcs: _ArcScores, base: Tensor, limit: int) -> Tensor:
        """``tensor`` is ``arcs.tensor``, passed so that autograd sees it."""
        arcs = arcs.detach()
        charts = _Charts(arcs.shape, limit, tensor, with_shift=semiring is LogSemiring, zeros=False)
        charts.set_base(semiring.encode(base, 1))
        for stage, key in _stages(arcs.shape[1] - 1, limit):
            out = _run_stage(semiring, charts, stage, key, limit, arcs)
            cells = charts.cells(stage, key, limit)
            shift_cells = charts.cells(stage, key, limit, shift=True) if charts.right_shift is not None else {}
            for name, item in out.items():
                if isinstance(item, tuple):  # encoded already
                    cells[name].copy_(item[0])
                    shift_cells[name].copy_(item[1])
                else:
                    semiring.encode_into(item, cells[name], shift_cells.get(name))
        ctx.semiring, ctx.limit, ctx.charts, ctx.arcs = semiring, limit, charts, arcs
        return _root_values(charts)

    @staticmethod
    def backward(ctx, grad_root: Tensor):
        if ctx.semiring is LogSemiring:
            grad = _outside_log(ctx.charts, ctx.arcs, ctx.limit, grad_root)
        elif isinstance(ctx.semiring, TracingMaxSemiring):
            grad = _backtrack_max(ctx.semiring.traces, ctx.arcs, ctx.limit, grad_root)
        else:
            grad = _outside_by_recomputation(ctx.semiring, ctx.charts, ctx.arcs, ctx.limit, grad_root)
        return None, grad, None, None, None


def _outside_by_recomputation(semiring, charts: _Charts, arcs: _ArcScores, limit: int, grad_root: Tensor) -> Tensor:
    """Generic backward: recompute one stage at a time under autograd, last stage first.

    Gradients are taken with respect to the stored (encoded) values; used for semirings without an
    explicit outside pass (the broadcast reference).
    """
    n = arcs.shape[1] - 1
    grads = _Charts(arcs.shape, limit, arcs.tensor, with_shift=False)
    with torch.enable_grad():
        root = charts.right[:, 0, :, 0].detach().requires_grad_(True)
        shift = None if charts.right_shift is None else charts.right_shift[:, 0, :]
        (g,) = torch.autograd.grad(decode((root, shift), 0), root, grad_root)
    grads.right[:, 0, :, 0] += g
    grad_scores = torch.zeros_like(arcs.tensor)
    for stage, w in reversed(list(_stages(n, limit))):
        with torch.enable_grad():
            bands = {k: v.detach().requires_grad_(True) for k, v in charts.bands(stage, w, limit).items()}
            arc_values = tuple(a.requires_grad_(True) for a in arcs.width(w)) if stage == "incomplete" else ()
            out = _run_stage(semiring, charts, stage, w, limit, arcs, bands, arc_values)
            cell_grads = grads.cells(stage, w, limit)
            inputs = list(bands.values()) + list(arc_values)
            input_grads = torch.autograd.grad(
                list(out.values()), inputs, [cell_grads[name] for name in out]
            )
        for band, g in zip(grads.bands(stage, w, limit).values(), input_grads):
            band.add_(g)
        if arc_values:
            arcs.add_grad(grad_scores, w, *input_grads[len(bands):])
    return grad_scores


def _outside_log(charts: _Charts, arcs: _ArcScores, limit: int, grad_root: Tensor) -> Tensor:
    """The outside pass of the log semiring, explicit: no stage is recomputed.

    ``outer`` holds d(output) / d(log value) of every item. An item computed as
    log sum_k exp(u_k + v_k) passes to each term the share exp(u_k + v_k - item), which is
    rebuilt from the stored scaled values and shifts; that share is the posterior of the term.

    The complete-span stages push their shares to the narrower complete items at once, but
    an incomplete item's outer value is pulled when its own stage comes: the sum over every
    complete span that used it is then one matrix product per item (``_pull_incomplete``),
    which reads the item once instead of once per span.
    """
    n = arcs.shape[1] - 1
    rows = limit < n  # only row stages push into incomplete items; without them, no chart for it
    outer = _outer_charts(arcs, limit if rows else 0, grad_root)
    terms = _Charts(arcs.shape, 1, arcs.tensor, with_shift=True)  # per complete span: ratio and top
    grad_scores = torch.zeros_like(arcs.tensor)
    tiny = torch.finfo(arcs.tensor.dtype).tiny
    for stage, w in reversed(list(_stages(n, limit))):
        values, shifts = charts.bands(stage, w, limit), charts.bands(stage, w, limit, shift=True)
        into = outer.bands(stage, w, limit)
        if stage == "row":
            _row_outside(values, shifts, outer.cells(stage, w, limit)["right"], into, tiny)
        elif stage == "complete":
            cells, cell_shifts = charts.cells(stage, w, limit), charts.cells(stage, w, limit, shift=True)
            from_cells = outer.cells(stage, w, limit)
            ratio_cells, top_cells = terms.cells(stage, w, limit), terms.cells(stage, w, limit, shift=True)
            # CR: free label a, summed (d, c); CL: free label c, summed (d, a); x as the chart stores it
            for name, inc, comp, x in (
                ("right", "ir", "cr", values["ir"].transpose(2, 3)),
                ("left", "il", "cl", values["il"].permute(0, 1, 4, 2, 3)),
            ):
                ratio, top = _complete_outside(
                    x, shifts[inc], values[comp], shifts[comp], cells[name], cell_shifts[name],
                    from_cells[name], into[comp], tiny,
                )
                ratio_cells[name].copy_(ratio)
                top_cells[name].copy_(top)
        else:
            from_right, from_left = _pull_incomplete(charts, terms, w, limit)
            if rows:
                pushed = outer.cells(stage, w, limit)
                from_right, from_left = from_right + pushed["inc_right"], from_left + pushed["inc_left"]
            arcs.add_grad(grad_scores, w, from_right, from_left)
            # inner(s, a, c) = log sum_k exp(CR[s, k, a] + CL[s, k, c])
            pair = shifts["cr"] + shifts["cl"]
            scale = torch.exp(pair - pair.amax(-1, keepdim=True)).unsqueeze(-1)  # (B, S, w, 1)
            cr, cl = values["cr"] * scale, values["cl"]
            inner = torch.matmul(cr.transpose(-1, -2), cl).clamp_min(tiny)  # (B, S, M, M), up to exp(top)
            share = (from_right + from_left) / inner
            into["cr"].add_(cr * torch.matmul(cl, share.transpose(-1, -2)))
            into["cl"].add_(cl * torch.matmul(cr, share))
    return grad_scores


def _complete_outside(x, x_shift, y, y_shift, out, out_shift, from_out, into_y, tiny) -> Tuple[Tensor, Tensor]:
    """Outside step of out[s, f] = log sum_{d, l} exp(X[s, f, d, l] + Y[s, d, l]), all in scaled form:
    x (B, S, F, D, L), y (B, S, D, L), out (B, S, F). Adds the shares of Y into ``into_y``.

    The share of term (d, f, l) is x[d, f, l] * ratio[f] * y[d, l] * exp(pair[d] - top) with
    pair = x_shift + y_shift; returns ``ratio`` (B, S, F) and ``top`` (B, S) for the shares of X,
    which :func:`_pull_incomplete` sums later over all spans at once.
    """
    pair = x_shift + y_shift
    top = pair.amax(-1)  # as in the forward contraction
    y = y * torch.exp(pair - top.unsqueeze(-1)).unsqueeze(-1)
    total = (out * torch.exp(out_shift - top).unsqueeze(-1)).clamp_min(tiny)  # sum_{d,l} x y, (B, S, F)
    ratio = from_out / total
    into_y.add_(y * (x * ratio[:, :, :, None, None]).sum(2))
    return ratio, top


def _pull_incomplete(charts: _Charts, terms: _Charts, w: int, limit: int) -> Tuple[Tensor, Tensor]:
    """The outer values of IR[s, s+w] and IL[s, s+w] (B, S, M, M) from their shares in every
    complete span of width <= ``limit`` that used them, as one matrix product per item.

    IR[i, r] served CR[i, j] for j = r..i+limit with CR[r, j]; IL[r, j] served CL[i, j] for
    i = j-limit..r with CL[i, r]. Index t runs over those J = limit - w + 1 spans; the views run
    past the charts' edges where a span does not exist (padded zeros), and its factor is 0 there.
    """
    n1 = charts.right.shape[1]
    spans, J = n1 - w, min(limit, n1 - 1) - w + 1
    t = torch.arange(J, device=charts.right.device)
    s = torch.arange(spans, device=charts.right.device)[:, None]
    pulled = []
    for name in ("right", "left"):
        inc = charts.cells("incomplete", w, limit)["inc_" + name]
        inc_shift = charts.cells("incomplete", w, limit, shift=True)["inc_" + name]
        if name == "right":  # CR[s+w, s+w+t] (label c), span (s, s+w+t) (label a)
            exists = s + w + t <= n1 - 1
            comp, comp_shift = (_band(c, spans, J, w, w, 0, 1) for c in (charts.right, charts.right_shift))
            ratio, top = (_band(c, spans, J, 0, w, 0, 1) for c in (terms.right, terms.right_shift))
        else:  # CL[i, s] (label a) and span (i, s+w) (label c), i = s - J + 1 + t
            exists = s - J + 1 + t >= 0
            comp, comp_shift = (_band(c, spans, J, 1 - J, 0, 1, 0) for c in (charts.left, charts.left_shift))
            ratio, top = (_band(c, spans, J, 1 - J, w, 1, 0) for c in (terms.left, terms.left_shift))
        exponent = inc_shift.unsqueeze(-1) + comp_shift - top  # pair - top of each span, <= 0
        factor = torch.exp(torch.where(exists, exponent, float("-inf"))).unsqueeze(-1)  # (B, S, J, 1)
        if name == "right":
            pulled.append(torch.matmul((ratio * factor).transpose(-1, -2), comp).mul_(inc))
        else:  # formed [c, a], as IL is stored, so that the product with it reads memory in order
            total = torch.matmul((ratio * factor).transpose(-1, -2), comp)
            pulled.append(total.mul_(inc.transpose(-1, -2)).transpose(-1, -2))
    return pulled[0], pulled[1]


def _backtrack_max(traces: list, arcs: _ArcScores, limit: int, grad_root: Tensor) -> Tensor:
    """Backward of the max semiring: each cell passes its gradient to the split point and labels that
    won its max in the forward pass (``traces``, one per contraction in call order). From the root's
    gradient this marks the arcs of the best structure."""
    outer = _outer_charts(arcs, limit, grad_root)
    grad_scores = torch.zeros_like(arcs.tensor)
    traces = list(traces)
    for stage, key in reversed(list(_stages(arcs.shape[1] - 1, limit))):
        into, cells = outer.bands(stage, key, limit), outer.cells(stage, key, limit)
        if stage == "row":  # x = IR (B, K, F, L), y = CR (B, K, G, L); won (B, G, F) over (K, L)
            won, grad = traces.pop(), cells["right"]
            split, label = _unflatten(won, into["ir"].shape[-1])
            b, g, f = _grid(won.shape, won.device)
            into["ir"].index_put_((b, split, f, label), grad, accumulate=True)
            into["cr"].index_put_((b, split, g, label), grad, accumulate=True)
        elif stage == "complete":  # CR: won (B, S, a, 1) over (d, c); CL: won (B, S, c, 1) over (d, a)
            for name, inc, comp in (("left", "il", "cl"), ("right", "ir", "cr")):
                won, grad = traces.pop().squeeze(-1), cells[name]
                split, label = _unflatten(won, into[comp].shape[-1])
                b, s, f = _grid(won.shape, won.device)
                head_dep = (f, label) if name == "right" else (label, f)  # IR[.., a, c] / IL[.., a, c]
                into[inc].index_put_((b, s, split) + head_dep, grad, accumulate=True)
                into[comp].index_put_((b, s, split, label), grad, accumulate=True)
        else:  # inner: won (B, S, a, c) over the split k
            won = traces.pop()
            from_right, from_left = cells.values()
            arcs.add_grad(grad_scores, key, from_right, from_left)
            grad = from_right + from_left
            b, s, a, c = _grid(won.shape, won.device)
            into["cr"].index_put_((b, s, won, a), grad, accumulate=True)
            into["cl"].index_put_((b, s, won, c), grad, accumulate=True)
    return grad_scores


def _outer_charts(arcs: _ArcScores, limit: int, grad_root: Tensor) -> _Charts:
    """Zeroed charts for an outside pass, the root's gradient in place."""
    outer = _Charts(arcs.shape, limit, arcs.tensor, with_shift=False)
    outer.right[:, 0, :, 0] = grad_root
    return outer


def _unflatten(index: Tensor, size: int) -> Tuple[Tensor, Tensor]:
    """An index into a flattened (K, L) pair of axes, L = ``size`` -> (k, l)."""
    return torch.div(index, size, rounding_mode="floor"), index % size


def _grid(shape, device) -> Tuple[Tensor, ...]:
    """Index tensors of every position of ``shape``, one per dimension, each of that shape."""
    return torch.meshgrid(*(torch.arange(n, device=device) for n in shape), indexing="ij")


def _row_outside(values: dict, shifts: dict, from_row: Tensor, into: dict, tiny: float) -> None:
    """Outside step of a row stage (see ``LogSemiring.contract_columns``): ir (B, K, F, L) with shifts
    (B, K), cr (B, K, G, L) with shifts (B, K, G), the row's outer gradients (B, G, F)."""
    x, y = values["ir"], values["cr"]
    b, k, f, l = x.shape
    g = y.shape[2]
    pair = shifts["ir"].unsqueeze(-1) + shifts["cr"]  # (B, K, G)
    y = y * torch.exp(pair - pair.amax(1, keepdim=True)).unsqueeze(-1)
    x_flat = x.transpose(1, 2).reshape(b, f, k * l)
    y_flat = y.permute(0, 2, 1, 3).reshape(b, g, k * l)
    total = torch.bmm(x_flat, y_flat.transpose(1, 2)).clamp_min(tiny)  # (B, F, G), as in the forward
    share = from_row.transpose(1, 2) / total
    into["ir"].add_(x * torch.bmm(share, y_flat).reshape(b, f, k, l).transpose(1, 2))
    into["cr"].add_(y * torch.bmm(share.transpose(1, 2), x_flat).reshape(b, g, k, l).transpose(1, 2))


def _root_values(charts: _Charts) -> Tensor:
    shift = None if charts.right_shift is None else charts.right_shift[:, 0, :]
    return decode((charts.right[:, 0, :, 0], shift), 0)


def _inside(semiring, arcs: _ArcScores, base: Tensor, lengths: Tensor, max_dist: Optional[int]) -> Tensor:
    """Labelled Eisner in ``semiring``; returns the root item CR[0, n, 0] of each sentence, (B,)."""
    n = arcs.shape[1] - 1
    if max_dist is not None and max_dist < 1:
        raise ValueError(f"max_dist must be at least 1 (or None), got {max_dist}")
    limit = n if max_dist is None else max(1, min(int(max_dist), n))
    root_by_length = _Inside.apply(semiring, arcs.tensor, arcs, base, limit)  # (B, N+1)
    return root_by_length.gather(1, lengths.to(root_by_length.device).long()[:, None]).squeeze(1)


def _structure(chosen: Tensor, lengths: Tensor) -> Tuple[Tensor, Tensor]:
    """One-hot arcs (B, N+1, N+1, M, M) -> labels (B, N) and heads (B, N), 0 beyond lengths."""
    labels = chosen.sum(dim=(1, 3)).argmax(-1)[:, 1:]
    heads = chosen.sum(dim=(3, 4)).argmax(1)[:, 1:]
    n = chosen.shape[1] - 1
    real = torch.arange(1, n + 1, device=chosen.device)[None, :] <= lengths.to(chosen.device)[:, None]
    return labels * real, heads * real
