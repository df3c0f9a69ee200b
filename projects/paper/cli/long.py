"""``python -m projects.paper long``: time and peak memory of tagging one long sentence.

Each measurement runs in a fresh subprocess, so that its peak resident memory is its own: "peak MB"
is the growth of the resident set from just before the timed call to its end (the process's own
high-water mark, so the inputs and the imported libraries are not counted). Measured on the NLDM's
structured layer (:class:`~spacy_nldm.models.structure.LatentTree` on random factored scores F of
shape (1, n, 2, M+1, M)) and, with ``--pipeline``, on ``nlp(doc)`` of an untrained ``nldm_tagger``
pipeline whose ``max_length`` is raised to n (the sentence is then tagged whole, not in windows).

The measuring function only uses ``LatentTree(max_dist).decode`` and ``.label_marginals``, which
older versions of the package have too: run this file with ``python path/to/long.py CONFIG``
and another checkout first on PYTHONPATH to measure that version the same way.
"""
import json
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Optional

import typer

try:  # run as a module of the package, or as a file against another checkout (see above)
    from . import app
except ImportError:  # pragma: no cover
    app = None

TASKS = ("viterbi", "posterior", "marginals")


def long(
    lengths: str = typer.Option("1000,5000", help="Sentence lengths n, comma-separated."),
    labels: int = typer.Option(25, help="Label count M (25: the ARK Twitter tags)."),
    max_dist: int = typer.Option(5, help="Dependency length limit k."),
    tasks: str = typer.Option(",".join(TASKS), help="viterbi, posterior (decoding) and marginals."),
    pipeline: bool = typer.Option(False, help="Also time nlp(doc) of an untrained nldm_tagger pipeline."),
    repeats: int = typer.Option(1, help="Timed runs per measurement (median reported)."),
    threads: int = typer.Option(1, help="torch threads."),
    output: Optional[Path] = typer.Option(None, help="Also write the Markdown table here."),
) -> None:
    """Seconds and peak memory to decode (or take the label marginals of) one n-token sentence."""
    header = "| what | n | M | k | seconds | peak MB |\n|---|---|---|---|---|---|"
    lines = [header]
    typer.echo(header)
    jobs = [(task, n) for n in _ints(lengths) for task in tasks.split(",") if task.strip()]
    if pipeline:
        jobs += [("pipeline", n) for n in _ints(lengths)]
    for task, n in jobs:
        config = dict(task=task.strip(), n=n, m=labels, k=max_dist, repeats=repeats, threads=threads)
        row = run_isolated(config)
        what = "nlp(doc), untrained nldm_tagger" if task == "pipeline" else f"LatentTree {task}"
        if "error" in row:
            line = f"| {what} | {n} | {labels} | {max_dist} | failed: {row['error']} | |"
        else:
            line = f"| {what} | {n} | {labels} | {max_dist} | {row['seconds']:.2f} | {row['peak_mb']:.0f} |"
        lines.append(line)
        typer.echo(line)
    if output is not None:
        output.parent.mkdir(parents=True, exist_ok=True)
        output.write_text("\n".join(lines) + "\n", encoding="utf8")
        typer.echo(f"Wrote {output}")


if app is not None:
    app.command("long")(long)


def _ints(text: str):
    return [int(part) for part in text.split(",") if part.strip()]


def run_isolated(config: dict) -> dict:
    done = subprocess.run([sys.executable, __file__, json.dumps(config)], capture_output=True, text=True)
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
        return {"error": tail[0]}
    return json.loads(done.stdout.strip().splitlines()[-1])


def _peak_kb() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def _current_kb() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * resource.getpagesize() // 1024


def measure(config: dict) -> dict:
    import torch

    torch.set_num_threads(config["threads"])
    n, m, k = config["n"], config["m"], config["k"]
    if config["task"] == "pipeline":
        call = _pipeline_call(n, m, k)
    else:
        from spacy_nldm.models.structure import LatentTree

        tree = LatentTree(max_dist=k)
        F = torch.randn(1, n, 2, m + 1, m, generator=torch.Generator().manual_seed(0))
        lengths = torch.tensor([n])
        if config["task"] == "marginals":
            call = lambda: tree.label_marginals(F, lengths)  # noqa: E731
        else:
            call = lambda: tree.decode(F, lengths, posterior=config["task"] == "posterior")  # noqa: E731
    base = _current_kb()
    times = []
    for _ in range(config["repeats"]):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return dict(seconds=statistics.median(times), peak_mb=max(0, _peak_kb() - base) / 1024)


def _pipeline_call(n: int, m: int, k: int):
    """nlp(doc) for one n-token sentence, an nldm_tagger with max_length n initialised on m labels."""
    import spacy
    from spacy.tokens import Doc
    from spacy.training import Example

    nlp = spacy.blank("en")
    nlp.add_pipe("nldm_tagger", config={"max_length": n, "model": {"max_dist": k}})
    tags = [f"T{i}" for i in range(m)]
    words = [f"w{i}" for i in range(m)]
    examples = [Example.from_dict(nlp.make_doc(" ".join(words)), {"tags": tags})]
    nlp.initialize(lambda: examples)
    doc = Doc(nlp.vocab, words=[f"w{i % 997}" for i in range(n)])
    nlp(Doc(nlp.vocab, words=["warm", "up"]))
    return lambda: nlp(doc)


if __name__ == "__main__":
    print(json.dumps(measure(json.loads(sys.argv[1]))))
