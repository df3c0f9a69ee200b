"""The NLDM loss's time with label smoothing's two tree targets (``tree_smoothing``), one torch thread.

    python -m projects.paper.scripts.smoothing_loss_time [--sentences 40] [--labels 17] [--repeats 30]

One batch of random factored scores (sentences of 5-39 tokens, ``max_dist = 3``, a distance bias, every
token labelled): the median time of the loss's forward and backward pass without smoothing, with
``label_smoothing``'s uniform trees and with the model's own trees, and the ratio of the last two, all
measured in one run, interleaved.
"""
import statistics
import time

import torch
import typer

from spacy_nldm.models.structure import LatentTree


def main(
    sentences: int = typer.Option(40, help="Sentences in the batch."),
    labels: int = typer.Option(17, help="Labels (M)."),
    repeats: int = typer.Option(30, help="Timed repeats of each loss."),
    smoothing: float = typer.Option(0.05, help="The mixture weight b of the uniform target."),
) -> None:
    torch.set_num_threads(1)
    g = torch.Generator().manual_seed(0)
    lengths = torch.randint(5, 40, (sentences,), generator=g)
    scores = torch.randn(sentences, int(lengths.max()), 2, labels + 1, labels, generator=g)
    bias = torch.randn(2, 3, generator=g).requires_grad_()
    gold = torch.nn.functional.one_hot(torch.randint(0, labels, scores.shape[:2], generator=g), labels).bool()

    def seconds(trees: str, b: float) -> float:
        F = scores.clone().requires_grad_()
        start = time.perf_counter()
        LatentTree(max_dist=3, distance_bias=bias, tree_smoothing=trees).nll(F, lengths, gold, smoothing=b).backward()
        return time.perf_counter() - start

    uniform, model = "uniform trees", "the model's trees"
    runs = {"no smoothing": ("uniform", 0.0), uniform: ("uniform", smoothing), model: ("model", smoothing)}
    for trees, b in runs.values():  # warm-up (the compiled lane's first call)
        seconds(trees, b)
    times = {name: [] for name in runs}
    for _ in range(repeats):
        for name, (trees, b) in runs.items():
            times[name].append(seconds(trees, b))
    median = {name: statistics.median(values) for name, values in times.items()}
    for name, value in median.items():
        typer.echo(f"{name}: {value * 1000:.1f} ms")
    typer.echo(f"{model} / {uniform}: {median[model] / median[uniform]:.2f}")


if __name__ == "__main__":
    typer.run(main)
