"""``python -m projects.paper synth``: synthetic data from the infinite-order HMM of the paper (section 6.2)."""
import time
from pathlib import Path
from typing import Optional

import typer

from . import app


@app.command("synth")
def synth_cli(
    output: Path = typer.Option(..., "--output", "-o", help="Folder for train/dev/test.spacy and settings.json"),
    samples: int = typer.Option(10000, "--samples", "-n", help="Number of sequences (split 80/10/10)"),
    seed: int = typer.Option(0, "--seed", help="Seed of the model's parameters (the noise uses seed+1, the split seed+2)"),
    sample_seed: Optional[int] = typer.Option(None, "--sample-seed", help="Seed of the samples and the split (default: seed+1 / seed+2); the model's parameters stay those of --seed"),
    n_labels: int = typer.Option(5, "--labels", help="Number of labels"),
    n_words: int = typer.Option(1000, "--words", help="Number of word types"),
    max_length: int = typer.Option(10, "--max-length", help="Longest sequence (lengths are uniform in [min, max])"),
    min_length: int = typer.Option(1, "--min-length", help="Shortest sequence"),
    hidden_size: int = typer.Option(50, "--hidden-size", help="LSTM hidden state size"),
    output_size: int = typer.Option(50, "--output-size", help="LSTM output state size (= embedding size)"),
    init_scale: float = typer.Option(4.0, "--init-scale", help="Scale of the random weights"),
    label_beta: float = typer.Option(4.0, "--label-beta", help="Inverse temperature of the label softmax"),
    word_beta: float = typer.Option(4.0, "--word-beta", help="Inverse temperature of the word softmax"),
    word_label_scale: float = typer.Option(1.0, "--word-label-scale", help="Weight of the current label in the word distribution"),
    stats: bool = typer.Option(True, "--stats/--no-stats", help="Print the conditional entropies of the labels"),
):
    """Draw samples from the infinite-order HMM and write them as DocBin files (labels on token.tag_)."""
    from ..synthetic import SynthSettings, format_statistics, generate, statistics, write_corpus

    settings = SynthSettings(
        n_samples=samples,
        seed=seed,
        sample_seed=sample_seed,
        n_labels=n_labels,
        n_words=n_words,
        max_length=max_length,
        min_length=min_length,
        hidden_size=hidden_size,
        output_size=output_size,
        init_scale=init_scale,
        label_beta=label_beta,
        word_beta=word_beta,
        word_label_scale=word_label_scale,
    )
    start = time.perf_counter()
    data = generate(settings)
    gen_s = time.perf_counter() - start
    st = statistics(data) if stats else None
    paths = write_corpus(data, output, st)
    total_s = time.perf_counter() - start
    sizes = {w: int((data.split == i).sum()) for i, w in enumerate(("train", "dev", "test"))}
    typer.echo(
        f"{samples} samples (seed {seed}) generated in {gen_s:.1f}s, written in {total_s:.1f}s in all: "
        + ", ".join(f"{w} {n}" for w, n in sizes.items())
    )
    for name, path in paths.items():
        typer.echo(f"  {name}: {path}")
    if st is not None:
        typer.echo(format_statistics(st))
