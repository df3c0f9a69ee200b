"""How fast the NLDM's label marginals could be on this CPU: the tree's two compiled recurrences on factored
scores, each timed beside its multiply-adds at the rate of the inner loops alone.

    OMP_NUM_THREADS=1 python -m projects.paper.scripts.kernel_floor

Both run on factored scores of the shape ``nldm_tagger`` tags with (M = 25 labels, arcs up to k = 3 tokens
long, batches of 256 sentences of 5 to 30 tokens):

- the item-by-item loop (``spacy_nldm.structs.compiled.inside_outside_factored``, what the factored lane hands
  a sentence to when a total could lose digits): its inside pass does, for each token, sum_{w=1..k} (3 w + 2)
  M^2 multiply-adds for the items of width w (the splits' outer products, the arcs' elementwise products, the
  complete items' matrix-vector products) and k M^2 more for the tail items: 27 M^2 at k = 3;
- the subtree messages (``spacy_nldm.structs.compiled_subtrees``, the factored lane's own): k (k + 1) / 2
  subtrees a token, each hung by two matrix-vector products (to a head on its left and on its right), and k
  more products in the tail: 15 M^2 at k = 3, plus the complete items' elementwise sums (26 M); the products
  run three vectors at a time.

The loops they are made of (an (M, M) matrix times a vector, times three vectors at once, an (M, M) rank-one
update, and the subtree kernel's products of one width, [R; L] times a tweet's 45 rows three at a time) are timed
alone in L1, compiled by numba as the kernels are. Their rate bounds what any rewrite of the
same recurrence in this language reaches: the printed floor is the inside pass's multiply-adds at the fastest rate, and twice that for
the label marginals (each reverse pass does at least as many multiply-adds as its inside). The same width products
as one BLAS matrix product (numpy's, through numba; it needs SciPy, which the package does not depend on) are
timed beside them, for what a BLAS call would give; they do not count in the floor. The training pass
(the table's gradient besides) is timed too; its rate column counts the marginals' multiply-adds only.
"""
import time

import numpy as np
import torch
import typer


def inside_macs(n: int, K: int, M: int) -> int:
    """Multiply-adds of the inside pass on one sentence of n tokens (the kernel's loops, counted): for each
    width w <= k and start s, the splits' outer products (w ah M), the arcs' products (ah M, and M^2 for the
    left arc), the complete items' products (w ah M, and w M^2 for the left item); then the tail items (k ah M),
    where ah = 1 for the spans from the root (its one label) and M elsewhere."""
    total = 0
    for w in range(1, min(K, n) + 1):
        for s in range(n - w + 1):
            ah = 1 if s == 0 else M
            total += w * ah * M + ah * M + w * ah * M + (M * M + w * M * M if s > 0 else 0)
    if n > K:
        total += sum(K * (1 if i == 0 else M) * M for i in range(n - K))
    return total


def subtree_macs(n: int, K: int, M: int) -> int:
    """Multiply-adds of the subtree messages' inside pass on one sentence of n tokens (the kernel's loops,
    counted): each subtree z(m - e, m, m + f) (e + f < k) is hung by M^2 to a head on its left (one exists from
    its start's second token on) and M^2 to a head on its right (one exists within k of its start, before the
    end), and by M to the root (m <= k); each complete item of width w sums w (w + 1) / 2 terms of M; with a
    tail (n > k), each tail subtree (a left item of m times the tail's T[m]) costs the same to its left, and
    each tail row sums k (k + 1) / 2 terms of M."""
    K = min(K, n)
    total = 0
    for m in range(1, n + 1):
        for W in range(K):
            for e in range(W + 1):
                j, t = m - e, m + W - e
                if j < 1 or t > n:
                    continue
                total += (M * M if j >= 2 else 0) + (M * M if t < n and t + 1 <= j + K else 0) + (M if m <= K else 0)
    for w in range(1, K + 1):
        terms = w * (w + 1) // 2
        total += (n - w + 1) * terms * M + (n - w) * terms * M  # CR (the root's included), CL
    if n > K:
        for m in range(1, n):
            for e in range(K):
                if m - e < 1:
                    break
                total += (M * M if m - e >= 2 else 0) + (M if m <= K else 0)
        total += (n - K) * (K * (K + 1) // 2) * M
    return total


#: rows of one width's subtrees in a tweet (15 tokens, width 3): what the kernel's products take at once
WIDTH_ROWS = 45


def loop_rates(M: int, reps: int = 200_000):
    """Multiply-adds per second of an (M, M) matrix-vector product, the same three vectors at a time, a
    rank-one update, and the kernel's width products ([R; L], (2M, M), times WIDTH_ROWS rows) three rows at a
    time and as one BLAS matrix product (float64; the loops compiled with the subtree kernel's flags)."""
    from numba import njit

    from spacy_nldm.structs.compiled_subtrees import FASTMATH

    @njit(fastmath=FASTMATH, error_model="numpy")
    def matvec(A, x, y, reps):
        for _ in range(reps):
            for a in range(A.shape[0]):
                acc = 0.0
                for c in range(A.shape[1]):
                    acc += A[a, c] * x[c]
                y[a] += acc * 1e-9
        return y

    @njit(fastmath=FASTMATH, error_model="numpy")
    def rank_one(A, x, z, reps):
        for _ in range(reps):
            for a in range(A.shape[0]):
                f = x[a] * 1e-9
                for c in range(A.shape[1]):
                    A[a, c] += f * z[c]
        return A

    @njit(fastmath=FASTMATH, error_model="numpy")
    def rows3(A, X, Y, reps):  # Y[i] = A X[i] for every row of X, three rows at a time (the kernel's products)
        for _ in range(reps):
            for i in range(0, X.shape[0] - 2, 3):
                for a in range(A.shape[0]):
                    s0, s1, s2 = 0.0, 0.0, 0.0
                    for c in range(A.shape[1]):
                        v = A[a, c]
                        s0 += v * X[i, c]
                        s1 += v * X[i + 1, c]
                        s2 += v * X[i + 2, c]
                    Y[i, a], Y[i + 1, a], Y[i + 2, a] = s0, s1, s2
        return Y

    @njit(error_model="numpy")
    def rows_blas(AT, X, Y, reps):  # the same products as one matrix product (numpy's BLAS, through numba)
        for _ in range(reps):
            np.dot(X, AT, Y)
        return Y

    rng = np.random.default_rng(0)
    A, x = rng.random((M, M)), rng.random(M)
    both, rows = rng.random((2 * M, M)), rng.random((WIDTH_ROWS, M))  # [R; L] and one width's subtrees
    cases = [("matrix-vector", matvec, (A.copy(), x, np.zeros(M)), M * M),
             ("matrix times three vectors", rows3, (A.copy(), rng.random((3, M)), np.zeros((3, M))), 3 * M * M),
             ("rank-one update", rank_one, (A.copy(), x, x.copy()), M * M),
             (f"[R; L] times {WIDTH_ROWS} rows, three at a time", rows3, (both, rows, np.zeros((WIDTH_ROWS, 2 * M))),
              WIDTH_ROWS * 2 * M * M)]
    both_T = np.ascontiguousarray(both.T)
    try:  # numba's np.dot needs SciPy's BLAS
        rows_blas(both_T, rows, np.zeros((WIDTH_ROWS, 2 * M)), 1)
        cases.append((f"[R; L] times {WIDTH_ROWS} rows, BLAS", rows_blas, (both_T, rows, np.zeros((WIDTH_ROWS, 2 * M))),
                      WIDTH_ROWS * 2 * M * M))
    except Exception:  # noqa: BLE001 (no SciPy: the line is left out)
        pass
    rates = {}
    for name, fn, args, macs in cases:
        fn(*args, 10)
        count = max(10, reps * M * M // macs)
        start = time.perf_counter()
        fn(*args, count)
        rates[name] = count * macs / (time.perf_counter() - start)
    return rates


def main(labels: int = typer.Option(25, help="M, the labels"), max_dist: int = typer.Option(3, help="k, the longest arc"),
         batch: int = typer.Option(256, help="Sentences a batch"), longest: int = typer.Option(30, help="Longest sentence"),
         repeats: int = typer.Option(5, help="Timed calls; the fastest counts")) -> None:
    from spacy_nldm.structs import compiled, compiled_subtrees

    torch.set_num_threads(1)
    M, K = labels, max_dist
    g = torch.Generator().manual_seed(0)
    lengths = torch.randint(5, longest + 1, (batch,), generator=g)
    emissions = torch.randn(batch, longest, M, generator=g, dtype=torch.float64) * 3
    table = torch.randn(2, M + 1, M, generator=g, dtype=torch.float64)
    tokens = int(lengths.sum())
    real = torch.arange(longest)[None, :] < lengths[:, None]
    packed = np.ascontiguousarray(emissions[real].numpy())
    lens = lengths.numpy().astype(np.int64)
    offsets = np.concatenate([[0], np.cumsum(lens)[:-1]]).astype(np.int64)

    def subtrees(with_grad: bool, params: bool) -> None:
        done = np.zeros(batch, dtype=np.bool_)
        compiled_subtrees.inside_outside(packed, table.numpy(), np.zeros((2, 0)), offsets, lens, K, compiled.THRESHOLD,
                                         with_grad, np.zeros(batch), done, np.zeros(packed.shape),
                                         np.zeros((batch, 2, M + 1, M) if params else (0, 2, 1, 1)),
                                         np.zeros((0, 2, 0)))
        assert done.all(), "every sentence is the subtree messages' own at this scale"

    kernels = {
        "item by item": (lambda with_grad, params: compiled.inside_outside_factored(
            emissions, table, None, lengths, K, with_grad, labels_only=not params),
            sum(inside_macs(int(n), K, M) for n in lengths) / tokens),
        "subtree messages": (subtrees, sum(subtree_macs(int(n), K, M) for n in lengths) / tokens),
    }
    rates = loop_rates(M)
    fastest = max(rate for name, rate in rates.items() if "BLAS" not in name)  # this language's loops
    print(f"M = {M}, k = {K}, {batch} sentences, {tokens} tokens")
    print("| kernel | inside multiply-adds a token | pass | us a token | multiply-adds per second | floor, us a token |")
    print("|---|---|---|---|---|---|")
    for kernel, (run, macs) in kernels.items():
        for name, with_grad, params in (("inside (log Z)", False, False),
                                        ("inside and reverse (label marginals)", True, False),
                                        ("and the table's gradient (training)", True, True)):
            run(with_grad, params)
            best = float("inf")
            for _ in range(repeats):
                start = time.perf_counter()
                run(with_grad, params)
                best = min(best, time.perf_counter() - start)
            done = macs * (2 if with_grad else 1)
            floor = f"{done / fastest * 1e6:.2f}" if not params else "-"
            print(f"| {kernel} | {macs:.0f} | {name} | {best / tokens * 1e6:.2f} | "
                  f"{done * tokens / best / 1e9:.2f} G | {floor} |")
    for name, rate in rates.items():
        print(f"loop alone: {name}: {rate / 1e9:.2f} G multiply-adds a second")


if __name__ == "__main__":
    typer.run(main)
