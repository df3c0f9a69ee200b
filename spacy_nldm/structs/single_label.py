"""log Z over projective trees, and its arc marginals, when every token has one label: one compiled loop per
sentence (numba), in log space and float64.

This is log S(x, y), the gold labels' term of the NLDM's loss: with the labels fixed, the arcs' scores are a
dense (B, N+1, N+1) tensor ``arcs[b, h, d]`` (the arc h -> d, the root at position 0; the distance bias
already added) and the chart of :mod:`.compiled` has a single label (M = 1):

- inner(s, t) = log sum_{k=s..t-1} exp(CR[s, k] + CL[k+1, t])
- IR[s, t] = inner(s, t) + arcs[s, t];  IL[s, t] = inner(s, t) + arcs[t, s]  (s > 0)
- CR[s, t] = log sum_{d=1..w} exp(IR[s, s+d] + CR[s+d, t]);  CL[s, t] = log sum_{e=0..w-1} exp(CL[s, s+e] + IL[s+e, t])
- T[i] = CR[i, n] for n - i <= K, else log sum_{d=1..K} exp(IR[i, i+d] + T[i+d]);  log Z = T[0]

with widths w = t - s <= K (the longest arc). Every sum is taken in log space (its largest term factored
out), so the result is exact at any score scale. The outside pass goes over the items in reverse: a term's
share of its sum is exp(term - sum), and the incomplete items' marginals are the arcs'. Time O(n K^2).
"""
import numpy as np
import torch

Tensor = torch.Tensor

_compiled = None


def log_partition(scores: Tensor, lengths: Tensor, limit: int) -> Tensor:
    """log Z (B,) of dense one-label scores (B, N+1, N+1, 1, 1) (CPU, no masks; ``lengths`` 0 for impossible
    sentences), differentiable; the outside pass runs in the same call when a gradient will be asked for."""
    return _SingleLabel.apply(scores, lengths, limit)


class _SingleLabel(torch.autograd.Function):
    @staticmethod
    def forward(ctx, scores: Tensor, lengths: Tensor, limit: int) -> Tensor:
        log_z, grad = inside_outside(scores[..., 0, 0], lengths, limit, ctx.needs_input_grad[0])
        ctx.grad = grad
        return log_z.to(scores.dtype)

    @staticmethod
    def backward(ctx, grad_root: Tensor):
        grad = ctx.grad * grad_root.to(torch.float64).reshape(-1, 1, 1)
        return grad[..., None, None].to(grad_root.dtype), None, None


def inside_outside(arcs: Tensor, lengths: Tensor, limit: int, with_grad: bool):
    """For arcs (B, N+1, N+1) (any float dtype, CPU), lengths (B,) and the longest arc ``limit`` (>= 1): log Z
    (B,) float64 and, with ``with_grad``, d log Z / d arcs (B, N+1, N+1) float64 (else None)."""
    a64 = np.ascontiguousarray(arcs.detach().to(torch.float64).cpu().numpy())
    lens = np.ascontiguousarray(lengths.detach().cpu().numpy().astype(np.int64))
    log_z = np.zeros(a64.shape[0])
    grad = np.zeros(a64.shape) if with_grad else np.zeros((0, 1, 1))
    _kernel()(a64, lens, int(limit), with_grad, log_z, grad)
    return torch.from_numpy(log_z), torch.from_numpy(grad) if with_grad else None


def _kernel():
    """The batch loop, compiled on first use (cached on disk by numba)."""
    global _compiled
    if _compiled is None:
        from numba import njit

        globals()["_lse2"] = njit(globals()["_lse2"])
        _compiled = njit(cache=True, nogil=True)(_batch)
    return _compiled


def _lse2(x, y):
    """log(exp(x) + exp(y)), -inf + -inf = -inf."""
    if x == -np.inf:
        return y
    if y == -np.inf:
        return x
    return max(x, y) + np.log1p(np.exp(-abs(x - y)))


def _batch(arcs, lengths, limit, with_grad, log_z, grad):  # noqa: C901  (one recurrence per block)
    B = lengths.shape[0]
    P = arcs.shape[1]
    K0 = max(1, limit)
    neg = -np.inf
    CR, CL = np.full((P, K0 + 1), neg), np.full((P, K0 + 1), neg)  # [start, width]
    IN, IR, IL = np.full((P, K0 + 1), neg), np.full((P, K0 + 1), neg), np.full((P, K0 + 1), neg)
    T = np.full(P, neg)
    gCR, gCL = np.zeros((P, K0 + 1)), np.zeros((P, K0 + 1))
    gIR, gIL, gT = np.zeros((P, K0 + 1)), np.zeros((P, K0 + 1)), np.zeros(P)
    for b in range(B):
        n = lengths[b]
        if n <= 0:
            log_z[b] = 0.0
            continue
        K = min(K0, n)
        for s in range(n + 1):
            CR[s, 0] = 0.0
            CL[s, 0] = 0.0
        for w in range(1, K + 1):
            for s in range(n - w + 1):
                t = s + w
                acc = neg
                for k in range(s, t):
                    acc = _lse2(acc, CR[s, k - s] + CL[k + 1, t - k - 1])
                IN[s, w] = acc
                IR[s, w] = acc + arcs[b, s, t]
                IL[s, w] = acc + arcs[b, t, s] if s > 0 else neg  # the root is never a dependent
            for s in range(n - w + 1):
                t = s + w
                acc = neg
                for d in range(1, w + 1):
                    acc = _lse2(acc, IR[s, d] + CR[s + d, w - d])
                CR[s, w] = acc
                acc = neg
                if s > 0:
                    for e in range(w):
                        acc = _lse2(acc, CL[s, e] + IL[s + e, w - e])
                CL[s, w] = acc
        if n <= K:
            log_z[b] = CR[0, n]
        else:
            for i in range(n - K, n + 1):
                T[i] = CR[i, n - i]
            for i in range(n - K - 1, -1, -1):
                acc = neg
                for d in range(1, K + 1):
                    acc = _lse2(acc, IR[i, d] + T[i + d])
                T[i] = acc
            log_z[b] = T[0]
        if not with_grad or not np.isfinite(log_z[b]):
            continue
        # -- outside: d log Z / d item, the items in reverse order ----------------------------------
        gCR[: n + 1, : K + 1] = 0.0
        gCL[: n + 1, : K + 1] = 0.0
        gIR[: n + 1, : K + 1] = 0.0
        gIL[: n + 1, : K + 1] = 0.0
        gT[: n + 1] = 0.0
        if n <= K:
            gCR[0, n] = 1.0
        else:
            gT[0] = 1.0
            for i in range(n - K):
                if gT[i] != 0.0:
                    for d in range(1, K + 1):
                        q = gT[i] * np.exp(IR[i, d] + T[i + d] - T[i])
                        gIR[i, d] += q
                        gT[i + d] += q
            for i in range(n - K, n + 1):
                gCR[i, n - i] += gT[i]
        for w in range(K, 0, -1):
            for s in range(n - w + 1):
                if gCR[s, w] != 0.0:
                    for d in range(1, w + 1):
                        q = gCR[s, w] * np.exp(IR[s, d] + CR[s + d, w - d] - CR[s, w])
                        gIR[s, d] += q
                        gCR[s + d, w - d] += q
                if s > 0 and gCL[s, w] != 0.0:
                    for e in range(w):
                        q = gCL[s, w] * np.exp(CL[s, e] + IL[s + e, w - e] - CL[s, w])
                        gCL[s, e] += q
                        gIL[s + e, w - e] += q
            for s in range(n - w + 1):
                t = s + w
                grad[b, s, t] = gIR[s, w]
                g = gIR[s, w]
                if s > 0:
                    grad[b, t, s] = gIL[s, w]
                    g += gIL[s, w]
                if g != 0.0:
                    for k in range(s, t):
                        q = g * np.exp(CR[s, k - s] + CL[k + 1, t - k - 1] - IN[s, w])
                        gCR[s, k - s] += q
                        gCL[k + 1, t - k - 1] += q
