"""How fast the NLDM's label marginals could be on this CPU: the compiled inside and inside-outside passes
of the latent tree beside the rate of their two inner loops alone.

    OMP_NUM_THREADS=1 python -m projects.paper.scripts.kernel_floor

The kernel (``spacy_nldm.structs.compiled``) runs on factored scores of the shape ``nldm_tagger`` tags with
(M = 25 labels, arcs up to k = 3 tokens long, batches of 256 sentences of 5 to 30 tokens). Its inside pass does,
for each token, sum_{w=1..k} (3 w + 2) M^2 multiply-adds for the items of width w (the splits' outer
products, the arcs' elementwise products, the complete items' matrix-vector products) and k M^2 more for the
tail items: 27 M^2 at k = 3. The two loops it is made of (an (M, M) matrix times a vector, an (M, M) rank-one
update) are timed alone in L1, compiled by numba as the kernel is. Their rate bounds what any rewrite of the
same recurrence in this language reaches: the printed floor is the inside pass's multiply-adds at that rate,
and twice that for the label marginals (the outside pass does at least as many multiply-adds as the inside).
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


def loop_rates(M: int, reps: int = 200_000):
    """Multiply-adds per second of an (M, M) matrix-vector product and rank-one update (float64)."""
    from numba import njit

    @njit(fastmath={"reassoc", "contract"}, error_model="numpy")
    def matvec(A, x, y, reps):
        for _ in range(reps):
            for a in range(A.shape[0]):
                acc = 0.0
                for c in range(A.shape[1]):
                    acc += A[a, c] * x[c]
                y[a] += acc * 1e-9
        return y

    @njit(fastmath={"reassoc", "contract"}, error_model="numpy")
    def rank_one(A, x, z, reps):
        for _ in range(reps):
            for a in range(A.shape[0]):
                f = x[a] * 1e-9
                for c in range(A.shape[1]):
                    A[a, c] += f * z[c]
        return A

    rng = np.random.default_rng(0)
    A, x = rng.random((M, M)), rng.random(M)
    rates = {}
    for name, fn, args in (("matrix-vector", matvec, (A.copy(), x, np.zeros(M))),
                           ("rank-one update", rank_one, (A.copy(), x, x.copy()))):
        fn(*args, 10)
        start = time.perf_counter()
        fn(*args, reps)
        rates[name] = reps * M * M / (time.perf_counter() - start)
    return rates


def main(labels: int = typer.Option(25, help="M, the labels"), max_dist: int = typer.Option(3, help="k, the longest arc"),
         batch: int = typer.Option(256, help="Sentences a batch"), longest: int = typer.Option(30, help="Longest sentence"),
         repeats: int = typer.Option(5, help="Timed calls; the fastest counts")) -> None:
    from spacy_nldm.structs import compiled

    torch.set_num_threads(1)
    M, K = labels, max_dist
    g = torch.Generator().manual_seed(0)
    lengths = torch.randint(5, longest + 1, (batch,), generator=g)
    emissions = torch.randn(batch, longest, M, generator=g, dtype=torch.float64) * 3
    table = torch.randn(2, M + 1, M, generator=g, dtype=torch.float64)
    tokens = int(lengths.sum())
    timed = {}
    for name, with_grad in (("inside (log Z)", False), ("inside-outside (label marginals)", True)):
        run = lambda: compiled.inside_outside_factored(emissions, table, None, lengths, K, with_grad,  # noqa: E731
                                                       labels_only=True)
        run()
        best = float("inf")
        for _ in range(repeats):
            start = time.perf_counter()
            run()
            best = min(best, time.perf_counter() - start)
        timed[name] = best / tokens
    macs = sum(inside_macs(int(n), K, M) for n in lengths) / tokens  # the inside pass's, a token
    rates = loop_rates(M)
    fastest = max(rates.values())
    print(f"M = {M}, k = {K}, {batch} sentences, {tokens} tokens; inside pass: {macs:.0f} multiply-adds a token")
    print("| measured | us a token | multiply-adds per second |")
    print("|---|---|---|")
    for name, seconds in timed.items():
        done = macs * (1 if name.startswith("inside (") else 2)
        print(f"| kernel, {name} | {seconds * 1e6:.2f} | {done / seconds / 1e9:.2f} G |")
    for name, rate in rates.items():
        print(f"| loop alone: {name} | - | {rate / 1e9:.2f} G |")
    print(f"floor at the faster loop's rate: inside {macs / fastest * 1e6:.2f} us a token, "
          f"label marginals {2 * macs / fastest * 1e6:.2f} us a token")


if __name__ == "__main__":
    typer.run(main)
