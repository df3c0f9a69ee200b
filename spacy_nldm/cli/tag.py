"""``python -m spacy_nldm tag INPUT OUTPUT --model NAME_OR_PATH``: bulk tagging on Ray Data (docs/bulk_tagging.md).

Needs Ray Data: ``pip install "spacy-nldm[ray]"``. Problems with the input, the output or the pipeline stop
the command with ``error: ...`` on stderr and exit status 1; malformed records are reported as
``warning: FILE: line N: problem`` and kept in ``OUTPUT/_errors/``.
"""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from .app import app


@app.command("tag")
def tag(
    input: str = typer.Argument(..., help="A file, a folder (searched recursively for .jsonl, .ndjson, .txt and "
                                          ".parquet files) or a quoted glob of shards, e.g. 'data/*.jsonl'"),
    output: Path = typer.Argument(..., help="Output folder: one output shard per input shard (same relative "
                                            "path), malformed records in OUTPUT/_errors/"),
    model: str = typer.Option(..., "--model", "-m", help="The pipeline: a folder (e.g. training/model-best) or "
                                                         "the name of an installed pipeline package"),
    workers: int = typer.Option(1, "--workers", "-w", help="Actors in the pool; each loads the pipeline once"),
    batch_size: int = typer.Option(1000, "--batch-size", "-b",
                                   help="Documents per chunk: the unit a worker reads and tags in one call"),
    pipe_batch_size: Optional[int] = typer.Option(
        None, "--pipe-batch-size", help="nlp.pipe's batch size inside a worker (default: the pipeline's own)"),
    text_key: str = typer.Option("text", "--text-key",
                                 help="JSONL field / Parquet column holding the text; the others are carried"),
    input_format: str = typer.Option("auto", "--input-format",
                                     help="auto (by suffix: .jsonl/.ndjson, .txt, .parquet), jsonl, text or "
                                          "parquet"),
    out_format: str = typer.Option("parquet", "--format", "-f",
                                   help="parquet (tokens, tags, heads, probs, ents columns) or docbin (.spacy files)"),
    probs: bool = typer.Option(False, "--probs/--no-probs",
                               help="Also output the label marginals (sets store_probs on the taggers and entity components; an entity component's are over its BIO or BILUO tags)"),
    num_gpus: float = typer.Option(0.0, "--num-gpus",
                                   help="GPUs per worker, passed to Ray (e.g. 1, or 0.5 for two workers per GPU); "
                                        "> 0: the workers call spacy.require_gpu()"),
    cpus_per_worker: float = typer.Option(1.0, "--cpus-per-worker",
                                          help="CPUs per worker, passed to Ray (also the worker's torch threads)"),
    address: Optional[str] = typer.Option(None, "--address",
                                          help="Join this Ray cluster ('auto' or HOST:PORT); default: start a "
                                               "local Ray instance"),
    num_cpus: Optional[int] = typer.Option(None, "--num-cpus",
                                           help="CPUs of the local Ray instance (default: all); not with "
                                                "--address"),
    retries: int = typer.Option(2, "--retries", min=0, metavar="N",
                                help="If the run fails (a worker or node lost), run the unfinished shards "
                                     "again this many times"),
) -> None:
    """Tag raw text in bulk with a trained pipeline on Ray Data: one output shard per input shard, written
    atomically; existing output shards are skipped, so a killed run started again does only the rest."""
    from ..bulk import BulkError, tag_corpus

    if address is not None and num_cpus is not None:
        _fail("--num-cpus is for a local Ray instance; a cluster's CPUs are set by `ray start`")
    try:
        summary = tag_corpus(
            input, output, model, workers=workers, batch_size=batch_size, pipe_batch_size=pipe_batch_size,
            text_key=text_key, input_format=input_format, out_format=out_format, probs=probs, num_gpus=num_gpus,
            cpus_per_worker=cpus_per_worker, address=address, num_cpus=num_cpus, retries=retries,
            log=typer.echo, warn=lambda text: typer.secho(text, fg=typer.colors.YELLOW, err=True))
    except BulkError as err:
        _fail(str(err))
    lines = summary.lines()
    for line in lines[:-1]:
        typer.echo(line)
    typer.secho(lines[-1], fg=typer.colors.GREEN)


def _fail(message: str) -> None:
    typer.secho(f"error: {message}", fg=typer.colors.RED, err=True)
    raise typer.Exit(code=1)
