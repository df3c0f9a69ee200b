"""The tree's compiled inside and outside passes (numba), one loop per sentence, for
:class:`~.tree.DirectionalScores` on the CPU without a label or arc mask (:func:`log_partition`,
:func:`label_marginals`); the compiled decoders are in :mod:`.compiled_decoders`.

Same recurrences as the reference in :mod:`.tree` (docs/algorithm.md), sentence by sentence, in float64:

- inner(s, t)[a, c] = log sum_{k=s..t-1} exp(CR[s, k, a] + CL[k+1, t, c])
- IR[s, t][a, c] = inner(s, t)[a, c] + arc(s -> t, a, c);  IL[s, t][a, c] = inner(s, t)[a, c] + arc(t -> s, c, a)
- CR[s, t][a] = log sum_{d=1..w, c} exp(IR[s, s+d][a, c] + CR[s+d, t][c])
- CL[s, t][c] = log sum_{e=0..w-1, a} exp(CL[s, s+e][a] + IL[s+e, t][a, c])
- T[i][a] = CR[i, n][a] for n - i <= K, else log sum_{d=1..K, c} exp(IR[i, i+d][a, c] + T[i+d][c]);  log Z = T[0][0]

Every item is held as values v and a float64 shift: item = log(v) + shift (the complete items' largest
value is 1; the incomplete items keep their totals, at most the number of splits). A contraction sums
exp-space products with one scale factor per split (a matrix-vector product, no exp per term). If any of
its totals falls below ``THRESHOLD`` relative to its scale (where float64 could lose the digits of a term),
the item is recomputed in log space from its operands' exact log values and kept in log form as well
("flagged"); its consumers then read those. So the results are exact at any score scale, like the
reference's, and only the far tails of extreme score scales pay for log space.

The outside pass goes over the same items in reverse and gives d log Z / d item, the item's marginal. A
split's share of an item is term / total: in exp space (g / total) * scale * v_x * v_y, which is at most g;
for a flagged item exp(x + y - item) in log space. The incomplete items' marginals are the arc marginals,
which are the gradient of F (and, summed per width and direction, of the distance bias (2, K), which the
kernel reads as the same value for every label pair).
"""
import importlib.util
from typing import Optional, Tuple

import numpy as np
import torch

from . import compiled_subtrees


Tensor = torch.Tensor

#: a total below this (relative to its contraction's scale) is recomputed in log space: far above float64's
#: smallest normal number (2.2e-308), so every term that underflowed or is subnormal is negligible beside it
THRESHOLD = 1e-280
#: the longest arcs (``limit``, or the batch's longest sentence if shorter) the subtree messages take: their sums
#: grow as k^3 M a token (the item-by-item loop's work as k^2 M^2), and from about 12 on the latter is as fast
#: (``python -m projects.paper.scripts.kernel_floor --max-dist K``: 2-3x faster at k = 3, even at 12, slower at 30)
SUBTREES_UP_TO = 12


def available() -> bool:
    """Whether the compiled kernel can run here: numba is installed (a dependency; without it, an unusual
    install, the reference computes everything). numba itself is imported on first use only."""
    return importlib.util.find_spec("numba") is not None


def log_partition(scores, lengths: Tensor, limit: int, factored: bool) -> Tensor:
    """log Z (B,) of :class:`~.tree.DirectionalScores` (CPU, no masks; ``lengths`` 0 for impossible
    sentences), differentiable with respect to F and the distance bias; ``factored``: read as emissions
    plus one table (``token_independent`` scores, see :func:`_factors`)."""
    factors = _factors(scores, lengths) if factored else None
    if factors is not None:
        return _FactoredInside.apply(*factors, scores.distance_bias, lengths, limit)
    return _Inside.apply(scores.F, scores.distance_bias, lengths, limit)


def label_marginals(scores, lengths: Tensor, limit: int, factored: bool) -> Optional[Tensor]:
    """The label marginals (B, N, M) float64, unnormalised (the arc marginals into each token, summed), or
    None if log Z is not finite somewhere (+inf or NaN read: the reference names it)."""
    bias = scores.distance_bias
    factors = _factors(scores, lengths) if factored else None
    if factors is not None:
        log_z, packed, _, _, real = _factored_pass(*factors, bias, lengths, limit, True, labels_only=True)
    else:
        log_z, _, _, packed, real = inside_outside(scores.F, bias, lengths, limit, True, with_arcs=False)
    if not bool((torch.isfinite(log_z) | torch.isneginf(log_z)).all()):
        return None
    labels = torch.zeros(real.shape + (scores.shape[-1],), dtype=torch.float64)
    labels[real] = packed
    return labels


def _factored_pass(emissions: Tensor, table: Tensor, bias: Optional[Tensor], lengths: Tensor, limit: int,
                   with_grad: bool, labels_only: bool = False
                   ) -> Tuple[Tensor, Optional[Tensor], Optional[Tensor], Optional[Tensor], Tensor]:
    """:func:`inside_outside_factored`'s results, by the subtree messages (:mod:`.compiled_subtrees`) for the
    sentences they take and by :func:`inside_outside_factored` for those they leave (a total that could have
    lost digits, a score that is not finite); arcs longer than ``SUBTREES_UP_TO`` go to the latter whole."""
    B, M = emissions.shape[0], emissions.shape[-1]
    longest = int(lengths.max()) if B else 0
    if min(int(limit), longest) > SUBTREES_UP_TO:
        return inside_outside_factored(emissions, table, bias, lengths, limit, with_grad, labels_only)
    real, packed, tab = _packed_factors(emissions, table, lengths)
    lens, offsets, b64 = _layout(lengths, bias)
    params = with_grad and not labels_only
    log_z, done = np.zeros(B), np.zeros(B, dtype=np.bool_)
    labels = np.zeros(packed.shape if with_grad else (0, M))
    grad_table = np.zeros((B, 2, M + 1, M) if params else (0, 2, 1, 1))
    grad_bias = np.zeros((B, 2, b64.shape[1]) if params and bias is not None else (0, 2, 0))
    compiled_subtrees.inside_outside(packed, tab, b64, offsets, lens, int(limit), THRESHOLD, with_grad, log_z, done,
                                     labels, grad_table, grad_bias)
    log_z, done = torch.from_numpy(log_z), torch.from_numpy(done)
    out = [torch.from_numpy(x) for x in (labels, grad_table, grad_bias)]
    if not bool(done.all()):
        left = ~done
        rest = inside_outside_factored(emissions[left], table, bias, lengths[left], limit, with_grad, labels_only)
        log_z[left] = rest[0]
        if with_grad:
            out[0][(real & left[:, None])[real]] = rest[1]
            if params:
                out[1][left] = rest[2]
                if bias is not None:
                    out[2][left] = rest[3]
    if not with_grad:
        return log_z, None, None, None, real
    return log_z, out[0], out[1] if params else None, out[2] if params else None, real


def _factors(scores, lengths: Tensor) -> Optional[Tuple[Tensor, Tensor]]:
    """For token-independent DirectionalScores: (emissions (B, N, M), table (2, M+1, M)) with F[b, d, x, a, c] =
    emissions[b, d, c] + table[x, a, c]: their :attr:`~.tree.DirectionalScores.factors` where they were given
    so; else the emissions are F[:, :, 0, 1] (F's dtype, so that log Z keeps it) and the table is the first
    real token's F relative to that row (the difference taken in float64, where it is exact), differentiable
    functions of F. None if no sentence has a token."""
    filled = (lengths > 0).nonzero()
    if len(filled) == 0:
        return None
    if scores.factors is not None:
        return scores.factors
    F = scores.F
    first = F[int(filled[0]), 0].to(torch.float64)  # (2, M+1, M)
    return F[:, :, 0, 1], first - first[0, 1]


class _FactoredInside(torch.autograd.Function):
    """log Z (B,) by the compiled inside pass on emissions (B, N, M) and one table (2, M+1, M); the outside
    pass runs in the same call when a gradient will be asked for (the label marginals for the emissions,
    the summed arc marginals for the table)."""

    @staticmethod
    def forward(ctx, emissions: Tensor, table: Tensor, bias: Optional[Tensor], lengths: Tensor, limit: int) -> Tensor:
        with_grad = any(ctx.needs_input_grad[:3])
        log_z, d_emissions, d_table, d_bias, real = _factored_pass(emissions, table, bias, lengths, limit, with_grad)
        ctx.grads, ctx.real, ctx.shape = (d_emissions, d_table, d_bias), real, emissions.shape
        ctx.dtypes = (emissions.dtype, table.dtype, None if bias is None else bias.dtype)
        return log_z.to(emissions.dtype)

    @staticmethod
    def backward(ctx, grad_root: Tensor):
        d_emissions, d_table, d_bias = ctx.grads  # float64; emissions packed over the real tokens
        scale = grad_root.to(torch.float64)
        out_e = out_t = out_b = None
        if ctx.needs_input_grad[0]:
            out_e = torch.zeros(ctx.shape, dtype=torch.float64)
            out_e[ctx.real] = d_emissions * scale[:, None].expand(ctx.real.shape)[ctx.real][:, None]
            out_e = out_e.to(ctx.dtypes[0])
        if ctx.needs_input_grad[1]:
            out_t = (d_table * scale.reshape(-1, 1, 1, 1)).sum(0).to(ctx.dtypes[1])
        if ctx.needs_input_grad[2]:
            out_b = (d_bias * scale.reshape(-1, 1, 1)).sum(0).to(ctx.dtypes[2])
        return out_e, out_t, out_b, None, None


class _Inside(torch.autograd.Function):
    """log Z (B,) by the compiled inside pass; its outside pass runs in the same call when a gradient will
    be asked for, and the backward pass only scales it."""

    @staticmethod
    def forward(ctx, F: Tensor, bias: Optional[Tensor], lengths: Tensor, limit: int) -> Tensor:
        with_grad = any(ctx.needs_input_grad[:2])
        log_z, grad, grad_bias, _, real = inside_outside(F, bias, lengths, limit, with_grad)
        ctx.grads, ctx.real, ctx.shape = (grad, grad_bias), real, F.shape
        return log_z.to(F.dtype)

    @staticmethod
    def backward(ctx, grad_root: Tensor):
        grad, grad_bias = ctx.grads  # packed over the real tokens, float64
        scale = grad_root.to(torch.float64)
        d_F = d_bias = None
        if ctx.needs_input_grad[0]:
            if not bool((scale == 1.0).all()):  # (a loss's sum of log Z: all 1, nothing to scale)
                grad = grad * scale[:, None].expand(ctx.real.shape)[ctx.real].reshape(-1, 1, 1, 1)
            d_F = grad_root.new_zeros(ctx.shape)
            d_F[ctx.real] = grad.to(grad_root.dtype)
        if ctx.needs_input_grad[1]:
            d_bias = (grad_bias * scale.reshape(-1, 1, 1)).sum(0).to(grad_root.dtype)
        return d_F, d_bias, None, None


def inside_outside(F: Tensor, bias: Optional[Tensor], lengths: Tensor, limit: int, with_grad: bool,
                   with_arcs: bool = True) -> Tuple[Tensor, Optional[Tensor], Optional[Tensor], Optional[Tensor], Tensor]:
    """For DirectionalScores F (B, N, 2, M+1, M) (any float dtype, CPU), distance bias (2, K_b) or None,
    lengths (B,) and the longest arc ``limit`` (>= 1): log Z (B,) float64; with ``with_grad`` the
    gradient of log Z, packed over the real tokens in the order of ``real``: d log Z / d F (T, 2, M+1, M) if
    ``with_arcs``, d log Z / d bias per sentence (B, *bias.shape), and otherwise the label marginals (T, M) (the
    arc marginals into each token, summed); and ``real`` (B, N) bool, the positions F is read at (only
    they are copied). All float64."""
    B, N = F.shape[:2]
    real = torch.arange(N, device=lengths.device)[None, :] < lengths[:, None]  # (B, N): the tokens read
    packed = np.ascontiguousarray(F.detach()[real].to(torch.float64).numpy())  # (T, 2, M+1, M), doc by doc
    arcs = with_grad and with_arcs
    grad = np.zeros(packed.shape) if arcs else np.zeros((0, 2, 1, 1))
    m = F.shape[-1]
    log_z, grad_bias, labels, _ = _run(packed, np.zeros((0, m)), np.zeros((2, 1, 1)), bias, lengths, limit, m,
                                       with_grad, arcs, grad, with_grad and not arcs, False, arcs)
    if not with_grad:
        return torch.from_numpy(log_z), None, None, None, real
    return (torch.from_numpy(log_z), torch.from_numpy(grad) if arcs else None, torch.from_numpy(grad_bias),
            None if arcs else torch.from_numpy(labels), real)


def inside_outside_factored(emissions: Tensor, table: Tensor, bias: Optional[Tensor], lengths: Tensor, limit: int,
                            with_grad: bool, labels_only: bool = False
                            ) -> Tuple[Tensor, Optional[Tensor], Optional[Tensor], Optional[Tensor], Tensor]:
    """As :func:`inside_outside` for scores F[b, d, x, h, c] = emissions[b, d, c] + table[x, h, c] (emissions
    (B, N, M), table (2, M+1, M), given apart: the kernel exponentiates M numbers per token and the table
    once, and never reads an (M+1) M block per token). Returns log Z (B,); with ``with_grad`` d log Z /
    d emissions packed over the real tokens (T, M) (the label marginals), d log Z / d table per sentence
    (B, 2, M+1, M) and d log Z / d bias per sentence (B, *bias.shape) (both empty with ``labels_only``); and
    ``real``. All float64."""
    real, packed, tab = _packed_factors(emissions, table, lengths)
    log_z, grad_bias, labels, grad_table = _run(np.zeros((0, 2, 1, 1)), packed, tab, bias, lengths, limit,
                                                emissions.shape[-1], with_grad, False, np.zeros((0, 2, 1, 1)),
                                                with_grad, with_grad and not labels_only, not labels_only)
    if not with_grad:
        return torch.from_numpy(log_z), None, None, None, real
    return (torch.from_numpy(log_z), torch.from_numpy(labels), torch.from_numpy(grad_table),
            torch.from_numpy(grad_bias), real)


def _packed_factors(emissions: Tensor, table: Tensor, lengths: Tensor) -> Tuple[Tensor, np.ndarray, np.ndarray]:
    """``real`` (B, N), the emissions packed over the real tokens, sentence by sentence (T, M), and the table
    (2, M+1, M), both float64 and contiguous, as the compiled loops read them."""
    real = torch.arange(emissions.shape[1], device=lengths.device)[None, :] < lengths[:, None]
    packed = np.ascontiguousarray(emissions.detach()[real].to(torch.float64).numpy())
    return real, packed, np.ascontiguousarray(table.detach().to(torch.float64).cpu().numpy())


def _layout(lengths: Tensor, bias: Optional[Tensor]) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The sentences' lengths (B,) int64, each one's first row in the packed scores (B,), and the distance bias
    float64 (2, Kb), (2, 0) for none."""
    lens = np.ascontiguousarray(lengths.detach().cpu().numpy().astype(np.int64))
    offsets = np.zeros(lens.shape[0], dtype=np.int64)
    offsets[1:] = np.cumsum(lens)[:-1]
    b64 = np.zeros((2, 0)) if bias is None else np.ascontiguousarray(bias.detach().to(torch.float64).cpu().numpy())
    return lens, offsets, b64


def _run(packed, emissions, table, bias, lengths, limit, M, with_grad, arcs, grad, with_labels, with_table,
         with_bias_grad):
    """Call the kernel on packed scores (dense ``packed`` or, when ``emissions`` has rows, the factored
    pair) with M labels; returns log Z, the bias gradient per sentence (shaped like the bias, or empty without
    ``with_bias_grad``), the label marginals and the table gradient."""
    lens, offsets, b64 = _layout(lengths, bias)
    B = lens.shape[0]
    T = emissions.shape[0] if emissions.shape[0] else packed.shape[0]
    log_z = np.zeros(B)
    grad_bias = (np.zeros((B, 2, b64.shape[1])) if with_grad and with_bias_grad and bias is not None
                 else np.zeros((0, 2, 0)))
    labels = np.zeros((T, M)) if with_labels else np.zeros((0, 1))
    grad_table = np.zeros((B, 2, M + 1, M)) if with_table else np.zeros((0, 2, 1, 1))
    _kernel()(packed, emissions, table, offsets, b64, lens, int(limit), with_grad, arcs, log_z, grad,
              grad_bias, labels, grad_table)
    return log_z, grad_bias, labels, grad_table


_compiled = None


def _kernel():
    """The compiled batch loop (compiled on first use, cached on disk by numba), its helpers compiled
    first: the loop reads them as module globals."""
    global _compiled
    if _compiled is None:
        from numba import njit

        for name in ("_lg", "_factor", "_lgc", "_lgi", "_lgt", "_arc"):
            globals()[name] = njit(globals()[name])
        for name in ("_lse", "_normalise", "_encode", "_finish_incomplete", "_product"):
            globals()[name] = njit(error_model="numpy")(globals()[name])
        _compiled = njit(cache=True, nogil=True, error_model="numpy", fastmath={"reassoc", "contract"})(_batch)
    return _compiled


def _factor(p, top):
    """exp(p - top), 0 for p = -inf (also when top is -inf: every split impossible)."""
    return np.exp(p - top) if p != -np.inf else 0.0


def _lse(terms, count):
    """log sum exp of terms[:count]: -inf if every term is -inf, NaN if one is NaN."""
    top = -np.inf
    for i in range(count):
        if terms[i] > top or terms[i] != terms[i]:  # NaN is kept
            top = terms[i]
    if top == -np.inf:
        return top
    total = 0.0
    for i in range(count):
        total += np.exp(terms[i] - top)
    return np.log(total) + top


def _arc(F, Fe, Ft, row, x, h, c):
    """The score F[row, x, h, c] of the packed scores: dense, or emissions + table (when ``Fe`` has rows)."""
    return Fe[row, c] + Ft[x, h, c] if Fe.shape[0] > 0 else F[row, x, h, c]


def _lg(v, shift):
    """log(v) + shift, -inf for v = 0 (NaN stays NaN, so that a bad score is found)."""
    return np.log(v) + shift if v != 0.0 else -np.inf  # NaN stays NaN


def _batch(F, Fe, Ft, offsets, bias, lengths, limit, with_grad, with_arcs, log_z, grad, grad_bias,  # noqa: C901
           labels, grad_table):  # one recurrence per block
    B = lengths.shape[0]
    factored = Fe.shape[0] > 0  # F[row, x, h, c] = Fe[row, c] + Ft[x, h, c]
    with_table = grad_table.shape[0] > 0
    N = 1
    for b in range(B):
        N = max(N, lengths[b])
    M = Fe.shape[1] if factored else F.shape[3]
    Kb = bias.shape[1]
    neg = -np.inf
    # the distance bias (2, Kb) [x, length]: the same for every label pair, so it goes into the span's shift
    # (Btop[x, k]) and, for the exact log-space recomputation, into (M, M) blocks laid out as the incomplete
    # items ([k, a, c]: s has label a, t has c): right_bias[k] (s -> t) and left_bias[k] (t -> s)
    right_bias, left_bias = np.zeros((Kb, M, M)), np.zeros((Kb, M, M))
    Btop = np.zeros((2, Kb))
    zero_bias = np.zeros((M, M))
    for k in range(Kb):
        Btop[0, k], Btop[1, k] = bias[0, k], bias[1, k]
        right_bias[k] = bias[0, k]
        left_bias[k] = bias[1, k]
    KK = max(1, min(limit, N))
    P = N + 1
    # charts, [start, width, ...]; *s: shift, *p: scale before normalisation, *f: flagged, *l: exact logs
    CRv, CLv = np.zeros((P, KK + 1, M)), np.zeros((P, KK + 1, M))
    CRs, CLs, CRp, CLp = np.zeros((P, KK + 1)), np.zeros((P, KK + 1)), np.zeros((P, KK + 1)), np.zeros((P, KK + 1))
    CRf, CLf = np.zeros((P, KK + 1), np.bool_), np.zeros((P, KK + 1), np.bool_)
    CRl, CLl = np.zeros((P, KK + 1, M)), np.zeros((P, KK + 1, M))
    # the (M, M) charts are left uninitialised (np.empty: no page is touched before it is written): every element
    # is written before it is read, the logs (*l) only where an item is flagged, and rows a >= 1 of the spans from
    # the root (s = 0) are never read
    It, Il = np.empty((P, KK + 1, M, M)), np.empty((P, KK + 1, M, M))  # inner totals (unnormalised), logs
    Is, If = np.zeros((P, KK + 1)), np.zeros((P, KK + 1), np.bool_)
    IRv, ILv = np.empty((P, KK + 1, M, M)), np.empty((P, KK + 1, M, M))
    IRl, ILl = np.empty((P, KK + 1, M, M)), np.empty((P, KK + 1, M, M))
    IRs, ILs = np.zeros((P, KK + 1)), np.zeros((P, KK + 1))
    IRf, ILf = np.zeros((P, KK + 1), np.bool_), np.zeros((P, KK + 1), np.bool_)
    Tv, Tl = np.zeros((P, M)), np.zeros((P, M))
    Ts, Tp, Tf = np.zeros(P), np.zeros(P), np.zeros(P, np.bool_)
    # exp(F - largest) per dependent: [t-1, 0, a, c] for the arcs s -> t from tokens (head label a), [t-1, 1, a, c]
    # for the arcs from the right into t (t's label a, the head's c), [t-1, c] for the root -> t
    E, Etop = np.empty((N, 2, M, M)), np.zeros((N, 2))
    # dead[t-1, c]: token t cannot take label c (its emission is -inf, factored scores): the arcs into it with
    # that label are exact zeros, not underflow, so their products are not flagged for log space
    dead, alive = np.zeros((N, M), np.bool_), np.zeros(M, np.bool_)
    Eroot, Eroot_top = np.zeros((N, M)), np.zeros(N)
    # outside: d log Z / d item
    gCR, gCL = np.zeros((P, KK + 1, M)), np.zeros((P, KK + 1, M))
    Pg = P if with_grad else 0  # (zeroed per sentence)
    gIR, gIL = np.empty((Pg, KK + 1, M, M)), np.empty((Pg, KK + 1, M, M))
    gT = np.zeros((P, M))
    tot, rho = np.zeros(M), np.zeros(M)
    terms = np.zeros((KK + 1) * M)  # the terms of one log-space sum
    rho2 = np.zeros((M, M))
    # factored scores: the table's exponentials, exp(Ft[x, 1 + h, a] - Ttop[x]) and exp(Ft[0, 0, c] - Rtop)
    ee, Et, Er = np.zeros(M), np.zeros((2, M, M)), np.zeros(M)
    Ttop, Rtop = np.zeros(2), neg
    if factored:
        for x in range(2):
            m = neg
            for h in range(M):
                for a in range(M):
                    if Ft[x, h + 1, a] > m:
                        m = Ft[x, h + 1, a]
            Ttop[x] = m
            for h in range(M):
                for a in range(M):
                    Et[x, h, a] = np.exp(Ft[x, h + 1, a] - m) if m > neg else 0.0
        for c in range(M):
            if Ft[0, 0, c] > Rtop:
                Rtop = Ft[0, 0, c]
        for c in range(M):
            Er[c] = np.exp(Ft[0, 0, c] - Rtop) if Rtop > neg else 0.0

    for b in range(B):
        n, o = lengths[b], offsets[b]
        if n <= 0:
            log_z[b] = 0.0
            continue
        K = min(KK, n)
        for t in range(n):  # arc exponentials, once per dependent (every width reads them)
            if factored:  # exp(Fe[t, c] - top) times the table's exponentials (computed once, below)
                m = neg
                for c in range(M):
                    if Fe[o + t, c] > m:
                        m = Fe[o + t, c]
                for c in range(M):
                    ee[c] = np.exp(Fe[o + t, c] - m) if m > neg else 0.0
                    dead[t, c] = Fe[o + t, c] == neg
                for x in range(2):
                    Etop[t, x] = m + Ttop[x]
                Eroot_top[t] = m + Rtop
                for h in range(M):
                    for a in range(M):
                        E[t, 0, h, a] = ee[a] * Et[0, h, a]
                        E[t, 1, a, h] = ee[a] * Et[1, h, a]
                for c in range(M):
                    Eroot[t, c] = ee[c] * Er[c]
                continue
            for x in range(2):
                m = neg
                for h in range(M):
                    for a in range(M):
                        if F[o + t, x, h + 1, a] > m:
                            m = F[o + t, x, h + 1, a]
                Etop[t, x] = m
                for h in range(M):
                    for a in range(M):
                        e = np.exp(F[o + t, x, h + 1, a] - m) if m > neg else 0.0  # a row of -inf: all 0
                        if x == 0:
                            E[t, 0, h, a] = e
                        else:
                            E[t, 1, a, h] = e
            m = neg
            for c in range(M):
                if F[o + t, 0, 0, c] > m:
                    m = F[o + t, 0, 0, c]
            Eroot_top[t] = m
            for c in range(M):
                Eroot[t, c] = np.exp(F[o + t, 0, 0, c] - m) if m > neg else 0.0
        # -- base items: CR[s, s] = CL[s, s] = 0 (the root: label 0 only) --------------------------
        for s in range(n + 1):
            CRs[s, 0] = CLs[s, 0] = CRp[s, 0] = CLp[s, 0] = 0.0
            CRf[s, 0] = CLf[s, 0] = False
            for a in range(M):
                CRv[s, 0, a] = 1.0 if (s > 0 or a == 0) else 0.0
                CLv[s, 0, a] = 1.0
        for w in range(1, K + 1):
            col = min(w, Kb) - 1  # the bias's column of width w (-1: no bias)
            top_r = Btop[0, col] if Kb > 0 else 0.0  # the shifts' part of the bias
            top_l = Btop[1, col] if Kb > 0 else 0.0
            bias_r = right_bias[col] if Kb > 0 else zero_bias  # [a, c] as the items are laid out
            bias_l = left_bias[col] if Kb > 0 else zero_bias
            # -- incomplete items of width w ------------------------------------------------------
            for s in range(n - w + 1):
                t = s + w
                ah = 1 if s == 0 else M  # the labels the span's start may take
                top = neg
                for k in range(s, t):
                    g = CRs[s, k - s] + CLs[k + 1, t - k - 1]
                    if g > top:
                        top = g
                inner = It[s, w]  # (rows ah..M-1 are never read)
                low = False
                for k in range(s, t):  # inner = sum_k scale_k * CR[s, k] (outer) CL[k+1, t]
                    f = _factor(CRs[s, k - s] + CLs[k + 1, t - k - 1], top)
                    x_row, y_row = CRv[s, k - s], CLv[k + 1, t - k - 1]
                    for a in range(ah):
                        x = f * x_row[a]
                        out = inner[a]
                        if k == s:
                            for c in range(M):
                                out[c] = x * y_row[c]
                        else:
                            for c in range(M):
                                out[c] += x * y_row[c]
                        if k == t - 1:
                            for c in range(M):
                                low |= out[c] < THRESHOLD
                Is[s, w] = top
                If[s, w] = low
                if low:  # exact: inner = log sum_k exp(CR[s, k, a] + CL[k+1, t, c])
                    for a in range(M):
                        for c in range(M):
                            acc = neg
                            if a < ah:
                                for k in range(s, t):
                                    terms[k - s] = (_lgc(CRf, CRl, CRv, CRs, s, k - s, a)
                                                    + _lgc(CLf, CLl, CLv, CLs, k + 1, t - k - 1, c))
                                acc = _lse(terms, w)
                            Il[s, w, a, c] = acc
                    Is[s, w] = _encode(Il[s, w].ravel(), It[s, w].ravel())
                # IR = inner + arc(s -> t)
                if s == 0:  # from the root: its label 0 only
                    shift = Is[s, w] + Eroot_top[t - 1]
                    IRv[s, w] = 0.0
                    low = False
                    for c in range(M):
                        v = inner[0, c] * Eroot[t - 1, c]
                        IRv[s, w, 0, c] = v
                        low |= (v < THRESHOLD) & ~dead[t - 1, c]
                else:
                    shift = Is[s, w] + Etop[t - 1, 0] + top_r
                    low = _product(inner, E[t - 1, 0], IRv[s, w], alive, dead[t - 1])
                _finish_incomplete(IRv, IRs, IRf, IRl, It, Il, If, Is, F, Fe, Ft, o, s, w, t, ah, shift, bias_r, True,
                                   low)
                if s > 0:  # IL = inner + arc(t -> s); the root is never a dependent
                    shift = Is[s, w] + Etop[s - 1, 1] + top_l
                    low = _product(inner, E[s - 1, 1], ILv[s, w], dead[s - 1], alive)
                    _finish_incomplete(ILv, ILs, ILf, ILl, It, Il, If, Is, F, Fe, Ft, o, s, w, t, M, shift, bias_l,
                                       False, low)
            # -- complete items of width w --------------------------------------------------------
            for s in range(n - w + 1):
                t = s + w
                ah = 1 if s == 0 else M
                # CR[s, t][a] = log sum_{d, c} exp(IR[s, s+d][a, c] + CR[s+d, t][c])
                top = neg
                for d in range(1, w + 1):
                    g = IRs[s, d] + CRs[s + d, w - d]
                    if g > top:
                        top = g
                for a in range(M):
                    tot[a] = 0.0
                for d in range(1, w + 1):
                    f = _factor(IRs[s, d] + CRs[s + d, w - d], top)
                    y_row = CRv[s + d, w - d]
                    for a in range(ah):
                        x_row = IRv[s, d, a]
                        acc = 0.0
                        for c in range(M):
                            acc += x_row[c] * y_row[c]
                        tot[a] += f * acc
                if _normalise(tot, ah, top, CRv, CRs, CRp, CRf, s, w):
                    for a in range(M):  # exact: log sum_{d, c} exp(IR[s, s+d][a, c] + CR[s+d, t][c])
                        acc = neg
                        if a < ah:
                            for d in range(1, w + 1):
                                for c in range(M):
                                    terms[(d - 1) * M + c] = (_lgi(IRf, IRl, IRv, IRs, s, d, a, c)
                                                              + _lgc(CRf, CRl, CRv, CRs, s + d, w - d, c))
                            acc = _lse(terms, w * M)
                        CRl[s, w, a] = acc
                    CRs[s, w] = CRp[s, w] = _encode(CRl[s, w], CRv[s, w])
                if s == 0:
                    continue  # CL[0, t] would make the root a dependent
                # CL[s, t][c] = log sum_{e, a} exp(CL[s, s+e][a] + IL[s+e, t][a, c])
                top = neg
                for e in range(w):
                    g = CLs[s, e] + ILs[s + e, w - e]
                    if g > top:
                        top = g
                for c in range(M):
                    tot[c] = 0.0
                for e in range(w):
                    f = _factor(CLs[s, e] + ILs[s + e, w - e], top)
                    for a in range(M):
                        x = f * CLv[s, e, a]
                        y_row = ILv[s + e, w - e, a]
                        for c in range(M):
                            tot[c] += x * y_row[c]
                if _normalise(tot, M, top, CLv, CLs, CLp, CLf, s, w):
                    for c in range(M):  # exact: log sum_{e, a} exp(CL[s, s+e][a] + IL[s+e, t][a, c])
                        for e in range(w):
                            for a in range(M):
                                terms[e * M + a] = (_lgc(CLf, CLl, CLv, CLs, s, e, a)
                                                    + _lgi(ILf, ILl, ILv, ILs, s + e, w - e, a, c))
                        CLl[s, w, c] = _lse(terms, w * M)
                    CLs[s, w] = CLp[s, w] = _encode(CLl[s, w], CLv[s, w])
        # -- the tail: T[i] = CR[i, n] (n - i <= K), then the rows i = n-K-1 .. 0 ----------------------
        if n <= K:
            log_z[b] = CRl[0, n, 0] if CRf[0, n] else _lg(CRv[0, n, 0], CRs[0, n])
        else:
            for i in range(n - K, n + 1):
                Ts[i], Tp[i], Tf[i] = CRs[i, n - i], CRp[i, n - i], CRf[i, n - i]
                for a in range(M):
                    Tv[i, a] = CRv[i, n - i, a]
                    Tl[i, a] = CRl[i, n - i, a]
            for i in range(n - K - 1, -1, -1):
                ah = 1 if i == 0 else M
                top = neg
                for d in range(1, K + 1):
                    g = IRs[i, d] + Ts[i + d]
                    if g > top:
                        top = g
                for a in range(M):
                    tot[a] = 0.0
                for d in range(1, K + 1):
                    f = _factor(IRs[i, d] + Ts[i + d], top)
                    y_row = Tv[i + d]
                    for a in range(ah):
                        x_row = IRv[i, d, a]
                        acc = 0.0
                        for c in range(M):
                            acc += x_row[c] * y_row[c]
                        tot[a] += f * acc
                low = False
                for a in range(ah):
                    if tot[a] < THRESHOLD:
                        low = True
                Tf[i] = low
                if not low:
                    mx = 0.0
                    for a in range(ah):
                        if tot[a] > mx:
                            mx = tot[a]
                    for a in range(M):
                        Tv[i, a] = tot[a] / mx if a < ah else 0.0
                    Tp[i], Ts[i] = top, top + np.log(mx)
                else:
                    for a in range(M):  # exact: log sum_{d, c} exp(IR[i, i+d][a, c] + T[i+d][c])
                        acc = neg
                        if a < ah:
                            for d in range(1, K + 1):
                                for c in range(M):
                                    terms[(d - 1) * M + c] = (_lgi(IRf, IRl, IRv, IRs, i, d, a, c)
                                                              + _lgt(Tf, Tl, Tv, Ts, i + d, c))
                            acc = _lse(terms, K * M)
                        Tl[i, a] = acc
                    Ts[i] = Tp[i] = _encode(Tl[i], Tv[i])
            log_z[b] = Tl[0, 0] if Tf[0] else _lg(Tv[0, 0], Ts[0])
        if not with_grad or not np.isfinite(log_z[b]):
            continue
        # == outside: d log Z / d item, in reverse order ==============================================
        gCR[: n + 1, : K + 1] = 0.0
        gCL[: n + 1, : K + 1] = 0.0
        gIR[: n + 1, 1 : K + 1] = 0.0  # (width 0 is no incomplete item)
        gIL[: n + 1, 1 : K + 1] = 0.0
        gT[: n + 1] = 0.0
        if n <= K:
            gCR[0, n, 0] = 1.0
        else:
            gT[0, 0] = 1.0
            for i in range(n - K):
                ah = 1 if i == 0 else M
                for d in range(1, K + 1):
                    if not Tf[i]:
                        mx = np.exp(Ts[i] - Tp[i])
                        f = np.exp(IRs[i, d] + Ts[i + d] - Tp[i])
                        for a in range(ah):
                            r = gT[i, a] / (Tv[i, a] * mx) * f if gT[i, a] != 0.0 else 0.0
                            if r != 0.0:
                                for c in range(M):
                                    q = r * IRv[i, d, a, c] * Tv[i + d, c]
                                    gIR[i, d, a, c] += q
                                    gT[i + d, c] += q
                    else:
                        for a in range(ah):
                            if gT[i, a] != 0.0:
                                for c in range(M):
                                    q = gT[i, a] * np.exp(_lgi(IRf, IRl, IRv, IRs, i, d, a, c)
                                                          + _lgt(Tf, Tl, Tv, Ts, i + d, c) - Tl[i, a])
                                    gIR[i, d, a, c] += q
                                    gT[i + d, c] += q
            for i in range(n - K, n + 1):
                for a in range(M):
                    gCR[i, n - i, a] += gT[i, a]
        for w in range(K, 0, -1):
            # complete items of width w
            for s in range(n - w + 1):
                ah = 1 if s == 0 else M
                for d in range(1, w + 1):
                    if not CRf[s, w]:
                        mx = np.exp(CRs[s, w] - CRp[s, w])
                        f = np.exp(IRs[s, d] + CRs[s + d, w - d] - CRp[s, w])
                        for a in range(ah):
                            g = gCR[s, w, a]
                            r = g / (CRv[s, w, a] * mx) * f if g != 0.0 else 0.0
                            if r != 0.0:
                                for c in range(M):
                                    q = r * IRv[s, d, a, c] * CRv[s + d, w - d, c]
                                    gIR[s, d, a, c] += q
                                    gCR[s + d, w - d, c] += q
                    else:
                        for a in range(ah):
                            g = gCR[s, w, a]
                            if g != 0.0:
                                for c in range(M):
                                    q = g * np.exp(_lgi(IRf, IRl, IRv, IRs, s, d, a, c)
                                                   + _lgc(CRf, CRl, CRv, CRs, s + d, w - d, c) - CRl[s, w, a])
                                    gIR[s, d, a, c] += q
                                    gCR[s + d, w - d, c] += q
                if s == 0:
                    continue
                for e in range(w):
                    if not CLf[s, w]:
                        mx = np.exp(CLs[s, w] - CLp[s, w])
                        f = np.exp(CLs[s, e] + ILs[s + e, w - e] - CLp[s, w])
                        for c in range(M):
                            g = gCL[s, w, c]
                            rho[c] = g / (CLv[s, w, c] * mx) * f if g != 0.0 else 0.0
                        for a in range(M):
                            x = CLv[s, e, a]
                            if x != 0.0:
                                acc = 0.0
                                for c in range(M):
                                    q = x * ILv[s + e, w - e, a, c] * rho[c]
                                    gIL[s + e, w - e, a, c] += q
                                    acc += q
                                gCL[s, e, a] += acc
                    else:
                        for a in range(M):
                            for c in range(M):
                                g = gCL[s, w, c]
                                if g != 0.0:
                                    q = g * np.exp(_lgc(CLf, CLl, CLv, CLs, s, e, a)
                                                   + _lgi(ILf, ILl, ILv, ILs, s + e, w - e, a, c) - CLl[s, w, c])
                                    gIL[s + e, w - e, a, c] += q
                                    gCL[s, e, a] += q
            # incomplete items of width w: their marginals are the arcs' (the gradient of F and the bias)
            col = min(w, Kb) - 1
            bias_grad = Kb > 0 and grad_bias.shape[0] > 0
            for s in range(n - w + 1):
                t = s + w
                ah = 1 if s == 0 else M
                g_right, g_left = gIR[s, w], gIL[s, w]  # (gIL[0] stays 0: the root is never a dependent)
                if s == 0:
                    for c in range(M):
                        if with_arcs:
                            grad[o + t - 1, 0, 0, c] += g_right[0, c]
                        else:
                            labels[o + t - 1, c] += g_right[0, c]
                        if with_table:
                            grad_table[b, 0, 0, c] += g_right[0, c]
                elif with_arcs:
                    for a in range(M):
                        for c in range(M):
                            grad[o + t - 1, 0, a + 1, c] += g_right[a, c]
                            grad[o + s - 1, 1, c + 1, a] += g_left[a, c]
                else:
                    into_t, into_s = labels[o + t - 1], labels[o + s - 1]
                    for a in range(M):
                        acc = 0.0
                        for c in range(M):
                            into_t[c] += g_right[a, c]  # the arc s -> t gives t label c
                            acc += g_left[a, c]  # the arc t -> s gives s label a
                        into_s[a] += acc
                if s > 0 and with_table:
                    for a in range(M):
                        for c in range(M):
                            grad_table[b, 0, a + 1, c] += g_right[a, c]
                            grad_table[b, 1, c + 1, a] += g_left[a, c]
                if s > 0 and bias_grad:  # summed over the label pairs
                    acc_right = acc_left = 0.0
                    for a in range(M):
                        for c in range(M):
                            acc_right += g_right[a, c]
                            acc_left += g_left[a, c]
                    grad_bias[b, 0, col] += acc_right
                    grad_bias[b, 1, col] += acc_left
                # inner: shares of each split k
                if not If[s, w]:
                    for a in range(ah):
                        for c in range(M):
                            g = g_right[a, c] + g_left[a, c]
                            rho2[a, c] = g / It[s, w, a, c] if g != 0.0 else 0.0
                    for k in range(s, t):
                        f = np.exp(CRs[s, k - s] + CLs[k + 1, t - k - 1] - Is[s, w])
                        y_row, g_row = CLv[k + 1, t - k - 1], gCL[k + 1, t - k - 1]
                        for a in range(ah):
                            x = f * CRv[s, k - s, a]
                            if x != 0.0:
                                acc = 0.0
                                r_row = rho2[a]
                                for c in range(M):
                                    q = x * y_row[c] * r_row[c]
                                    g_row[c] += q
                                    acc += q
                                gCR[s, k - s, a] += acc
                else:
                    for a in range(ah):
                        for c in range(M):
                            g = g_right[a, c] + g_left[a, c]
                            if g != 0.0:
                                for k in range(s, t):
                                    q = g * np.exp(_lgc(CRf, CRl, CRv, CRs, s, k - s, a)
                                                   + _lgc(CLf, CLl, CLv, CLs, k + 1, t - k - 1, c) - Il[s, w, a, c])
                                    gCR[s, k - s, a] += q
                                    gCL[k + 1, t - k - 1, c] += q


def _lgc(flags, logs, values, shifts, s, w, a):
    """The exact log value of a complete item's element [s, w, a]."""
    return logs[s, w, a] if flags[s, w] else _lg(values[s, w, a], shifts[s, w])


def _lgi(flags, logs, values, shifts, s, w, a, c):
    """The exact log value of an incomplete item's element [s, w, a, c]."""
    return logs[s, w, a, c] if flags[s, w] else _lg(values[s, w, a, c], shifts[s, w])


def _lgt(flags, logs, values, shifts, i, a):
    """The exact log value of the tail item T[i][a]."""
    return logs[i, a] if flags[i] else _lg(values[i, a], shifts[i])


def _normalise(tot, ah, top, values, shifts, pre, flags, s, w):
    """Store a complete item's totals (scale ``top``) as values of largest 1; True (flagged, nothing
    stored) if a total of the labels 0..ah-1 is below THRESHOLD."""
    M = tot.shape[0]
    for a in range(ah):
        if tot[a] < THRESHOLD:
            flags[s, w] = True
            return True
    flags[s, w] = False
    mx = 0.0
    for a in range(ah):
        if tot[a] > mx:
            mx = tot[a]
    for a in range(M):
        values[s, w, a] = tot[a] / mx if a < ah else 0.0
    pre[s, w] = top
    shifts[s, w] = top + np.log(mx)
    return False


def _encode(logs, values):
    """A flagged item from its exact log values (a flat view): values = exp(log - top), 0 for -inf; returns
    top, the largest log value (its shift)."""
    top = -np.inf
    for i in range(logs.shape[0]):
        if logs[i] > top:
            top = logs[i]
    for i in range(logs.shape[0]):
        values[i] = np.exp(logs[i] - top) if logs[i] != -np.inf else 0.0
    return top


def _product(x, y, out, dead_rows, dead_cols):
    """out = x * y, (M, M) each; whether a product is below THRESHOLD, except in the rows and columns marked dead
    (an arc to a label the dependent cannot take: y is an exact 0 there)."""
    M = x.shape[0]
    low = False
    for a in range(M):
        x_row, y_row, row = x[a], y[a], out[a]
        if dead_rows[a]:
            for c in range(M):
                row[c] = x_row[c] * y_row[c]
            continue
        for c in range(M):
            v = x_row[c] * y_row[c]
            row[c] = v
            low |= (v < THRESHOLD) & ~dead_cols[c]
    return low


def _finish_incomplete(values, shifts, flags, logs, It, Il, If, Is, F, Fe, Ft, o, s, w, t, ah, shift, bias, right,
                       low):
    """(``o``: the sentence's first row in the packed scores, dense F or factored Fe + Ft: see :func:`_arc`;
    ``bias`` (M, M): the distance bias of the item's arcs, laid out as the item.) An incomplete item's raw values
    (inner total * arc factor, scale ``shift``, at most w) are kept as they are, or, if one of them is below
    THRESHOLD (``low``, of the labels 0..ah-1 of the span's start), recomputed exactly as inner + arc in log
    space (then with their largest as the shift)."""
    M = values.shape[3]
    flags[s, w] = low
    if not low:
        shifts[s, w] = shift
        return
    for a in range(M):
        for c in range(M):
            x = -np.inf
            if a < ah:
                inner = Il[s, w, a, c] if If[s, w] else _lg(It[s, w, a, c], Is[s, w])
                if right:
                    arc = (_arc(F, Fe, Ft, o + t - 1, 0, 0, c) if s == 0
                           else _arc(F, Fe, Ft, o + t - 1, 0, a + 1, c) + bias[a, c])
                else:
                    arc = _arc(F, Fe, Ft, o + s - 1, 1, c + 1, a) + bias[a, c]
                x = inner + arc
            logs[s, w, a, c] = x
    shifts[s, w] = _encode(logs[s, w].ravel(), values[s, w].ravel())
