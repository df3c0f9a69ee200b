"""``python -m projects.paper structs``: speed and memory of the structured core.

Each shape runs in a fresh subprocess, so that its peak memory (resident set on CPU, allocator
peak on CUDA) is its own. Times are medians over ``--repeats`` runs after one warm-up run.
"""
import json
import platform
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Optional

import typer

from . import app

REPOSITORY = Path(__file__).resolve().parents[3]  # the measuring subprocess imports projects.paper from there


@app.command("structs")
def bench_structs(
    batch: int = typer.Option(32, help="Sentences per batch (B)."),
    lengths: str = typer.Option("10,20,30,60", help="Sentence lengths n, comma-separated."),
    labels: str = typer.Option("5,17,25", help="Label counts M, comma-separated."),
    max_dists: str = typer.Option("none,5", help="Dependency length limits k ('none' = no limit)."),
    repeats: int = typer.Option(3, help="Timed runs per measurement (median reported)."),
    reference_up_to: int = typer.Option(30, help="Also time the reference lane up to this n."),
    device: str = typer.Option("cpu", help="cpu or cuda."),
    dtype: str = typer.Option("float32", help="float32 or float64."),
    threads: int = typer.Option(0, help="torch threads (0 = torch's default)."),
    output: Optional[Path] = typer.Option(None, help="Also write the Markdown table here."),
    peers: bool = typer.Option(False, help="Also compare with torch-struct and pytorch-crf: speed and float32 error."),
    baseline: Optional[Path] = typer.Option(None, help="Also time log Z, Viterbi and ChainScores against this other checkout's structs."),
    peer_repeats: int = typer.Option(15, help="Alternating runs per comparison (--peers, --baseline, --lanes)."),
    lanes: bool = typer.Option(False, help="Also time every lane of the tree and the chain, each forced, against the reference."),
    constraints: bool = typer.Option(False, help="Also time the chains with BIO and BILUO constraints (structs.constrain) against the same chains without."),
    nbest: bool = typer.Option(False, help="Also time crf_nbest (k = 5) against the 1-best decode of the same scores, "
                               "and the span probabilities against the label marginals."),
) -> None:
    """Forward and backward time and peak memory of log_partition on DirectionalScores (as the components
    give them; the lane tree_lane picks), with the 1st-order CRF at the same shape and the reference lane.

    'CPU s' is the process CPU time of forward+backward: on a shared machine with --threads 1 it is
    close to the wall time the same run would take alone. An empty --lengths skips this grid.
    ``--peers``, ``--baseline``, ``--lanes``, ``--constraints`` and ``--nbest`` run in this process,
    alternating, with --threads (1 if 0).
    """
    header = (
        "| B | n | M | max_dist | forward s | backward s | fwd+bwd s | fwd+bwd CPU s | peak MB | CRF-1 fwd+bwd s "
        "| NLDM/CRF-1 | reference fwd+bwd s | reference/ours |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|"
    )
    import torch

    if device not in ("cpu", "cuda"):
        raise typer.BadParameter(f"--device must be cpu or cuda, got {device!r}")
    if device == "cuda" and not torch.cuda.is_available():
        typer.secho(f"error: --device cuda: torch {torch.__version__} sees no CUDA device", fg=typer.colors.RED, err=True)
        raise typer.Exit(code=1)
    lines = [header]
    typer.echo(_machine(device, threads))
    typer.echo(header)
    for n in _ints(lengths):
        for m in _ints(labels):
            for k in max_dists.split(","):
                config = dict(
                    batch=batch, n=n, m=m, max_dist=None if k.strip().lower() == "none" else int(k),
                    repeats=repeats, reference=n <= reference_up_to, device=device, dtype=dtype, threads=threads,
                )
                row = _run_isolated(config)
                line = _format(config, row)
                lines.append(line)
                typer.echo(line)
    if peers or baseline is not None or lanes or constraints:
        lines += _comparisons(peers, baseline, batch, threads or 1, peer_repeats, lengths, labels, max_dists, device,
                              lanes, constraints)
    if nbest:
        lines += _nbest_table(batch, threads or 1, peer_repeats)
    if output is not None:
        output.parent.mkdir(parents=True, exist_ok=True)
        output.write_text(_machine(device, threads) + "\n\n" + "\n".join(lines) + "\n", encoding="utf8")
        typer.echo(f"Wrote {output}")


def _comparisons(peers: bool, baseline: Optional[Path], batch: int, threads: int, repeats: int,
                 lengths: str, labels: str, max_dists: str, device: str = "cpu", lanes: bool = False,
                 constraints: bool = False) -> list:
    """The --lanes, --constraints, --peers and --baseline tables (printed as they come), as lines, on
    ``device`` (timed by wall clock between synchronisations on CUDA)."""
    import torch

    from .. import peers as bench_peers

    torch.set_num_threads(threads)
    lines = []

    def emit(line: str = "") -> None:
        lines.append(line)
        typer.echo(line)

    where = f"{threads} thread(s)" if device == "cpu" else device
    if lanes:
        emit(f"\nEvery lane forced, against the reference lane (B={batch}, float32, one process, {where}, "
             f"alternating, {bench_peers.unit(device)}):\n")
        emit("| structure | call | shape | lane | lane s | reference s | lane / reference |\n|---|---|---|---|---|---|---|")
        for structure, call, shape, lane, ours, ref in bench_peers.lane_rows(batch, repeats, device):
            emit(f"| {structure} | {call} | {shape} | {lane} | {ours:.4f} | {ref:.4f} | {ours / ref:.2f} |")
    if constraints:
        emit(f"\nBIO and BILUO constraints (6 types) against none (B={batch}, float32, std 1, lengths drawn in n/2..n, "
             f"one process, {where}, alternating, {bench_peers.unit(device)}):\n")
        emit("| call | shape | constrained s | unconstrained s | constrained / unconstrained |\n|---|---|---|---|---|")
        for call, shape, ours, plain in bench_peers.constraint_rows(batch, repeats, device):
            emit(f"| {call} | {shape} | {ours:.4f} | {plain:.4f} | {ours / plain:.2f} |")
    if baseline is not None:
        other = bench_peers.load_baseline(baseline)
        emit(f"\nAgainst the structs of {baseline} (one process, {where}, alternating, {bench_peers.unit(device)}):\n")
        emit("| call | this checkout s | baseline s | this / baseline |\n|---|---|---|---|")
        shapes = [(n, m, None if k.strip().lower() == "none" else int(k))
                  for n in _ints(lengths) or [30] for m in _ints(labels) or [17] for k in max_dists.split(",")]
        for row, ours, theirs in bench_peers.baseline_rows(other, batch, shapes, repeats, device):
            emit(f"| {row} | {ours:.4f} | {theirs:.4f} | {ours / theirs:.2f} |")
    if peers:
        missing = bench_peers.peers_available()
        if missing:
            emit(f"\nPeers skipped: {missing}.")
        else:
            bench_peers.quiet()
            emit(f"\nAgainst the peers (B={batch}, float32, one process, {where}, alternating, "
                 f"{bench_peers.unit(device)}, potentials built inside the timed call):\n")
            emit("| comparison | project s | peer s | project / peer |\n|---|---|---|---|")
            for row, ours, theirs in bench_peers.speed_rows(batch, repeats, device):
                emit(f"| {row} | {ours:.4f} | {theirs:.4f} | {ours / theirs:.2f} |")
        emit(f"\nSpeed by score scale (B={batch}, n=30, M=17, float32, {device}, forward+backward of log Z, "
             f"{bench_peers.unit(device)}):\n")
        head = "| score std | tree s | chain-1 ms | ChainScores ms |" + (
            " pytorch-crf ms | chain / pytorch-crf | ChainScores / pytorch-crf |" if not missing else "")
        emit(head + "\n|---|" + "---|" * (head.count("|") - 2))
        for scale, cells in bench_peers.scale_rows(batch, repeats, not missing, device):
            emit(f"| {scale:g} | " + " | ".join(cells) + " |")
        emit(f"\nfloat32 error on {device} against float64 on the CPU (log Z: largest relative error; marginals: "
             "largest absolute error):\n")
        emit(bench_peers.accuracy_header(not missing))
        for scale, cells in bench_peers.accuracy_rows(not missing, device):
            emit(f"| {scale:g} | " + " | ".join(cells) + " |")
    return lines


def _nbest_table(batch: int, threads: int, repeats: int, k: int = 5) -> list:
    """The --nbest tables (printed as they come), as lines, on the CPU, random scores of std 1 (float32):
    :func:`~spacy_nldm.structs.crf_nbest` against the 1-best decode (:func:`~spacy_nldm.structs.crf_viterbi`)
    of the same scores, without and with the BIO rules (:func:`~spacy_nldm.structs.constrain`); the span
    probabilities of two spans a sentence against the label marginals."""
    import torch

    from spacy_nldm import structs

    from .. import peers as bench_peers

    torch.set_num_threads(threads)
    lines = []

    def emit(line: str) -> None:
        lines.append(line)
        typer.echo(line)

    where = f"float32, {threads} thread(s), alternating, {bench_peers.unit('cpu')}"
    emit(f"\nn-best (k = {k}) against the 1-best decode of the same scores (B={batch}, {where}):\n")
    emit("| scores | n | M | BIO rules | n-best s | 1-best s | n-best / 1-best |\n|---|---|---|---|---|---|---|")
    gen = torch.Generator().manual_seed(0)
    n = 30
    lengths = torch.full((batch,), n)
    inputs = {}
    for m in (17, 25):
        allowed = structs.allowed_transitions(structs.entity_labels([str(i) for i in range(m // 2)], "BIO"), "BIO")
        draw = lambda *shape: torch.randn(*shape, generator=gen)  # noqa: E731
        chain = structs.ChainScores(draw(batch, n, m), draw(m, m), draw(m), draw(m))
        second = structs.SecondOrderScores(draw(batch, n, m), draw(m + 1, m + 1, m))
        inputs[m] = allowed, structs.constrain(chain, allowed, lengths)
        for name, scores in (("ChainScores", chain), ("SecondOrderScores", second)):
            for rules in (False, True):
                given = structs.constrain(scores, allowed, lengths) if rules else scores
                many, one = bench_peers.alternate(lambda: structs.crf_nbest(given, lengths, k),
                                                  lambda: structs.crf_viterbi(given, lengths), repeats)
                emit(f"| {name} | {n} | {m} | {'yes' if rules else 'no'} | {many:.4f} | {one:.4f} | {many / one:.2f} |")
    emit(f"\nSpan probabilities (BIO) against the label marginals of the same scores ({where}):\n")
    emit("| structure | B | n | M | spans | lane | spans s | marginals s | spans / marginals |\n"
         "|---|---|---|---|---|---|---|---|---|")
    for m, (allowed, chain) in inputs.items():
        tags = structs.entity_tags(structs.entity_labels([str(i) for i in range(m // 2)], "BIO"), "BIO")
        for structure, b, length, many in (("chain-1 (ChainScores)", batch, n, False),
                                           ("chain-1 (ChainScores)", batch, n, True),
                                           ("NLDM (DirectionalScores)", 32, 20, False)):
            some = torch.full((b,), length)
            if many:  # every span of 1-3 tokens and every type
                spans = torch.tensor([(r, a, a + w, x) for r in range(b) for a in range(length) for w in (1, 2, 3)
                                      if a + w <= length for x in range(len(tags.types))])
            else:  # two spans of 1-3 tokens a sentence
                start = torch.randint(0, length - 3, (2 * b,), generator=gen)
                width = torch.randint(1, 4, (2 * b,), generator=gen)
                spans = torch.stack([torch.arange(2 * b) // 2, start, start + width,
                                     torch.randint(0, len(tags.types), (2 * b,), generator=gen)], 1)
            if structure.startswith("chain"):
                lane = "closed" if len(spans) >= structs.spans.CLOSED_FROM * b else "mask"
                probs, marginals = (lambda: structs.crf_span_log_probs(chain, some, spans, tags),
                                    lambda: structs.crf_marginals(chain, some))
            else:
                lane = "mask"
                scores = structs.DirectionalScores(torch.randn(b, length, 2, m + 1, m, generator=gen))
                probs, marginals = (lambda: structs.span_log_probs(scores, some, spans, tags),
                                    lambda: structs.label_marginals(scores, some))
            ours, base = bench_peers.alternate(probs, marginals, repeats)
            emit(f"| {structure} | {b} | {length} | {m} | {len(spans) / b:g} a sentence | {lane} | {ours:.4f} | "
                 f"{base:.4f} | {ours / base:.2f} |")
    return lines


def _ints(text: str):
    return [int(part) for part in text.split(",") if part.strip()]


def _machine(device: str, threads: int) -> str:
    import torch

    cpu = platform.processor() or platform.machine()
    where = torch.cuda.get_device_name(0) if device == "cuda" else f"{cpu}, {torch.get_num_threads() if not threads else threads} threads"
    return f"torch {torch.__version__}, {where}, python {platform.python_version()}"


def _run_isolated(config: dict) -> dict:
    done = subprocess.run(
        [sys.executable, "-m", "projects.paper.cli.structs", json.dumps(config)], capture_output=True, text=True,
        cwd=REPOSITORY,
    )
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
        return {"error": tail[0]}
    return json.loads(done.stdout.strip().splitlines()[-1])


def _format(config: dict, row: dict) -> str:
    k = "none" if config["max_dist"] is None else config["max_dist"]
    lead = f"| {config['batch']} | {config['n']} | {config['m']} | {k} |"
    if "error" in row:
        return lead + f" failed: {row['error']} |" + " |" * 8
    ref = row.get("reference")
    total = row["forward"] + row["backward"]
    return (
        lead + f" {row['forward']:.3f} | {row['backward']:.3f} | {total:.3f} | {row['cpu']:.3f} | {row['peak_mb']:.0f} |"
        f" {row['crf']:.4f} | {total / row['crf']:.1f} |"
        + (f" {ref:.3f} | {ref / total:.1f} |" if ref is not None else " - | - |")
    )


def _median_time(fn, repeats: int, sync) -> float:
    times = []
    for _ in range(repeats):
        sync()
        start = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _measure(config: dict) -> dict:
    import torch

    from spacy_nldm.structs import DirectionalScores, crf_log_partition, log_partition

    if config["threads"]:
        torch.set_num_threads(config["threads"])
    device, dtype = torch.device(config["device"]), getattr(torch, config["dtype"])
    cuda = device.type == "cuda"
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    b, n, m, k = config["batch"], config["n"], config["m"], config["max_dist"]
    gen = torch.Generator().manual_seed(0)
    F = torch.randn(b, n, 2, m + 1, m, generator=gen, dtype=dtype).to(device).requires_grad_(True)
    scores = DirectionalScores(F)
    lengths = torch.full((b,), n, device=device)
    if cuda:
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
    else:
        base = _rss_kb()
    state = {}

    def forward():
        state["z"] = log_partition(scores, lengths, max_dist=k)

    def backward():
        state["z"].sum().backward()
        F.grad = None

    forward(), backward()  # warm-up
    fwd, bwd, cpu = [], [], []
    for _ in range(config["repeats"]):
        start_cpu = time.process_time()
        fwd.append(_median_time(forward, 1, sync))
        bwd.append(_median_time(backward, 1, sync))
        cpu.append(time.process_time() - start_cpu)
    if cuda:
        peak_mb = (torch.cuda.max_memory_allocated() - base) / 2**20
    else:
        peak_mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - base) / 1024
    potentials = torch.randn(b, n, m, m, generator=gen, dtype=dtype).to(device).requires_grad_(True)

    def crf():
        crf_log_partition(potentials, lengths).sum().backward()

    crf()
    row = dict(
        forward=statistics.median(fwd), backward=statistics.median(bwd), cpu=statistics.median(cpu), peak_mb=peak_mb,
        crf=_median_time(crf, config["repeats"], sync),
    )
    if config["reference"]:

        def reference():
            log_partition(scores, lengths, max_dist=k, lane="reference").sum().backward()
            F.grad = None

        reference()  # warm-up
        row["reference"] = _median_time(reference, 1, sync)
    return row


def _rss_kb() -> int:
    with open("/proc/self/statm") as statm:
        pages = int(statm.read().split()[1])
    return pages * resource.getpagesize() // 1024


if __name__ == "__main__":
    print(json.dumps(_measure(json.loads(sys.argv[1]))))
