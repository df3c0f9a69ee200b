"""The tree's label marginals on factored scores by subtree messages (numba): the same distribution as
:mod:`.compiled`, with fewer and cheaper operations where the scores factor as
F[d, x, h, c] = emission[d, c] + table[x, h, c] (the bilinear scorer's form, which ``nldm_tagger`` tags with).

Every arc into a token carries that token's emission, and every token but the root is a dependent exactly
once, so the emission can sit in the token's first left item, CL[m, m][c] = exp(emission[m, c]); the arc
factors are then one table, the same for every token. An incomplete item is the outer product of two
complete ones times that table, and it is only ever contracted with a complete item on its dependent's side,
so it never needs to be formed: with z(j, m, t) = CL[j, m] * CR[m, t] (elementwise: the whole subtree of m,
spanning j..t, as a vector over m's label) and the table's exponentials R[a, c] (head a -> dependent c on its
right) and L[c, a] (dependent a <- head c on its right):

- uR(j, m, t) = R z(j, m, t);  uL(j, m, t) = L z(j, m, t)  (the subtree hung under a head on its left / right)
- CR[s, t][a] = sum_{m=s+1..t} bR(m-s) sum_{k=s..m-1} CR[s, k][a] uR(k+1, m, t)[a]
- CL[s, t][c] = sum_{m=s..t-1} bL(t-m) sum_{k=m..t-1} CL[k+1, t][c] uL(s, m, k)[c]
- T[i][a] = CR[i, n][a] (n - i <= K), else sum_{m=i+1..i+K} bR(m-i) sum_{k=i..m-1} CR[i, k][a] (R (CL[k+1, m] * T[m]))[a]
- the root (label 0) hangs subtrees by the table's root row instead of R, without a distance bias;
  log Z = log T[0] (or CR[0, n] for n <= K)

with bR, bL the distance bias's factors. A subtree spans at most K - 1 tokens besides the tail's, so a token
costs K (K + 1) / 2 vectors z, two matrix-vector products each, and K more in the tail: 15 M^2 multiply-adds
at K = 3 (the item-by-item passes of :mod:`.compiled` take 27 M^2, with (M, M) items written and read). The
subtrees of one width do not depend on each other, so their products run as one product of [R; L] with the
width's rows (and the tail's K subtrees of a token as one with R), three rows at a time: each entry of the
table is then read once for three products, about twice the rate of one product at a time.

The marginals come from the reverse pass as flows: an item's flow is the probability mass of the derivations
through it (1 for the root item). A sum gives each term its share (term / total), a product gives both
factors its whole flow, and a matrix-vector product u = A z gives z[c] the flow z[c] sum_a A[a, c] flow(u)[a] /
u[a]. The flow of CL[m, m][c] is P(y_m = c). Flows are ratios, so they need no shifts. A message's flow is only
ever read divided by the message, so the reverse pass keeps flow(u) / u itself: each term that reads u adds
its flow without the factor u (no division).

Items are held as values and a float64 shift (item = values * exp(shift)). A total below ``THRESHOLD`` in its
frame (its largest possible term is 1, times the labels for a product's row) could have lost digits: the
sentence is then reported as not done, and the caller computes it by :mod:`.compiled`, exact at any scale. So
are sentences with a NaN or +inf score, or a token that allows no label. An emission of -inf (a label left out by
a label mask) is an exact 0 in the token's left items, which the checks know.
"""
import numpy as np

_compiled = None
#: the floating-point rewrites the loops allow: sums in any order, fused multiply-adds and no signed zeros ("nsz":
#: LLVM then simplifies and vectorises more of the loops, a tenth of their time). No signed zero can matter: every
#: division is by a total checked to be at least THRESHOLD, and no result depends on a zero's sign. NaN and the
#: infinities keep their IEEE meaning ("nnan" and "ninf" would not): the checks and the label masks' -inf read them.
FASTMATH = {"reassoc", "contract", "nsz"}


def inside_outside(emissions, table, bias, offsets, lengths, limit, threshold, with_grad, log_z, done, labels,
                   grad_table, grad_bias):
    """For packed emissions (T, M) float64 (the sentences' real tokens, sentence b from ``offsets[b]``,
    ``lengths[b]`` tokens), table (2, M+1, M) float64 (see :func:`.compiled._factors`), distance bias (2, Kb)
    (Kb = 0: none) and the longest arc ``limit``: writes log Z into ``log_z`` (B,) and True into ``done`` (B,)
    for each sentence it computed (False: see the module's note; ``threshold``: :data:`.compiled.THRESHOLD`).
    With ``with_grad`` also d log Z / d emissions = P(y = c) into ``labels`` (T, M), and, where they have
    rows (else shaped (0, ...)), d log Z / d table per sentence into ``grad_table`` (B, 2, M+1, M) (the summed
    arc marginals) and d log Z / d bias into ``grad_bias`` (B, 2, Kb)."""
    global _compiled
    if _compiled is None:
        from numba import njit

        for name in ("_term_factors", "_subtree", "_products", "_outer_sums", "_dot", "_store"):
            globals()[name] = njit(inline="always", error_model="numpy", fastmath=FASTMATH)(globals()[name])
        _compiled = njit(cache=True, nogil=True, error_model="numpy", fastmath=FASTMATH)(_batch)
    _compiled(emissions, table, bias, offsets, lengths, limit, threshold, with_grad, log_z, done, labels, grad_table,
              grad_bias)


def _term_factors(logs, count, out):
    """out[i] = exp(logs[i] - top) for the first ``count`` terms of a total; returns top, the largest (-inf if
    every term is -inf)."""
    top = -np.inf
    for i in range(count):
        if logs[i] > top:
            top = logs[i]
    for i in range(count):
        out[i] = np.exp(logs[i] - top)
    return top


def _subtree(left, right, out, threshold):
    """out = left * right (a subtree's vector over its head's label: its left item times its right item), scaled to
    a largest of 1; the log of the scale, NaN if the largest is below ``threshold``."""
    mx = 0.0
    for c in range(out.shape[0]):
        v = left[c] * right[c]
        out[c] = v
        if v > mx:
            mx = v
    if not mx >= threshold:
        return np.nan
    for c in range(out.shape[0]):
        out[c] /= mx
    return np.log(mx)


def _products(A, X, Y, count):
    """Y[i] = A X[i] for the first ``count`` rows of X (A: (p, q), X: (rows, q), Y: (rows, p)), three rows at a
    time: each entry of A is read once for three products (twice the rate of one product at a time)."""
    p, q = A.shape
    i = 0
    while i + 3 <= count:
        for a in range(p):
            s0, s1, s2 = 0.0, 0.0, 0.0
            for c in range(q):
                v = A[a, c]
                s0 += v * X[i, c]
                s1 += v * X[i + 1, c]
                s2 += v * X[i + 2, c]
            Y[i, a], Y[i + 1, a], Y[i + 2, a] = s0, s1, s2
        i += 3
    while i < count:
        for a in range(p):
            s0 = 0.0
            for c in range(q):
                s0 += A[a, c] * X[i, c]
            Y[i, a] = s0
        i += 1


def _outer_sums(X, Z, G, count):
    """G[a, c] += sum_i X[i, a] Z[i, c] over the first ``count`` rows, three rows at a time."""
    i = 0
    while i + 3 <= count:
        for a in range(G.shape[0]):
            x0, x1, x2 = X[i, a], X[i + 1, a], X[i + 2, a]
            for c in range(G.shape[1]):
                G[a, c] += x0 * Z[i, c] + x1 * Z[i + 1, c] + x2 * Z[i + 2, c]
        i += 3
    while i < count:
        for a in range(G.shape[0]):
            x0 = X[i, a]
            for c in range(G.shape[1]):
                G[a, c] += x0 * Z[i, c]
        i += 1


def _dot(x, z):
    total = 0.0
    for c in range(z.shape[0]):
        total += x[c] * z[c]
    return total


def _store(tot, ah, values, dead, threshold):
    """A complete item's values: the totals of its labels 0..ah-1 (the others 0) scaled to a largest of 1; the log
    of the scale, NaN if a total is below ``threshold`` where its label is not ``dead`` (an exact 0 there)."""
    mx = 0.0
    for a in range(ah):
        if not tot[a] >= threshold and not dead[a]:
            return np.nan
        if tot[a] > mx:
            mx = tot[a]
    inv = 1.0 / mx
    for a in range(values.shape[0]):
        values[a] = tot[a] * inv if a < ah else 0.0
    return np.log(mx)


def _batch(Fe, Ft, bias, offsets, lengths, limit, THRESHOLD, with_grad, log_z, done, labels, grad_table, grad_bias):  # noqa: C901  (one recurrence per block)
    B = lengths.shape[0]
    M = Fe.shape[1]
    Kb = bias.shape[1]
    neg = -np.inf
    N = 1
    for b in range(B):
        N = max(N, lengths[b])
    K = max(1, min(limit, N))
    # the table's exponentials, each relative to its largest: R[a, c] = exp(Ft[0, 1+a, c]), L[c, a] = exp(Ft[1, 1+c, a]),
    # root[c] = exp(Ft[0, 0, c])
    R, L, root = np.zeros((M, M)), np.zeros((M, M)), np.zeros(M)
    tops = np.full(3, neg)
    finite = True
    for h in range(M + 1):
        for c in range(M):
            for x in range(2):
                v = Ft[x, h, c]
                if not np.isfinite(v):
                    finite = False
                elif h > 0 or x == 0:
                    k = 2 if h == 0 else x
                    if v > tops[k]:
                        tops[k] = v
    if not finite:
        for b in range(B):
            done[b] = False
        return
    for a in range(M):
        for c in range(M):
            R[a, c] = np.exp(Ft[0, 1 + a, c] - tops[0])
            L[a, c] = np.exp(Ft[1, 1 + a, c] - tops[1])  # L[head c', dependent a'] laid out as [c', a']
    for c in range(M):
        root[c] = np.exp(Ft[0, 0, c] - tops[2])
    # a subtree's messages to both sides at once: [uR; uL] = [R; L] z, and in reverse their mass
    # sum_a R[a, c] rho[a] + L[a, c] acc[a] = [R^T | L^T] [rho; acc]
    both = np.zeros((2 * M, M))
    both[:M], both[M:] = R, L
    both_T, RT = np.ascontiguousarray(both.T), np.ascontiguousarray(R.T)
    logb = np.zeros((2, K + 1))  # the bias of an arc of length d, [direction, d]
    for d in range(1, K + 1):
        if Kb > 0:
            logb[0, d], logb[1, d] = bias[0, min(d, Kb) - 1], bias[1, min(d, Kb) - 1]
    P = N + 2
    # complete items [start, width, label] (CR[0, w]: the root's, label 0 only), shifts [start, width]
    CRv, CLv = np.zeros((P, K + 1, M)), np.zeros((P, K + 1, M))
    CRs, CLs = np.zeros((P, K + 1)), np.zeros((P, K + 1))
    # subtrees z(m - e, m, m + f) of total width W = e + f at [W, (m - 1) (W + 1) + e] (rows of one width
    # together, for the matrix products), their messages to a head on the left (uR, [..., 0, :]) and on the right
    # (uL, [..., 1, :]) and to the root (u0, a number)
    rows = N * K
    Zv, Zs = np.zeros((K, rows, M)), np.zeros((K, rows))
    U, U0 = np.zeros((K, rows, 2, M)), np.zeros((K, rows))
    # the tail: T[i], and its subtrees zT(m - e, m) = CL[m - e, m] * T[m] with their messages
    Tv, Ts = np.zeros((P, M)), np.zeros(P)
    ZTv, ZTs = np.zeros((P, K, M)), np.zeros((P, K))
    UT, UT0 = np.zeros((P, K, M)), np.zeros((P, K))
    # flows
    gCR, gCL, gT = np.zeros((P, K + 1, M)), np.zeros((P, K + 1, M)), np.zeros((P, M))
    # the messages' flow(u) / u, laid out as U, U0 ([..., 0, :] = rho, [..., 1, :] = acc), UT, UT0
    gU, gU0 = np.zeros((K, rows, 2, M)), np.zeros((K, rows))
    gUT, gUT0 = np.zeros((P, K, M)), np.zeros((P, K))
    masses = np.zeros((rows, M))  # their mass sum_a R[a, c] rho[a] + L[a, c] acc[a]
    tail_ratio, tail_z, tail_mass = np.zeros((K, M)), np.zeros((K, M)), np.zeros((K, M))  # the same for the tail's
    tot = np.zeros(M)
    wts = np.zeros((K + 1) * (K + 1))  # the logs of the terms of one total
    # each total's terms' factors exp(g - top) and its top, kept for the reverse pass: CR, CL [start, width, term]
    # and the tail's rows [i, term]
    FR, FL, FT = np.zeros((P, K + 1, (K + 1) * (K + 1))), np.zeros((P, K + 1, (K + 1) * (K + 1))), np.zeros((P, (K + 1) * (K + 1)))
    TRt, TLt, TTt = np.zeros((P, K + 1)), np.zeros((P, K + 1)), np.zeros(P)
    qv = np.zeros(M)  # flow(item) / item, per label
    # dead[m, c]: token m cannot take label c (its emission is -inf: a label mask). Every left item headed at m is
    # then an exact 0 at c, which is structure, not underflow: its total is not checked there
    dead, nothing_dead = np.zeros((P, M), np.bool_), np.zeros(M, np.bool_)
    with_table, with_bias = grad_table.shape[0] > 0, grad_bias.shape[0] > 0 and Kb > 0
    G, G0 = np.zeros((2 * M, M)), np.zeros(M)  # sum of mass(u)[a] / u[a] * z[c] per table ([GR; GL])
    Gb = np.zeros((2, K + 1))  # the mass of the terms of each arc length and direction

    for b in range(B):
        n, o = lengths[b], offsets[b]
        done[b] = False
        if n <= 0:
            log_z[b] = 0.0
            done[b] = True
            continue
        Kn = min(K, n)
        ok = True
        # -- base items: CR[m, m] = 1, CL[m, m] = exp(emission of m); the root's CR[0, 0] = 1 (label 0)
        for m in range(1, n + 1):
            top = neg
            for c in range(M):
                v = Fe[o + m - 1, c]
                if v != v or v == np.inf:  # NaN or +inf: the item-by-item loop names it
                    ok = False
                dead[m, c] = v == neg
                if v > top:
                    top = v
            if top == neg:  # no label possible
                ok = False
            for c in range(M):
                CRv[m, 0, c] = 1.0
                CLv[m, 0, c] = np.exp(Fe[o + m - 1, c] - top)  # an exact 0 for a label left out (-inf)
            CRs[m, 0], CLs[m, 0] = 0.0, top
        if not ok:
            continue
        for c in range(M):
            CRv[0, 0, c] = 1.0 if c == 0 else 0.0
        CRs[0, 0] = 0.0
        # -- inside, by width: the subtrees of total width w - 1 and their messages, then the items of width w
        for w in range(1, Kn + 1):
            W = w - 1
            Zw, Uw = Zv[W], U[W]
            for m in range(1, n + 1):
                for e in range(W + 1):
                    f = W - e
                    j, t, row = m - e, m + f, (m - 1) * w + e
                    if j < 1 or t > n:
                        Zw[row] = 0.0
                        continue
                    # z = CL[j, m] * CR[m, t], scaled to a largest of 1. Here and in the loops below the tables
                    # are indexed in place, not through views of their rows as the helpers take them (as the
                    # tail's fewer subtrees do): through views, these loops took a quarter to a third longer
                    mx = 0.0
                    for c in range(M):
                        v = CLv[j, e, c] * CRv[m, f, c]
                        Zv[W, row, c] = v
                        if v > mx:
                            mx = v
                    if not mx >= THRESHOLD:
                        ok = False
                        break
                    inv = 1.0 / mx
                    for c in range(M):
                        Zv[W, row, c] *= inv
                    Zs[W, row] = CLs[j, e] + CRs[m, f] + np.log(mx)
                    if m <= Kn:  # its message to the root (an arc 0 -> m)
                        U0[W, row] = _dot(root, Zw[row])
                        ok &= U0[W, row] >= THRESHOLD
                if not ok:
                    break
            if not ok:
                break
            # their messages to a head on the left (one in 1..j-1 within K of m) and on the right (one in t+1..j+K)
            _products(both, Zw, Uw.reshape((rows, 2 * M)), n * w)
            for m in range(1, n + 1):
                for e in range(W + 1):
                    j, t, row = m - e, m + W - e, (m - 1) * w + e
                    if j < 1 or t > n:
                        continue
                    for x in range(2):  # a head on the left (j >= 2), on the right (t < n, t + 1 <= j + K)
                        if (j >= 2) if x == 0 else (t < n and t + 1 <= j + Kn):
                            for c in range(M):
                                if not U[W, row, x, c] >= THRESHOLD:
                                    ok = False
            if not ok:
                break
            # CR[s, s + w] for s >= 1, the root's CR[0, w], CL[s, s + w]
            for s in range(0, n - w + 1):
                t = s + w
                # CR[s, t][a] = sum_{m, k} bR(m - s) CR[s, k][a] uR(k+1, m, t)[a]  (the root: u0, no bias)
                i = 0
                for m in range(s + 1, t + 1):
                    for k in range(s, m):
                        wts[i] = CRs[s, k - s] + Zs[t - k - 1, (m - 1) * (t - k) + m - k - 1] + (tops[2] if s == 0 else logb[0, m - s] + tops[0])
                        i += 1
                top = TRt[s, w] = _term_factors(wts, i, FR[s, w])
                for c in range(M):
                    tot[c] = 0.0
                i = 0
                for m in range(s + 1, t + 1):
                    for k in range(s, m):
                        fct = FR[s, w, i]
                        i += 1
                        W, row = t - k - 1, (m - 1) * (t - k) + m - k - 1  # the subtree z(k + 1, m, t)
                        if s == 0:
                            tot[0] += fct * CRv[0, k, 0] * U0[W, row]
                        else:
                            for a in range(M):
                                tot[a] += fct * CRv[s, k - s, a] * U[W, row, 0, a]
                scale = _store(tot, 1 if s == 0 else M, CRv[s, w], nothing_dead, THRESHOLD)
                if scale != scale:
                    ok = False
                    break
                CRs[s, w] = top + scale
                if s == 0:
                    continue
                # CL[s, t][c] = sum_{m, k} bL(t - m) CL[k+1, t][c] uL(s, m, k)[c]
                i = 0
                for m in range(s, t):
                    for k in range(m, t):
                        wts[i] = CLs[k + 1, t - k - 1] + Zs[k - s, (m - 1) * (k - s + 1) + m - s] + logb[1, t - m] + tops[1]
                        i += 1
                top = TLt[s, w] = _term_factors(wts, i, FL[s, w])
                for c in range(M):
                    tot[c] = 0.0
                i = 0
                for m in range(s, t):
                    for k in range(m, t):
                        fct = FL[s, w, i]
                        i += 1
                        W, row = k - s, (m - 1) * (k - s + 1) + m - s  # the subtree z(s, m, k)
                        for c in range(M):
                            tot[c] += fct * CLv[k + 1, t - k - 1, c] * U[W, row, 1, c]
                scale = _store(tot, M, CLv[s, w], dead[t], THRESHOLD)
                if scale != scale:
                    ok = False
                    break
                CLs[s, w] = top + scale
            if not ok:
                break
        if not ok:
            continue
        # -- the tail: T[i] = CR[i, n] for n - i <= K, then the rows below
        tail = n > Kn
        if tail:
            for i in range(n - Kn, n + 1):
                for a in range(M):
                    Tv[i, a] = CRv[i, n - i, a]
                Ts[i] = CRs[i, n - i]
            for m in range(n - 1, 0, -1):
                # the subtrees zT(j, m) = CL[j, m] * T[m] (T[m] is done: m > i for every row i below)
                for e in range(Kn):
                    j = m - e
                    if j < 1:
                        break
                    scale = _subtree(CLv[j, e], Tv[m], ZTv[m, e], THRESHOLD)
                    if scale != scale:
                        ok = False
                        break
                    ZTs[m, e] = CLs[j, e] + Ts[m] + scale
                    if m <= Kn:
                        UT0[m, e] = _dot(root, ZTv[m, e])
                        ok &= UT0[m, e] >= THRESHOLD
                if not ok:
                    break
                _products(R, ZTv[m], UT[m], min(Kn, m))  # their messages to a head on the left
                for e in range(min(Kn, m - 1)):
                    for a in range(M):
                        if not UT[m, e, a] >= THRESHOLD:
                            ok = False
                if not ok:
                    break
                i = m - 1
                if i > n - Kn - 1:  # T[i] is CR[i, n]
                    continue
                # T[i][a] = sum_{m = i+1..i+K} bR(m - i) sum_{k = i..m-1} CR[i, k][a] uT(k+1, m)[a]
                q = 0
                for m in range(i + 1, i + Kn + 1):
                    for k in range(i, m):
                        wts[q] = CRs[i, k - i] + ZTs[m, m - k - 1] + (tops[2] if i == 0 else logb[0, m - i] + tops[0])
                        q += 1
                top = TTt[i] = _term_factors(wts, q, FT[i])
                for a in range(M):
                    tot[a] = 0.0
                q = 0
                for m in range(i + 1, i + Kn + 1):
                    for k in range(i, m):
                        fct = FT[i, q]
                        q += 1
                        if i == 0:
                            tot[0] += fct * CRv[0, k, 0] * UT0[m, m - k - 1]
                        else:
                            for a in range(M):
                                tot[a] += fct * CRv[i, k - i, a] * UT[m, m - k - 1, a]
                scale = _store(tot, 1 if i == 0 else M, Tv[i], nothing_dead, THRESHOLD)
                if scale != scale:
                    ok = False
                    break
                Ts[i] = top + scale
            if not ok:
                continue
            log_z[b] = np.log(Tv[0, 0]) + Ts[0]
        else:
            log_z[b] = np.log(CRv[0, n, 0]) + CRs[0, n]
        if not np.isfinite(log_z[b]):
            continue
        if not with_grad:
            done[b] = True
            continue
        if with_table:
            G[:] = 0.0
            G0[:] = 0.0
        Gb[:] = 0.0
        # == reverse: the flows ==========================================================================
        gCR[: n + 1] = 0.0
        gCL[: n + 1] = 0.0
        gU[:, : n * Kn] = 0.0
        gU0[:, : n * Kn] = 0.0
        if tail:
            gT[: n + 1] = 0.0
            gUT[: n + 1] = 0.0
            gUT0[: n + 1] = 0.0
            gT[0, 0] = 1.0
            for i in range(0, n - 1):
                if i <= n - Kn - 1:  # share T[i]'s flow among its terms (the inside's factors)
                    shift = np.exp(TTt[i] - Ts[i])  # the terms relative to T[i]'s values
                    for a in range(M):
                        qv[a] = gT[i, a] / Tv[i, a] if i > 0 else 0.0
                    q = 0
                    for m in range(i + 1, i + Kn + 1):
                        for k in range(i, m):
                            fct = FT[i, q] * shift
                            q += 1
                            if i == 0:
                                p = fct * CRv[0, k, 0] / Tv[0, 0] * gT[0, 0]
                                gCR[0, k, 0] += p * UT0[m, m - k - 1]
                                gUT0[m, m - k - 1] += p
                            else:
                                mass = 0.0
                                for a in range(M):
                                    p = fct * CRv[i, k - i, a] * qv[a]
                                    r = p * UT[m, m - k - 1, a]
                                    gCR[i, k - i, a] += r
                                    gUT[m, m - k - 1, a] += p
                                    mass += r
                                Gb[0, m - i] += mass
                # the subtrees zT(i + 1, m) are complete now (every row that hangs them, i and below, is done)
                j = i + 1
                count = min(j + Kn, n) - j
                for e in range(count):
                    for a in range(M):  # flow(u) / u, 0 where the message was not sent (no head left of j)
                        tail_ratio[e, a] = gUT[j + e, e, a]
                        tail_z[e, a] = ZTv[j + e, e, a]
                _products(RT, tail_ratio, tail_mass, count)
                if with_table:
                    _outer_sums(tail_ratio, tail_z, G[:M], count)
                for e in range(count):
                    m = j + e
                    r0 = gUT0[m, e] if m <= Kn else 0.0
                    for c in range(M):  # zT[c] (its messages' mass + the root's), to both its factors
                        mass = tail_z[e, c] * (tail_mass[e, c] + r0 * root[c])
                        gCL[j, e, c] += mass
                        gT[m, c] += mass
                    if with_table and r0 != 0.0:
                        for c in range(M):
                            G0[c] += r0 * tail_z[e, c]
            for i in range(n - Kn, n + 1):
                for a in range(M):
                    gCR[i, n - i, a] += gT[i, a]
        else:
            gCR[0, n, 0] = 1.0
        for w in range(Kn, 0, -1):
            for s in range(0, n - w + 1):
                t = s + w
                # CR[s, t]'s flow to its terms (the inside's factors)
                shift = np.exp(TRt[s, w] - CRs[s, w])
                if s > 0:
                    y_row, gy = CRv[s, w], gCR[s, w]
                    for a in range(M):
                        qv[a] = gy[a] / y_row[a]
                i = 0
                for m in range(s + 1, t + 1):
                    for k in range(s, m):
                        fct = FR[s, w, i] * shift
                        i += 1
                        W, row = t - k - 1, (m - 1) * (t - k) + m - k - 1  # the subtree z(k + 1, m, t)
                        if s == 0:
                            if gCR[0, w, 0] != 0.0:
                                p = fct * CRv[0, k, 0] / CRv[0, w, 0] * gCR[0, w, 0]
                                gCR[0, k, 0] += p * U0[W, row]
                                gU0[W, row] += p
                        else:
                            mass = 0.0
                            for a in range(M):
                                p = fct * CRv[s, k - s, a] * qv[a]
                                r = p * U[W, row, 0, a]
                                gCR[s, k - s, a] += r
                                gU[W, row, 0, a] += p
                                mass += r
                            Gb[0, m - s] += mass
                if s == 0:
                    continue
                # CL[s, t]'s flow to its terms (the inside's factors)
                shift = np.exp(TLt[s, w] - CLs[s, w])
                x_row, gx = CLv[s, w], gCL[s, w]
                for c in range(M):
                    qv[c] = gx[c] / x_row[c] if x_row[c] > 0.0 else 0.0
                i = 0
                for m in range(s, t):
                    for k in range(m, t):
                        fct = FL[s, w, i] * shift
                        i += 1
                        W, row = k - s, (m - 1) * (k - s + 1) + m - s  # the subtree z(s, m, k)
                        mass = 0.0
                        for c in range(M):
                            p = fct * CLv[k + 1, t - k - 1, c] * qv[c]
                            r = p * U[W, row, 1, c]
                            gCL[k + 1, t - k - 1, c] += r
                            gU[W, row, 1, c] += p
                            mass += r
                        Gb[1, t - m] += mass
            # the subtrees of total width w - 1 are complete: their flows to CL[j, m] and CR[m, t]
            W = w - 1
            Zw = Zv[W]
            flat = gU[W].reshape((rows, 2 * M))
            _products(both_T, flat, masses, n * w)
            if with_table:
                _outer_sums(flat, Zw, G, n * w)
            for m in range(1, n + 1):
                for e in range(W + 1):
                    j, t, row = m - e, m + W - e, (m - 1) * w + e
                    if j < 1 or t > n:
                        continue
                    r0 = gU0[W, row] if m <= Kn else 0.0
                    for c in range(M):  # z[c] (its messages' mass + the root's), to both its factors
                        mass = Zv[W, row, c] * (masses[row, c] + r0 * root[c])
                        gCL[j, e, c] += mass
                        gCR[m, W - e, c] += mass
                    if with_table and r0 != 0.0:
                        for c in range(M):
                            G0[c] += r0 * Zw[row, c]
        for m in range(1, n + 1):
            for c in range(M):
                labels[o + m - 1, c] = gCL[m, 0, c]
        if with_table:
            for a in range(M):
                grad_table[b, 0, 0, a] = G0[a] * root[a]
                grad_table[b, 1, 0, a] = 0.0
                for c in range(M):
                    grad_table[b, 0, 1 + a, c] = G[a, c] * R[a, c]
                    grad_table[b, 1, 1 + a, c] = G[M + a, c] * L[a, c]
        if with_bias:
            grad_bias[b] = 0.0
            for d in range(1, Kn + 1):
                col = min(d, Kb) - 1
                grad_bias[b, 0, col] += Gb[0, d]
                grad_bias[b, 1, col] += Gb[1, d]
        done[b] = True
