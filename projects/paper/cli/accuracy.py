"""``python -m projects.paper accuracy``: the structured taggers against spaCy's ``tagger``.

Each system is added with its factory's default config (what ``nlp.add_pipe`` gives), trained in
the plain loop of :mod:`projects.paper.runs.loop` on the same sentences, batches and seed, and scored on the
held-out (test) sentences. The table gives mean ± standard deviation over the seeds and the
per-dataset differences; runs are kept in a JSON-lines file and never recomputed (a changed
factory default or package version makes a new run).
"""
import hashlib
import json
import statistics
import subprocess
from pathlib import Path
from typing import Dict, List, Optional

import typer

from ..registry import canonical
from ..runs.loop import DATASETS, RunSpec, run_all
from ..runs.spacy_train import mean_sd as _stats
from . import app

#: table name -> factory (each with its factory's default config)
SYSTEMS = {"softmax": "tagger", "crf": "crf_tagger", "nldm": "nldm_tagger"}
PAIRS = [("crf", "softmax"), ("nldm", "softmax"), ("nldm", "crf")]
#: the runs file `python -m projects.paper accuracy` reads and appends to unless --results names another
DEFAULT_RESULTS = "projects/paper/results/accuracy/runs.jsonl"
#: the converted corpora `spacy project run corpora` and `spacy project run ud-corpora projects/paper` write
DEFAULT_CORPUS = "corpus"


def config_signature(config: dict, version: str) -> str:
    """Short hash of a component's settings, the package version and spaCy's: part of a run's identity."""
    import spacy

    text = json.dumps(config, sort_keys=True, default=str) + version + spacy.__version__
    return hashlib.sha1(text.encode("utf8")).hexdigest()[:10]


def default_config(factory: str) -> dict:
    """The factory's default settings (what ``nlp.add_pipe(factory)`` gives), a copy."""
    import copy

    import spacy

    if factory != "tagger":
        from spacy_nldm import pipeline  # noqa: F401  (registers the factories)
    return copy.deepcopy(spacy.blank("en").get_factory_meta(factory).default_config)


def default_signature(factory: str) -> str:
    """:func:`config_signature` of a factory's default config with this package's version."""
    from spacy_nldm import about

    return config_signature(default_config(factory), about.__version__)


def _git_commit() -> str:
    try:
        out = subprocess.run(["git", "describe", "--always", "--dirty"], capture_output=True, text=True, timeout=10)
        return out.stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def _diff(a: List[float], b: List[float]) -> Optional[float]:
    return statistics.mean(a) - statistics.mean(b) if a and b else None


def accuracy_table(rows: Dict[str, Dict[str, List[float]]], systems: List[str]) -> List[str]:
    """Markdown lines: per dataset the systems' mean ± std and the pairwise differences of means,
    then the average over datasets (of the per-dataset means) and how many datasets each pair wins."""
    pairs = [(a, b) for a, b in PAIRS if a in systems and b in systems]
    head = ["dataset"] + systems + [f"{a} − {b}" for a, b in pairs]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    means = {s: [] for s in systems}
    wins = {p: 0 for p in pairs}
    complete = 0
    for dataset, by_system in rows.items():
        cells = [dataset] + [_stats(by_system.get(s, [])) for s in systems]
        for a, b in pairs:
            d = _diff(by_system.get(a, []), by_system.get(b, []))
            cells.append("—" if d is None else f"{d:+.2f}")
        lines.append("| " + " | ".join(cells) + " |")
        if all(by_system.get(s) for s in systems):
            complete += 1
            for s in systems:
                means[s].append(statistics.mean(by_system[s]))
            for a, b in pairs:
                wins[(a, b)] += _diff(by_system[a], by_system[b]) >= 0
    if complete:
        avg = {s: statistics.mean(v) for s, v in means.items()}
        cells = [f"**average ({complete} datasets)**"] + [f"{avg[s]:.2f}" for s in systems]
        cells += [f"{avg[a] - avg[b]:+.2f}" for a, b in pairs]
        lines.append("| " + " | ".join(cells) + " |")
        cells = ["datasets where a ≥ b"] + [""] * len(systems) + [f"{wins[p]}/{complete}" for p in pairs]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


@app.command("accuracy")
def bench_accuracy(
    datasets: str = typer.Option(",".join(DATASETS), help=f"Comma-separated, from {', '.join(DATASETS)}."),
    systems: str = typer.Option(",".join(SYSTEMS), help="Comma-separated, from softmax, crf, nldm."),
    seeds: str = typer.Option("0,1,2", help="Training seeds, comma-separated."),
    epochs: int = typer.Option(10, help="Epochs over the training sentences."),
    batch_size: int = typer.Option(16, help="Sentences per nlp.update batch."),
    corpus: Path = typer.Option(Path(DEFAULT_CORPUS), help="Folder of the converted corpora (spacy project run corpora, then spacy project run ud-corpora projects/paper)."),
    results: Path = typer.Option(Path(DEFAULT_RESULTS), help="Runs file (JSON lines): read and appended."),
    workers: int = typer.Option(2, help="Runs at a time (each in its own process, one torch thread)."),
    output: Optional[Path] = typer.Option(None, help="Also write the Markdown table here."),
) -> None:
    """Train spaCy's tagger, crf_tagger and nldm_tagger with their default configs in the same plain
    loop (nlp.initialize's default optimizer, nlp.update on batches of --batch-size sentences,
    --epochs epochs) and print held-out accuracy side by side, with the differences."""
    names = [s.strip() for s in systems.split(",") if s.strip()]
    sets = [canonical(d.strip()) for d in datasets.split(",") if d.strip()]
    for name in names:
        if name not in SYSTEMS:
            raise typer.BadParameter(f"unknown system {name!r}; choose from {', '.join(SYSTEMS)}")
    for name in sets:
        if name not in DATASETS:
            raise typer.BadParameter(f"unknown dataset {name!r}; choose from {', '.join(DATASETS)}")
    seed_list = [int(s) for s in seeds.split(",") if s.strip()]
    signatures = {name: default_signature(SYSTEMS[name]) for name in names}
    specs = [
        RunSpec(
            dataset=d, system=f"{name} defaults {signatures[name]}", factory=SYSTEMS[name], seed=seed,
            epochs=epochs, batch_size=batch_size, corpus=str(corpus),
        )
        for d in sets
        for seed in seed_list
        for name in names
    ]
    commit = _git_commit()
    done = run_all(specs, results, workers=workers, log=typer.echo, extra={"commit": commit})
    rows: Dict[str, Dict[str, List[float]]] = {}
    commits = set()
    for spec in specs:
        row = done.get(spec.key())
        if row is None:
            continue
        commits.add(row.get("commit", "unknown"))
        name = spec.system.split(" ")[0]
        rows.setdefault(spec.dataset, {}).setdefault(name, []).append(row["acc"])
    lines = accuracy_table(rows, names)
    header = (
        f"Held-out accuracy (%), mean ± std over seeds {seeds}; {epochs} epochs, batches of {batch_size} "
        f"sentences, factory defaults (signatures {', '.join(f'{k} {v}' for k, v in signatures.items())}); "
        f"code {', '.join(sorted(commits)) or commit}."
    )
    typer.echo("\n" + header + "\n")
    typer.echo("\n".join(lines))
    if output is not None:
        output.parent.mkdir(parents=True, exist_ok=True)
        command = (
            f"python -m projects.paper accuracy --datasets {','.join(sets)} --systems {','.join(names)} "
            f"--seeds {seeds} --epochs {epochs} --batch-size {batch_size}"
        )
        if corpus != Path(DEFAULT_CORPUS):
            command += f" --corpus {corpus}"
        if results != Path(DEFAULT_RESULTS):  # the runs the table reads: a re-run with them recomputes nothing
            command += f" --results {results}"
        output.write_text(header + "\n\nCommand: `" + command + "`\n\n" + "\n".join(lines) + "\n", encoding="utf8")
        typer.echo(f"Wrote {output}")
