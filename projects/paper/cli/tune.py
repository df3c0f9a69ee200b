"""``python -m projects.paper tune`` / ``tune-table``: Optuna search over ``spacy train`` runs, on dev only.

    python -m projects.paper tune --datasets twitter --systems softmax,crf1,crf2,nldm --trials 20 --steps 320

One resumable SQLite study per (dataset, system) in ``--study-dir`` (rerun the same command to go on; finished
trials are kept, an interrupted one is run again; ``--share best`` also runs each other system's best trial once:
:mod:`projects.paper.tuning.sharing`); the best config of each study goes to
``--tuned-dir/<dataset>-<system>.cfg`` and the table of all studies to ``--table``. Needs ``pip install -e
".[tune]"`` (optuna).
"""
from __future__ import annotations

import shlex
import signal
import sys
from pathlib import Path
from typing import List, Optional

import typer

from ..registry import LANGS, SYSTEMS, canonical
from . import app

# spaCy language of each dataset (any other name, e.g. a corpus folder: --lang, default "en")
DATASET_LANGS = {**LANGS, "tweebank_v2": "en"}


def corpus_dir(corpus: Path, dataset: str) -> Path:
    """Where ``spacy project run corpora`` (and ``ud-corpora projects/paper``) puts a dataset: corpus/twitter, corpus/tweebank_v2, corpus/ud/<key>."""
    if dataset in ("twitter", "tweebank_v1", "tweebank_v2") or (corpus / dataset).is_dir():
        return corpus / dataset
    return corpus / "ud" / dataset


def _split(text: str, allowed: Optional[List[str]] = None, what: str = "item") -> List[str]:
    items = [t.strip() for t in text.split(",") if t.strip()]
    if not items:
        raise typer.BadParameter(f"no {what} given")
    if allowed is not None:
        bad = [t for t in items if t not in allowed]
        if bad:
            raise typer.BadParameter(f"unknown {what}: {', '.join(bad)} (choose from {', '.join(allowed)})")
    return items


def make_pruner(name: str, startup: int, warmup_evals: int, eval_frequency: int, within: str = ""):
    """``median`` (Optuna's MedianPruner: stop a trial whose dev score at a step is below the median of earlier
    trials at that step, after ``startup`` trials and from the ``warmup_evals``-th evaluation on; with ``within``
    a parameter's name, the median of the trials with the same value of it) or ``none``."""
    import optuna

    if name == "none":
        return optuna.pruners.NopPruner(), "none"
    warmup = warmup_evals * eval_frequency
    if name == "median" and within:
        from ..tuning.pruning import MedianPrunerWithin

        return (MedianPrunerWithin(within, n_startup_trials=startup, n_warmup_steps=warmup),
                f"median within {within} (projects/paper/tuning/pruning.py: a trial stops when its dev score is below "
                f"the median, at the same step, of the completed trials with its {within}; not before that "
                f"{within} has {startup} completed trials, not before step {warmup})")
    if name == "median":
        return (optuna.pruners.MedianPruner(n_startup_trials=startup, n_warmup_steps=warmup),
                f"Optuna MedianPruner (a trial stops when its dev score is below the median of earlier trials at "
                f"the same step; not in a study's first {startup} trials, not before step {warmup})")
    raise typer.BadParameter(f"--pruner must be median or none, not {name!r}")


@app.command("tune")
def tune_cli(
    datasets: str = typer.Option("twitter", "--datasets", help="Comma-separated datasets (corpus/<dataset> or corpus/ud/<dataset>)"),
    systems: str = typer.Option(",".join(SYSTEMS), "--systems", help="Comma-separated systems: configs/<system>.cfg"),
    trials: int = typer.Option(20, "--trials", "-n", help="Finished trials per study (the same for every system)"),
    steps: int = typer.Option(320, "--steps", help="Training steps per trial (batches of ~500 words)"),
    eval_frequency: int = typer.Option(40, "--eval-frequency", help="Dev evaluation (and pruning check) every N steps"),
    space_path: Path = typer.Option(Path("projects/paper/configs/tuned/space.yml"), "--space", help="Search space (YAML)"),
    configs: Path = typer.Option(Path("configs"), "--configs", help="Folder of the systems' configs"),
    corpus: Path = typer.Option(Path("corpus"), "--corpus", help="Folder of the converted corpora"),
    train: Optional[Path] = typer.Option(None, "--train", help="Train DocBin (one dataset only; default from --corpus)"),
    dev: Optional[Path] = typer.Option(None, "--dev", help="Dev DocBin (one dataset only; default from --corpus)"),
    lang: Optional[str] = typer.Option(None, "--lang", help="spaCy language (default: the dataset's, else en)"),
    study_dir: Path = typer.Option(Path("training/tune"), "--study-dir", help="SQLite studies and trial logs"),
    tuned_dir: Path = typer.Option(Path("projects/paper/configs/tuned"), "--tuned-dir", help="Best configs: <dataset>-<system>.cfg"),
    table: Optional[Path] = typer.Option(Path("projects/paper/results/tuning.md"), "--table", help="Markdown table of all studies in --study-dir"),
    seed: int = typer.Option(0, "--seed", help="Training seed of every trial (and the sampler's seed)"),
    threads: int = typer.Option(1, "--threads", help="Torch/BLAS threads per training process"),
    gpu_id: int = typer.Option(-1, "--gpu-id", help="GPU id for spacy train (-1: CPU)"),
    pruner: str = typer.Option("median", "--pruner", help="median or none"),
    prune_within: str = typer.Option("", "--prune-within", help="With --pruner median: compare a trial only with the trials that took the same value of this parameter (e.g. optimizer)"),
    prune_startup: int = typer.Option(5, "--prune-startup", help="Trials per study before pruning starts"),
    prune_warmup: int = typer.Option(2, "--prune-warmup", help="No pruning before step N x eval_frequency"),
    max_failures: int = typer.Option(3, "--max-failures", help="Stop a study after this many failed trials in a run"),
    rejudge_pruned: bool = typer.Option(False, "--rejudge-pruned/--no-rejudge-pruned", help="Queue again (on top of --trials) each pruned trial that this run's pruner would have let go on, e.g. after switching to --prune-within"),
    share: str = typer.Option("none", "--share", help="none, or best: also run, once, the best trial of every other system's study of the dataset in --study-dir (as it stands when this command starts), on top of --trials"),
):
    """Search hyper-parameters on dev, one resumable Optuna study per (dataset, system)."""
    try:
        from ..tuning.space import SpaceError, load_space
        from ..tuning.pruning import rejudge_pruned as rejudge
        from ..tuning.sharing import best_trials, share_best
        from ..tuning.study import StudySpec, TuneError, open_study, run_study, write_best_config
        from ..tuning.report import write_report
    except ImportError as err:  # optuna missing
        typer.echo(f"error: {err}; install the tuning extra: pip install -e '.[tune]'", err=True)
        raise typer.Exit(1)
    keys = [canonical(key) for key in _split(datasets, what="dataset")]
    names = _split(systems, SYSTEMS, "system")
    if (train or dev) and len(keys) != 1:
        raise typer.BadParameter("--train/--dev need exactly one dataset in --datasets")
    if share not in ("none", "best"):
        raise typer.BadParameter(f"--share must be none or best, not {share!r}")
    if trials < 1:
        raise typer.BadParameter("--trials must be >= 1")
    command = "python -m projects.paper " + shlex.join(sys.argv[1:])
    signal.signal(signal.SIGTERM, _interrupt)  # a killed tuner ends its trial and queues it again
    try:
        space = load_space(space_path)
        if prune_within and prune_within not in [p.name for p in space.params]:
            raise typer.BadParameter(f"--prune-within: {space_path} has no parameter {prune_within!r}")
        # Optuna's pruners keep no per-study state: one serves every study of this run
        study_pruner, pruner_text = make_pruner(pruner, prune_startup, prune_warmup, eval_frequency, prune_within)
        for key in keys:
            data = corpus_dir(corpus, key)
            specs = [StudySpec(dataset=key, system=system, config=configs / f"{system}.cfg",
                               train=train or data / "train.spacy", dev=dev or data / "dev.spacy",
                               lang=lang or DATASET_LANGS.get(key, "en"), steps=steps,
                               eval_frequency=eval_frequency, seed=seed, threads=threads, gpu_id=gpu_id,
                               study_dir=study_dir) for system in names]
            if share == "best" or rejudge_pruned:
                # every study gets the peers' best trials as they stand now, before any of this run's trials
                peers = best_trials(study_dir, key, SYSTEMS) if share == "best" else {}
                for spec in specs:
                    study, config, component = open_study(spec, space)
                    if peers:
                        share_best(study, space, spec.system, config, component, peers, echo=lambda m: typer.echo(m))
                    if rejudge_pruned:
                        rejudge(study, study_pruner, echo=lambda m: typer.echo(m))
            for spec in specs:
                study = run_study(spec, space, trials, pruner=study_pruner, max_failures=max_failures,
                                  echo=lambda m: typer.echo(m))
                out = write_best_config(study, spec, tuned_dir / f"{spec.name}.cfg", command)
                typer.echo(f"[tune {spec.name}] best config: {out}" if out else
                           f"[tune {spec.name}] no complete trial: no config written")
        if table is not None:
            write_report(study_dir, table, space, command, pruner_text)
            typer.echo(f"table: {table}")
    except (SpaceError, TuneError) as err:
        typer.echo(f"error: {err}", err=True)
        raise typer.Exit(1)
    except KeyboardInterrupt:
        typer.echo("interrupted: run the same command again to resume", err=True)
        raise typer.Exit(130)


def _interrupt(signum, frame):
    raise KeyboardInterrupt


@app.command("tune-table")
def tune_table_cli(
    study_dir: Path = typer.Option(Path("training/tune"), "--study-dir", help="Folder of the SQLite studies"),
    output: Path = typer.Option(Path("projects/paper/results/tuning.md"), "--output", "-o", help="Markdown file"),
    space_path: Optional[Path] = typer.Option(Path("projects/paper/configs/tuned/space.yml"), "--space", help="Search space to describe"),
):
    """Write the Markdown table of every study in --study-dir (no training)."""
    from ..tuning.report import write_report
    from ..tuning.space import SpaceError, load_space

    try:
        space = load_space(space_path) if space_path is not None else None
    except SpaceError as err:
        typer.echo(f"error: {err}", err=True)
        raise typer.Exit(1)
    typer.echo(write_report(study_dir, output, space))
