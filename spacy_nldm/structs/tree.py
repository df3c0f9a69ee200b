"""Labelled projective dependency trees over a label sequence: the NLDM's inside, Viterbi, marginals and
canonical tree. A reader starts here.

Conventions (shared by every public function here):

- ``scores[b, h, d, a, c]``, shape (B, N+1, N+1, M, M): score of the arc h -> d when the head h
  carries label a and the dependent d carries label c. Position 0 is the root; its label is
  index 0, so of the root's rows only ``scores[:, 0, :, 0, :]`` is read. Arcs into the root
  and self-arcs are never read. Or :class:`DirectionalScores` (B, N, 2, M+1, M), arc scores that
  do not depend on the head's position, read in that compact form.
- ``lengths[b]``: an integer tensor (B,), the number of real tokens (positions 1..lengths[b]);
  scores beyond it are never read and may hold anything.
- ``label_mask`` (B, N+1, M) bool: labels allowed at each position (row 0 is ignored).
- ``max_dist=k``: arcs longer than k are dropped, root arcs included; the incomplete items then
  exist only for spans of width <= k: time O(n k^2 M^2), memory O(n k M^2).
- ``arc_mask`` (B or 1, N+1, N+1) bool: allowed arcs h -> d.

Scores are float32 or float64; -inf marks an impossible arc. A sentence with a position that allows
no label, or without any tree of finite score, is impossible: its log Z and best score are -inf, its
marginals and gradient 0, its decoded labels and heads 0. +inf or NaN in a score that is read raises
a ValueError naming the sentence and the arc. Every sum is a log-sum-exp taken in float64, so results are
exact in float32 and float64 at any score scale.

The reference is :func:`_inside`, the labelled Eisner recurrences of docs/algorithm.md over a semiring
(:class:`~.semiring.LogSemiring` for log Z, :class:`~.semiring.MaxSemiring` for the best tree), one
vectorised step per span width; marginals are its gradient (autograd), Viterbi the gradient of its max.
The fast lanes sit beside it, chosen by :func:`tree_lane` (``lane=`` forces one; docs/algorithm.md has
what each is worth):

==========  ==========================================================================  =========================
lane        takes                                                                       module
==========  ==========================================================================  =========================
reference   everything                                                                  here
compiled    log Z, marginals and Viterbi of DirectionalScores on the CPU without a      :mod:`.compiled`
            label or arc mask (what the components train and tag with): one numba
            loop per sentence in float64, the outside pass (or the back-pointers) in     :mod:`.compiled_decoders`
            the same call; the canonical tree of given labels likewise                  (Viterbi, canonical)
            dense one-label scores (the gold labels' arcs, log S) up to                 :mod:`.single_label`
            ``ONE_LABEL_UP_TO`` tokens
factored    log Z and marginals of ``token_independent`` DirectionalScores, read as     :mod:`.compiled`
            emissions plus one table; given as factors, with a label mask too (the
            labels it leaves out at -inf in the emissions: log S of partial labels)
==========  ==========================================================================  =========================

:func:`canonical_heads` decodes the canonical tree of given labels: the shortest-arc tree among the
near-best ones, by the same recurrences in a tolerant max.
"""
from typing import Callable, List, NamedTuple, Optional, Tuple

import numpy as np
import torch

from . import compiled, compiled_decoders, single_label
from .checks import Decoded, check_label_mask, check_lengths, check_scores, raise_if_not_finite
from .semiring import LogSemiring, MaxSemiring, Semiring, as_semiring

Tensor = torch.Tensor
NEG = float("-inf")
#: the lanes :func:`tree_lane` chooses from and ``lane=`` accepts
LANES = ("reference", "compiled", "factored")
#: dense one-label scores (the gold labels' arcs, log S) take the compiled lane up to this many tokens: one
#: thread, B=32, fwd+bwd, it takes 0.3x the reference's time at n = 12, 0.7x at 30, 1.0x at 40, 1.6x at 60
ONE_LABEL_UP_TO = 32
#: relative tolerance of the canonical tree's maximisations: far above float32 rounding (~1e-7 per score),
#: far below score differences that mean something
TOL = 1e-5


class DirectionalScores:
    """Arc scores that depend on the dependent, the arc's direction and the two labels only,
    not on the head's position: ``F[b, d-1, 0, a, c]`` scores every arc h -> d with h < d and
    ``F[b, d-1, 1, a, c]`` every arc with h > d, head label ``a - 1`` (``a = 0``: the root, only
    for direction 0) and dependent label c; shape (B, N, 2, M+1, M).

    ``distance_bias`` (2, K), optional: ``distance_bias[x, w-1]`` is added to every arc between two
    tokens of length w (``|h - d| = w``) and direction x, the last column to arcs of length K and more;
    arcs from the root get none. It is differentiable like F (its gradient is the expected number of
    arcs of each direction and length).

    ``token_independent = True`` is the caller's statement that every token's scores are one emission row
    plus one shared table, ``F[b, d, x, a, c] = e[b, d, c] + table[x, a, c]`` (as the components' bilinear
    and emission_transition scorers make them): the ``factored`` lane then reads ``e = F[:, :, 0, 1]`` and
    the table relative to it from the first real token. :meth:`from_factors` takes the two factors themselves.
    """

    def __init__(self, F: Tensor, distance_bias: Optional[Tensor] = None, token_independent: bool = False):
        if not isinstance(F, Tensor) or F.dim() != 5 or F.shape[2] != 2 or F.shape[3] != F.shape[4] + 1:
            shape = tuple(F.shape) if isinstance(F, Tensor) else type(F).__name__
            raise ValueError(f"directional scores must have shape (B, N, 2, M+1, M), got {shape}")
        _check_bias_shape(distance_bias)
        self._F = F
        self.distance_bias = distance_bias
        self.token_independent = bool(token_independent)
        self.factors: Optional[Tuple[Tensor, Tensor]] = None

    @classmethod
    def from_factors(cls, emissions: Tensor, table: Tensor, distance_bias: Optional[Tensor] = None
                     ) -> "DirectionalScores":
        """Token-independent scores given as their factors, ``F[b, d, x, a, c] = emissions[b, d, c] + table[x, a,
        c]``, emissions (B, N, M) and table (2, M+1, M) of one dtype: the ``factored`` lane reads them as they are
        (and differentiates them); F is built only when another lane reads it."""
        for name, value, dims in (("emissions", emissions, 3), ("table", table, 3)):
            if not isinstance(value, Tensor) or value.dim() != dims:
                raise ValueError(f"{name} must be a {dims}-d tensor, got {getattr(value, 'shape', type(value))}")
        M = emissions.shape[-1]
        if tuple(table.shape) != (2, M + 1, M) or table.dtype != emissions.dtype:
            raise ValueError(f"table must be {emissions.dtype} of shape (2, {M + 1}, {M}) for emissions "
                             f"{tuple(emissions.shape)}, got {table.dtype} {tuple(table.shape)}")
        _check_bias_shape(distance_bias)
        scores = cls.__new__(cls)
        scores._F, scores.distance_bias, scores.token_independent = None, distance_bias, True
        scores.factors = (emissions, table)
        return scores

    def with_label_mask(self, allowed: Tensor) -> "DirectionalScores":
        """Factored scores (:meth:`from_factors`) with the labels ``allowed`` (B, N+1, M) does not allow (row 0,
        the root, ignored) at -inf in the emissions: every arc into a token with such a label is impossible, so
        that the sums over labels and trees are over the allowed labels only, as a label mask makes them."""
        emissions, table = self.factors
        masked = emissions.masked_fill(~allowed[:, 1:].to(emissions.device), float("-inf"))
        return DirectionalScores.from_factors(masked, table, self.distance_bias)

    @property
    def F(self) -> Tensor:
        """The scores (B, N, 2, M+1, M) (built from :attr:`factors` on first use, where they were given so)."""
        if self._F is None:
            emissions, table = self.factors
            self._F = emissions[:, :, None, None, :] + table
        return self._F

    @property
    def dtype(self) -> torch.dtype:
        return self.F.dtype if self.factors is None else self.factors[0].dtype

    @property
    def shape(self) -> Tuple[int, int, int, int, int]:
        """The shape of the dense arc tensor these scores stand for."""
        B, N, M = (self.F.shape[:2] + self.F.shape[-1:]) if self.factors is None else self.factors[0].shape
        return (B, N + 1, N + 1, M, M)


def _check_bias_shape(distance_bias: Optional[Tensor]) -> None:
    if distance_bias is not None and not (isinstance(distance_bias, Tensor) and distance_bias.dim() == 2
                                          and distance_bias.shape[0] == 2 and distance_bias.shape[1] >= 1):
        shape = tuple(distance_bias.shape) if isinstance(distance_bias, Tensor) else type(distance_bias).__name__
        raise ValueError(f"distance_bias must have shape (2, K), K >= 1, got {shape}")


class Marginals(NamedTuple):
    """``arcs``: d log Z / d scores, shaped like the scores given (the dense tensor: P(arc h -> d with
    labels a, c); DirectionalScores: the same summed over the head positions F stands for);
    ``labels`` (B, N, M): P(y_d = c | x) for tokens 1..N. Both 0 beyond lengths."""

    arcs: Tensor
    labels: Tensor


# -- public API ---------------------------------------------------------------------------------------


def log_partition(scores, lengths: Tensor, *, label_mask: Optional[Tensor] = None, max_dist: Optional[int] = None,
                  arc_mask: Optional[Tensor] = None, semiring=LogSemiring, lane: Optional[str] = None) -> Tensor:
    """log of the sum over label sequences and projective trees of exp(tree score), shape (B,).

    With ``label_mask`` set to the gold labels this is log S(x, y); without it, log Z(x). Differentiable:
    its gradient with respect to the scores is the arc marginals. ``semiring`` (an instance or a class):
    :class:`~.semiring.LogSemiring` or :class:`~.semiring.MaxSemiring` (the best score). ``lane``: see
    :func:`tree_lane`; every lane gives the same result.
    """
    problem = _prepare(scores, lengths, label_mask, arc_mask, max_dist)
    semiring = as_semiring(semiring)
    chosen = _pick(scores, problem, semiring, lane)
    if isinstance(semiring, MaxSemiring) and chosen != "reference":  # (the best score: from viterbi's lane)
        return viterbi(scores, lengths, label_mask=label_mask, max_dist=max_dist, arc_mask=arc_mask,
                       lane=chosen).score
    root = None
    if chosen != "reference" and not isinstance(scores, DirectionalScores):
        root = single_label.log_partition(scores, problem.lengths, problem.limit)
    elif chosen != "reference":
        given = scores.with_label_mask(problem.allowed) if problem.masked else scores
        root = compiled.log_partition(given, problem.lengths, problem.limit, chosen == "factored")
    if root is not None and not bool((torch.isfinite(root) | torch.isneginf(root)).all()):
        root = None  # +inf or NaN read somewhere: the reference names it
    if root is None:
        root = _inside(semiring, problem.arcs.width, problem).to(problem.dtype)
    result = torch.where(problem.impossible, NEG, root)
    raise_if_not_finite(result, lambda b: _bad_arc(problem, b))
    return result


def tree_lane(scores, lengths: Tensor, *, label_mask: Optional[Tensor] = None, max_dist: Optional[int] = None,
              arc_mask: Optional[Tensor] = None, semiring=LogSemiring) -> str:
    """The lane (one of :data:`LANES`) that :func:`log_partition` and :func:`marginals` take for these inputs."""
    return _pick(scores, _prepare(scores, lengths, label_mask, arc_mask, max_dist), as_semiring(semiring), None)


def sentence_by_sentence(device) -> bool:
    """Whether log Z and the marginals of DirectionalScores on ``device`` run sentence by sentence (the
    compiled lanes), and so does the Viterbi of ChainScores (:func:`.chain.crf_viterbi`), so that padding a
    batch to its longest sentence costs nothing."""
    return torch.device(device).type == "cpu" and compiled.available()


def marginals(scores, lengths: Tensor, *, label_mask: Optional[Tensor] = None, max_dist: Optional[int] = None,
              arc_mask: Optional[Tensor] = None, lane: Optional[str] = None) -> Marginals:
    """Posterior marginals of arcs and labels (:class:`Marginals`), from the gradient of log Z."""
    arcs, labels, factor = _marginals(scores, lengths, label_mask, max_dist, arc_mask, lane)
    if isinstance(scores, DirectionalScores):
        arcs = arcs * factor[:, :, None, None, None]
    else:
        arcs = arcs * torch.cat([factor.new_zeros(factor.shape[0], 1), factor], 1)[:, None, :, None, None]
    return Marginals(arcs, labels)


def label_marginals(scores, lengths: Tensor, *, label_mask: Optional[Tensor] = None, max_dist: Optional[int] = None,
                    arc_mask: Optional[Tensor] = None, lane: Optional[str] = None) -> Tensor:
    """P(y_d = c | x), (B, N, M): :func:`marginals`' ``labels`` (on the compiled lanes the arc marginals are
    not even written)."""
    problem = _prepare(scores, lengths, label_mask, arc_mask, max_dist)
    chosen = _pick(scores, problem, LogSemiring(), lane)
    if chosen != "reference" and isinstance(scores, DirectionalScores):
        given = scores.with_label_mask(problem.allowed) if problem.masked else scores
        labels = compiled.label_marginals(given, problem.lengths, problem.limit, chosen == "factored")
        if labels is not None:
            return (labels * _sum_to_one(labels).unsqueeze(-1)).to(scores.dtype)
    # (the fallback reads F whole: a label mask is then the reference's)
    return _marginals(scores, lengths, label_mask, max_dist, arc_mask, "reference" if problem.masked else chosen)[1]


def viterbi(scores, lengths: Tensor, *, label_mask: Optional[Tensor] = None, max_dist: Optional[int] = None,
            arc_mask: Optional[Tensor] = None, lane: Optional[str] = None) -> Decoded:
    """Best joint (labels, tree), the paper's approximate MAP: :class:`~.checks.Decoded` with ``labels``
    (B, N) label ids of tokens 1..N, ``heads`` (B, N) head positions in 0..N (0 = root) and ``score`` (B,).
    On the reference the tree is the gradient of the best score with respect to the arcs (one best tree,
    ties to the first split and label pair); ``lane="compiled"`` (the default for DirectionalScores on the
    CPU without masks) runs the same recurrences with back-pointers in one numba loop per sentence."""
    problem = _prepare(scores, lengths, label_mask, arc_mask, max_dist)
    chosen = _pick(scores, problem, MaxSemiring(), lane)
    if chosen == "compiled" and isinstance(scores, DirectionalScores):
        real = torch.arange(scores.F.shape[1])[None, :] < problem.lengths[:, None]
        if not bool((torch.isnan(scores.F) | (scores.F == float("inf")))[real].any()):
            labels, heads, best = compiled_decoders.viterbi(scores.F, scores.distance_bias, problem.lengths,
                                                            problem.limit)
            best = torch.where(problem.impossible, NEG, best.to(problem.dtype))
            found = (best > NEG)[:, None]
            return Decoded(labels * found, heads * found, best)
    with torch.enable_grad():
        arcs = [()] + [tuple(a.detach().requires_grad_() for a in problem.arcs.width(w))
                       for w in range(1, problem.limit + 1)]
        best = torch.where(problem.impossible, NEG, _inside(MaxSemiring(), arcs.__getitem__, problem))
        raise_if_not_finite(best, lambda b: _bad_arc(problem, b))
        leaves = [a for pair in arcs for a in pair]
        found = (best > NEG).to(best.dtype)
        marks = torch.autograd.grad(best, leaves, found, allow_unused=True) if leaves else []
    labels, heads = _decode_marks(marks, problem)
    return Decoded(labels, heads, best.detach().to(problem.dtype))


def canonical_heads(F: Tensor, labels: Tensor, lengths: Tensor, max_dist: Optional[int] = None, tol: float = TOL,
                    distance_bias: Optional[Tensor] = None, lane: Optional[str] = None) -> Tuple[Tensor, Tensor]:
    """The canonical tree of given labels: heads (B, N) (0 = the root, 0 beyond each length) and its score
    (B,) float64 (the sum of its arcs' scores, dependent by dependent), for directional scores F
    (B, N, 2, M+1, M) (or a :class:`DirectionalScores`, read as its factors where it has them), labels (B, N)
    and the distance bias (2, K) or None.

    Many trees score the same or within rounding of each other (every tree that keeps each token's head
    direction and head label scores exactly the same), and which one Viterbi returns follows the last bits
    of the scores. This one does not: the recurrences in the tolerant max of :class:`_Canonical` keep, of the
    candidates within ``tol`` (relative) of the best, the one with the shortest arcs in all (the first split
    on a tie). ``lane``: ``"reference"`` (these recurrences in torch) or ``"compiled"`` (the same choices in
    one numba loop per sentence, the default on the CPU); both give the same heads and scores, bit for bit."""
    factors = F.factors if isinstance(F, DirectionalScores) else None
    if isinstance(F, DirectionalScores) and factors is None:
        F = F.F
    check_scores(F if factors is None else factors[0], "directional scores")
    lengths = check_lengths(lengths, labels.shape[0], labels.shape[1], labels.device)
    if lane not in (None, "reference", "compiled"):
        raise ValueError(f"lane must be 'reference', 'compiled' or None, got {lane!r}")
    B, N = labels.shape
    limit = N if max_dist is None else min(int(max_dist), N)
    codes = torch.cat([labels.new_zeros(B, 1), labels + 1], 1).cpu()
    bias = None if distance_bias is None else distance_bias.detach().to("cpu", torch.float64)
    lens = lengths.cpu()
    if lane == "compiled" or (lane is None and compiled.available()):
        heads, score = _canonical_compiled(F, factors, labels, codes, bias, lens, limit, tol)
        return heads.to(labels.device, labels.dtype), score
    # dep[b, d-1, x, code] = F[b, d-1, x, code, label of d]; codes (B, N+1): each position's label + 1, 0 = root
    if factors is None:
        dep = _dense_label_scores(F, labels)
    else:
        emissions, table = (f.detach().to("cpu", torch.float64) for f in factors)
        cpu_labels = labels.cpu()
        dep = emissions.gather(-1, cpu_labels[..., None])[..., None] + table[:, :, cpu_labels].permute(2, 3, 0, 1)
    heads = _canonical_reference(dep, codes, bias, lens, limit, tol)
    # the tree's score, dependent by dependent (float64)
    d = torch.arange(1, N + 1)
    head_codes = codes.gather(1, heads)
    arcs = dep[torch.arange(B)[:, None], d - 1, (heads > d).long(), head_codes]
    if bias is not None:
        column = ((heads - d).abs().clamp(1, bias.shape[1]) - 1)
        arcs = arcs + torch.where(heads > 0, bias[(heads > d).long(), column], 0.0)
    real = d[None, :] <= lens[:, None]
    score = torch.zeros(B, dtype=torch.float64)
    for j in range(N):
        score = score + torch.where(real[:, j], arcs[:, j], 0.0)
    return heads.to(labels.device, labels.dtype), score


def _dense_label_scores(F: Tensor, labels: Tensor) -> Tensor:
    """dep (B, N, 2, M+1) float64 on the CPU: the dense scores F (B, N, 2, M+1, M) at each dependent's label."""
    B, N = labels.shape
    index = labels.to(F.device)[:, :, None, None, None].expand(B, N, *F.shape[2:4], 1)
    return F.detach().gather(-1, index)[..., 0].to("cpu", torch.float64)


def _canonical_compiled(F: Optional[Tensor], factors, labels: Tensor, codes: Tensor, bias: Optional[Tensor],
                        lens: Tensor, limit: int, tol: float) -> Tuple[Tensor, Tensor]:
    """:func:`canonical_heads` in the compiled loops (:func:`.compiled_decoders.canonical_tree`): the scores at
    the labels gathered there too where F comes as its factors."""
    numpy_of = lambda t, dtype: np.ascontiguousarray(t.detach().cpu().numpy().astype(dtype, copy=False))
    if factors is None:
        dep = numpy_of(_dense_label_scores(F, labels), np.float64)
    else:  # float32 emissions as they are: the loop adds them to the float64 table as the reference does
        emissions, table = factors
        precision = np.float32 if emissions.dtype == torch.float32 else np.float64
        dep = compiled_decoders.label_scores(numpy_of(emissions, precision), numpy_of(table, np.float64),
                                             numpy_of(labels, np.int64))
    heads, score = compiled_decoders.canonical_tree(dep, numpy_of(codes, np.int64),
                                                    None if bias is None else numpy_of(bias, np.float64),
                                                    numpy_of(lens, np.int64), limit, tol)
    return torch.from_numpy(heads), torch.from_numpy(score)


def _canonical_reference(dep: Tensor, codes: Tensor, bias: Optional[Tensor], lengths: Tensor, limit: int,
                         tol: float) -> Tensor:
    """Heads (B, N) of the canonical trees: the reference recurrences in :class:`_Canonical`, one label per
    position; the tree is the gradient of the root's value with respect to the arcs."""
    B, N = codes.shape[0], codes.shape[1] - 1
    n1 = N + 1
    allowed = (torch.arange(n1)[None, :] <= lengths[:, None])[..., None]  # (B, N+1, 1): the root and the tokens
    problem = _Problem(None, allowed, lengths, torch.zeros(B, dtype=torch.bool), max(limit, 1), torch.float64,
                       torch.device("cpu"), False)
    values = []
    for w in range(1, problem.limit + 1):
        ends_inside = torch.arange(w, n1)[None, :] <= lengths[:, None]  # (B, S)
        # the arc s -> s+w reads the dependent s+w's row at the head's code, the arc s+w -> s the dependent s's
        right = dep[:, w - 1 :, 0].gather(-1, codes[:, : n1 - w, None])[..., 0]
        left = torch.cat([torch.full((B, 1), NEG, dtype=dep.dtype),
                          dep[:, : N - w, 1].gather(-1, codes[:, w + 1 :, None])[..., 0]], 1)
        if bias is not None:  # between tokens only
            column = min(w, bias.shape[1]) - 1
            right = torch.cat([right[:, :1], right[:, 1:] + bias[0, column]], 1)
            left = left + bias[1, column]
        values.append(tuple(torch.where(ends_inside, arc, NEG).requires_grad_() for arc in (right, left)))

    def width(w: int):  # (value, total arc length w) pairs, (B, S, 1, 1, 2)
        return tuple(torch.stack([v, torch.full_like(v, float(w))], -1)[:, :, None, None] for v in values[w - 1])

    with torch.enable_grad():
        root = _inside(_Canonical(tol), width, problem)[..., 0]
        found = (root > NEG).to(root.dtype)
        leaves = [v for pair in values for v in pair]
        marks = torch.autograd.grad(root, leaves, found, allow_unused=True)
    marks = [None if g is None else g[:, :, None, None] for g in marks]
    return _decode_marks(marks, problem)[1]


class _Canonical(Semiring):
    """The tolerant max of :func:`canonical_heads` over (value, total arc length) pairs, the last axis: the
    product adds both; the sum keeps, of the terms within ``tol`` (relative) of the largest value, the one
    of least length, the first on a tie (its gradient goes to that term only)."""

    def __init__(self, tol: float):
        self.tol = tol

    def fill(self, mask: Tensor, dtype: torch.dtype) -> Tensor:
        zero = torch.zeros((), dtype=dtype, device=mask.device)
        return torch.stack([zero.where(mask, NEG), zero.expand(mask.shape)], -1)

    def sum(self, x: Tensor, dims: Tuple[int, ...]) -> Tensor:
        dims = tuple(d % (x.dim() - 1) for d in dims)
        keep = [d for d in range(x.dim() - 1) if d not in dims]
        x = x.permute(*keep, *dims, x.dim() - 1).flatten(len(keep), -2)  # (..., terms, 2)
        value, length = x[..., 0], x[..., 1]
        best = value.detach().amax(-1, keepdim=True)
        floor = best - self.tol * best.abs().clamp_min(1.0)
        pick = torch.where(value.detach() >= floor, length, float("inf")).argmin(-1, keepdim=True)
        return torch.stack([value.gather(-1, pick)[..., 0], length.gather(-1, pick)[..., 0]], -1)


def count_trees(n: int, max_dist: Optional[int] = None) -> int:
    """Number of projective trees over n tokens with a free root (1, 3, 12, 55, 273, ...): log Z of zero
    scores with one label, so it checks the recurrences too."""
    scores = torch.zeros(1, n + 1, n + 1, 1, 1, dtype=torch.float64)
    log_z = log_partition(scores, torch.tensor([n]), max_dist=max_dist, lane="reference")
    return int(round(float(log_z.exp())))


def distance_bias_matrix(distance_bias: Tensor, n1: int, max_dist: Optional[int] = None) -> Tensor:
    """(n1, n1) [h, d]: the bias (2, K) of the arc h -> d between tokens (h, d >= 1) of length at most
    ``max_dist``, 0 elsewhere (root arcs, self-arcs, longer arcs); differentiable."""
    positions = torch.arange(n1, device=distance_bias.device)
    offset = positions[None, :] - positions[:, None]  # d - h
    column = (offset.abs() - 1).clamp(0, distance_bias.shape[1] - 1)
    tokens = (positions[:, None] >= 1) & (positions[None, :] >= 1) & (offset != 0)
    if max_dist is not None:
        tokens = tokens & (offset.abs() <= max_dist)
    bias = torch.where(offset > 0, distance_bias[0][column], distance_bias[1][column])
    return torch.where(tokens, bias, 0.0)


# -- the reference recurrences ------------------------------------------------------------------------


def _inside(semiring: Semiring, width: Callable[[int], Tuple[Tensor, Tensor]], problem: "_Problem") -> Tensor:
    """The root item (B, *E) of the labelled Eisner recurrences in ``semiring`` (docs/algorithm.md), every
    span of one width at a time; ``width(w)`` gives the arcs of width w, (right, left) (B, S, M, M, *E) each,
    S = N+1-w spans, [label of the span's start, label of its end], the semiring's zero where not allowed
    (E: the shape of one semiring value, () but for :class:`_Canonical`).

    Each kind of item has a chart (B, spans, widths, ...) that grows by one width per step, indexed by the
    span's start (``*_s``: starts 0.., widths ascending) or by its end (``*_e``: ends w.., widths descending)
    and keeps only the spans that later widths read, so that every sum below reads its operands as slices."""
    allowed, K = problem.allowed, problem.limit
    n1 = allowed.shape[1]
    # CR[i, i, a] = CL[i, i, a] = 0 (the semiring's one) for each allowed label a of i
    base = semiring.fill(allowed, torch.float64)  # (B, N+1, M, *E)
    cr_s = cr_e = cl_s = cl_e = base.unsqueeze(2)
    ir_s = il_e = None
    complete, incomplete = [base], [None]  # CR and IR of each width, by start (for the root and the tail)
    for w in range(1, K + 1):
        right, left = width(w)
        # what width w reads: the spans that start before N+1-w (by start) or end after w-1 (by end)
        cr_s, cl_s, cr_e, cl_e = _first(cr_s), _first(cl_s), _last(cr_e), _last(cl_e)
        # inner(s, t, a, c) = (+)_{r=s..t-1} CR[s, r, a] * CL[r+1, t, c]
        inner = semiring.sum(cr_s.unsqueeze(4) + cl_e.unsqueeze(3), (2,))
        # IR[s, t, a, c] = inner(s, t, a, c) * s[s -> t, a, c]
        ir = inner + right
        # IL[s, t, a, c] = inner(s, t, a, c) * s[t -> s, c, a]    (never into the root: left[:, 0] is zero)
        il = inner + left
        ir_s = ir.unsqueeze(2) if ir_s is None else torch.cat([_first(ir_s), ir.unsqueeze(2)], 2)
        il_e = il.unsqueeze(2) if il_e is None else torch.cat([il.unsqueeze(2), _last(il_e)], 2)
        # CR[s, t, a] = (+)_{r=s+1..t, c} IR[s, r, a, c] * CR[r, t, c]
        cr = semiring.sum(ir_s + cr_e.unsqueeze(3), (2, 4))
        # CL[s, t, c] = (+)_{r=s..t-1, a} CL[s, r, a] * IL[r, t, a, c]
        cl = semiring.sum(cl_s.unsqueeze(4) + il_e, (2, 3))
        cr_s, cr_e = torch.cat([cr_s, cr.unsqueeze(2)], 2), torch.cat([cr.unsqueeze(2), cr_e], 2)
        cl_s, cl_e = torch.cat([cl_s, cl.unsqueeze(2)], 2), torch.cat([cl.unsqueeze(2), cl_e], 2)
        complete.append(cr), incomplete.append(ir)
    lengths = problem.lengths
    batch = torch.arange(len(lengths), device=lengths.device)
    if K >= n1 - 1:  # log Z = CR[0, n, 0]
        return torch.stack([cr[:, 0] for cr in complete], 1)[batch, lengths, 0]
    # with max_dist, the tail T[i] = CR[i, n] (only right-complete items that end at n can be wider than K):
    # T[i, a] = CR[i, n, a] if n - i <= K, else (+)_{r=i+1..i+K, c} IR[i, r, a, c] * T[r, c]
    complete = torch.stack([_pad(cr, w) for w, cr in enumerate(complete)], 2)  # (B, N+1, K+1, M, *E)
    incomplete = torch.stack([_pad(ir, w) for w, ir in enumerate(incomplete) if w], 2)  # (B, N+1, K, M, M, *E)
    nothing = torch.full_like(base[:, 0], NEG)
    tail: List[Tensor] = [nothing] * K
    for i in range(n1 - 1, -1, -1):
        rest = semiring.sum(incomplete[:, i] + torch.stack(tail[-1 : -K - 1 : -1], 1).unsqueeze(2), (1, 3))
        dist = _per_sentence(lengths - i, rest)
        near = complete[batch, i, (lengths - i).clamp(0, K)]
        tail.append(torch.where(dist > K, rest, torch.where(dist >= 0, near, nothing)))
    return tail[-1][:, 0]  # log Z = T[0, 0]


def _first(chart: Tensor) -> Tensor:
    """A chart (B, S, ...) without its last span (a split, whose backward pass does not fill a whole chart)."""
    return chart.split([chart.shape[1] - 1, 1], 1)[0]


def _last(chart: Tensor) -> Tensor:
    """A chart (B, S, ...) without its first span."""
    return chart.split([1, chart.shape[1] - 1], 1)[1]


def _pad(items: Tensor, w: int) -> Tensor:
    """Items of width w by start (B, N+1-w, ...), padded with -inf to (B, N+1, ...)."""
    return torch.nn.functional.pad(items, (0, 0) * (items.dim() - 2) + (0, w), value=NEG)


def _per_sentence(values: Tensor, like: Tensor) -> Tensor:
    """``values`` (B,) shaped to broadcast against ``like`` (B, ...)."""
    return values.reshape(-1, *(1,) * (like.dim() - 1))


def _decode_marks(marks, problem: "_Problem") -> Tuple[Tensor, Tensor]:
    """labels, heads (B, N) of the arcs the Viterbi gradient ``marks`` (right, left per width) picked: each
    dependent has one marked arc (0 everywhere for an impossible sentence)."""
    B, n1, M = problem.allowed.shape
    value = torch.zeros(B, n1, device=problem.allowed.device)
    labels = torch.zeros(B, n1, dtype=torch.long, device=value.device)
    heads = torch.zeros(B, n1, dtype=torch.long, device=value.device)
    for w in range(1, problem.limit + 1):
        right, left = (value.new_zeros(B, n1 - w, M, M) if g is None else g.detach() for g in marks[2 * w - 2 : 2 * w])
        for marked, deps, head, pick in ((right, slice(w, n1), -w, lambda i: i % M),
                                         (left, slice(0, n1 - w), w, lambda i: i // M)):
            top, index = marked.flatten(2).max(-1)  # (B, S): at most one arc per span and direction
            hit = top > value[:, deps]
            value[:, deps] = torch.where(hit, top, value[:, deps])
            labels[:, deps] = torch.where(hit, pick(index), labels[:, deps])
            heads[:, deps] = torch.where(hit, torch.arange(n1, device=value.device)[deps] + head, heads[:, deps])
    return labels[:, 1:], heads[:, 1:]


def _marginals(scores, lengths, label_mask, max_dist, arc_mask, lane):
    """The arc marginals (unnormalised), the label marginals and each token's normalising factor (B, N)."""
    directional = isinstance(scores, DirectionalScores)
    tensor = scores.F if directional else scores
    check_scores(tensor)
    with torch.enable_grad():
        leaf = tensor.detach().requires_grad_(True)
        bias = scores.distance_bias.detach() if directional and scores.distance_bias is not None else None
        given = DirectionalScores(leaf, bias, scores.token_independent) if directional else leaf
        log_z = log_partition(given, lengths, label_mask=label_mask, max_dist=max_dist, arc_mask=arc_mask, lane=lane)
        (arcs,) = torch.autograd.grad(log_z.sum(), leaf)
    labels = arcs.sum(dim=(2, 3)) if directional else arcs.sum(dim=(1, 3))[:, 1:]
    factor = _sum_to_one(labels)
    return arcs, labels * factor.unsqueeze(-1), factor


def _sum_to_one(labels: Tensor) -> Tensor:
    """(B, N) the factor that makes each token's label marginals (B, N, M) sum to 1 (0 where they are all 0):
    every token of a possible sentence has one head and one label, so dividing by the computed sum removes
    the rounding that tied structures pick up at large scores."""
    total = labels.sum(-1)
    return torch.where(total > 0, 1.0 / total, 0.0)


# -- inputs -------------------------------------------------------------------------------------------


class _Arcs:
    """The arcs of one width at a time, masked: :meth:`width`. ``allowed`` (B, N+1, M) the labels of each
    position (none past a sentence's end), ``arc_mask`` (B or 1, N+1, N+1) or None."""

    def __init__(self, scores, allowed: Tensor, arc_mask: Optional[Tensor]):
        self.scores, self.allowed, self.arc_mask = scores, allowed, arc_mask
        self.diagonals = None

    def raw(self, w: int) -> Tuple[Tensor, Tensor]:
        """The arcs of width w as the scores hold them, (B, S, M, M) each [label of start, label of end]:
        right s -> s+w, left s+w -> s."""
        if not isinstance(self.scores, DirectionalScores):
            if self.diagonals is None:  # every width's arcs in one gather per direction (one backward op each)
                n1 = self.scores.shape[1]
                start = torch.cat([torch.arange(n1 - v) for v in range(1, n1)]).to(self.scores.device)
                end = start + torch.cat([torch.full((n1 - v,), v) for v in range(1, n1)]).to(start.device)
                sizes = [n1 - v for v in range(1, n1)]
                right = self.scores[:, start, end].split(sizes, 1)  # [b, s, a, c] = scores[b, s, s+w, a, c]
                left = self.scores[:, end, start].transpose(-1, -2).split(sizes, 1)  # = scores[b, s+w, s, c, a]
                self.diagonals = (right, left)
            return self.diagonals[0][w - 1], self.diagonals[1][w - 1]
        F, bias = self.scores.F, self.scores.distance_bias
        B, N, _, _, M = F.shape
        column = None if bias is None else min(w, bias.shape[1]) - 1
        tokens_right, tokens_left = F[:, w:, 0, 1:], F[:, : N - w, 1, 1:].transpose(-1, -2)
        if bias is not None:  # between tokens only, added in float64 (as the compiled lanes add it)
            bias = bias.to(torch.float64)
            tokens_right = tokens_right.to(torch.float64) + bias[0, column]
            tokens_left = tokens_left.to(torch.float64) + bias[1, column]
        root = F[:, w - 1 : w, 0, 0, None, :].expand(B, 1, M, M).to(tokens_right.dtype)  # root -> w, label 0
        return torch.cat([root, tokens_right], 1), torch.cat([root, tokens_left], 1)  # (left[:, 0]: masked)

    def ok(self, w: int) -> Tuple[Tensor, Tensor]:
        """(B, S, M, M) bool each: which arcs of width w (and label pairs) exist."""
        start, end = self.allowed[:, :-w], self.allowed[:, w:]
        pairs = start[..., :, None] & end[..., None, :]
        right, left = pairs, pairs.clone()
        left[:, 0] = False  # never into the root
        if self.arc_mask is not None:
            right = right & self.arc_mask.diagonal(w, 1, 2)[..., None, None]
            left = left & self.arc_mask.diagonal(-w, 1, 2)[..., None, None]
        return right, left

    def width(self, w: int) -> Tuple[Tensor, Tensor]:
        """The arcs of width w with the disallowed ones at -inf (whatever the scores hold there), in float64
        (the recurrences run in float64 whatever the scores' dtype: a float32 item of magnitude 1e4 holds
        only 3 decimals, too few for the marginals)."""
        return tuple(torch.where(ok, arc.to(torch.float64), NEG) for arc, ok in zip(self.raw(w), self.ok(w)))


class _Problem(NamedTuple):
    arcs: _Arcs
    allowed: Tensor  # (B, N+1, M) bool: the labels each position may take (the root: label 0)
    lengths: Tensor  # (B,) long, 0 for impossible sentences
    impossible: Tensor  # (B,) bool
    limit: int  # K, the longest arc
    dtype: torch.dtype  # of the scores (and the results); the recurrences run in float64
    device: torch.device
    masked: bool  # a label or an arc mask was given


def _prepare(scores, lengths, label_mask, arc_mask, max_dist) -> _Problem:
    """Check the inputs; the arcs, allowed labels and lengths the recurrences read."""
    if isinstance(scores, DirectionalScores):
        tensor = scores.F if scores.factors is None else scores.factors[0]
        check_scores(tensor, "directional scores")
        if scores.distance_bias is not None:
            check_scores(scores.distance_bias, "distance_bias")
            if not bool(torch.isfinite(scores.distance_bias).all()):
                raise ValueError(f"distance_bias must be finite, got {scores.distance_bias.tolist()}")
    else:
        check_scores(scores)
        if scores.dim() != 5 or scores.shape[1] != scores.shape[2] or scores.shape[3] != scores.shape[4]:
            raise ValueError(f"scores must have shape (B, N+1, N+1, M, M), got {tuple(scores.shape)}")
        tensor = scores
    batch, n1, _, m, _ = scores.shape
    device = tensor.device
    lengths = check_lengths(lengths, batch, n1 - 1, device)
    if max_dist is not None and (isinstance(max_dist, bool) or int(max_dist) != max_dist or max_dist < 1):
        raise ValueError(f"max_dist must be a positive integer (or None), got {max_dist!r}")
    limit = n1 - 1 if max_dist is None else min(int(max_dist), n1 - 1)
    if arc_mask is not None:
        if arc_mask.dim() != 3 or arc_mask.shape[0] not in (1, batch) or tuple(arc_mask.shape[1:]) != (n1, n1):
            raise ValueError(f"arc_mask must have shape ({batch} or 1, {n1}, {n1}), got {tuple(arc_mask.shape)}")
        arc_mask = arc_mask.to(device=device, dtype=torch.bool)
    mask = check_label_mask(label_mask, (batch, n1, m))
    positions = torch.arange(n1, device=device)
    real = (positions[None, :] >= 1) & (positions[None, :] <= lengths[:, None])  # (B, N+1) tokens
    allowed = real[..., None].expand(batch, n1, m) if mask is None else real[..., None] & mask.to(device)
    impossible = (real & ~allowed.any(-1)).any(-1)  # a token that allows no label
    lengths = torch.where(impossible, 0, lengths)
    allowed = allowed & (positions[None, :] <= lengths[:, None])[..., None]
    root = torch.zeros(m, dtype=torch.bool, device=device)
    root[0] = True
    allowed = torch.cat([root.expand(batch, 1, m), allowed[:, 1:]], dim=1)  # the root carries label 0
    return _Problem(_Arcs(scores, allowed, arc_mask), allowed, lengths, impossible, limit, tensor.dtype, device,
                    mask is not None or arc_mask is not None)


def _pick(scores, problem: _Problem, semiring: Semiring, lane: Optional[str]) -> str:
    """The lane for these inputs, or ``lane`` itself (a ValueError where it cannot take them). The max
    semiring has a compiled lane for DirectionalScores (:func:`viterbi`), the log semiring for both forms."""
    directional = isinstance(scores, DirectionalScores)
    viterbi = isinstance(semiring, MaxSemiring)
    on_cpu = ((type(semiring) is LogSemiring or viterbi) and problem.device.type == "cpu" and problem.limit >= 1
              and compiled.available())
    compiled_case = on_cpu and not problem.masked
    one_label = not directional and scores.shape[-1] == 1 and not viterbi
    fits = compiled_case and (directional or one_label)
    # a label mask alone folds into the emissions of factored scores (DirectionalScores.with_label_mask)
    folded = (on_cpu and problem.masked and problem.arcs.arc_mask is None and not viterbi and directional
              and scores.factors is not None)
    if folded:
        best = "factored"
    elif not fits:
        best = "reference"
    elif directional:
        best = "factored" if scores.token_independent and not viterbi else "compiled"
    else:
        longest = int(problem.lengths.max()) if len(problem.lengths) else 0  # (the loop's cost is per sentence)
        best = "compiled" if longest <= ONE_LABEL_UP_TO else "reference"
    if lane is None or lane == best:
        return best
    if lane not in LANES:
        raise ValueError(f"lane must be one of {LANES} or None, got {lane!r}")
    if lane == "reference" or (lane == "compiled" and fits):
        return lane
    raise ValueError(f"lane {lane!r} cannot take these inputs: it needs DirectionalScores"
                     f"{' with token_independent' if lane == 'factored' else ' or dense one-label scores'} on the "
                     "CPU, the log semiring (or Viterbi: DirectionalScores), no arc mask and no label mask (a label "
                     "mask is taken by the factored lane on scores given as factors)")


def _bad_arc(problem: _Problem, b: int) -> str:
    """The first arc of sentence b that is read and holds +inf or NaN."""
    arcs = problem.arcs
    for w in range(1, problem.limit + 1):
        for name, raw, ok in zip(("right", "left"), arcs.raw(w), arcs.ok(w)):
            raw = raw.detach()
            bad = (torch.isnan(raw[b]) | (raw[b] == float("inf"))) & ok[b]
            if bool(bad.any()):
                s, a, c = bad.nonzero()[0].tolist()
                head, dep = (s, s + w) if name == "right" else (s + w, s)
                head_label, dep_label = (a, c) if name == "right" else (c, a)
                where = (f"DirectionalScores F[{b}, {dep - 1}, {int(head > dep)}, {head_label + 1 if head else 0}, "
                         f"{dep_label}]" if isinstance(arcs.scores, DirectionalScores)
                         else f"scores[{b}, {head}, {dep}, {head_label}, {dep_label}]")
                return f"the arc {head} -> {dep} (labels {head_label}, {dep_label}) is {raw[b][s, a, c].item()} ({where})"
    return "its result is not finite"
