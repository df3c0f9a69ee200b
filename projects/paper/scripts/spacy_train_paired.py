"""Is one system ahead of another in ``python -m projects.paper spacy-train`` beyond the seeds' noise? A paired test over (dataset, seed).

    python -m projects.paper.scripts.spacy_train_paired --a nldm_tagger --b crf_tagger --seeds 0,1,2,3
    python -m projects.paper.scripts.spacy_train_paired --a nldm_tagger --b crf_tagger --seeds 0,1,2 \\
        --a-set 'components.{c}.model.max_dist=1'

A run of system A and a run of system B with the same dataset and seed form a pair: the same seed starts both
trainings (the batch order, the shared encoder's initial weights). The script reads the runs of
``projects/paper/results/spacy_train/runs.jsonl`` whose configs are what ``python -m projects.paper spacy-train`` generates with the given
``--set`` overrides (``--a-set`` / ``--b-set``, ``;``-separated, as the bench's ``--set``), and prints, per
dataset, the mean and spread of A − B over the seeds; then the eight-dataset average of those means, and a
sign-flip permutation test of it: each pair's difference keeps or flips its sign at random (A and B exchanged
within the pair), and p is the share of 20,000 such draws whose average is at least as far from 0 as the one
measured (two-sided). ``--leave-out`` repeats the test without the named datasets. Pairs with a run missing are
left out and counted. Nothing is trained.
"""
import random
import statistics
import sys
from pathlib import Path
from typing import Dict, List, Sequence, Tuple

import typer

if not __package__:  # run by path: the repository root on sys.path (for spacy_nldm and projects.paper)
    sys.path[0] = str(Path(__file__).resolve().parents[3])

from projects.paper.cli.spacy_train import choose  # noqa: E402
from projects.paper.runs.spacy_train import (  # noqa: E402
    ALL_DATASETS, DATASETS, DEFAULT_RESULTS, apply_overrides, generate_config, labels_with_bang, load_rows, run_key,
)

Pairs = Dict[Tuple[str, int], float]


def paired_differences(a: str, b: str, a_set: List[str], b_set: List[str], setting: str, seeds: List[int],
                       corpus: Path, results: Path, datasets: Sequence[str] = tuple(DATASETS)) -> Tuple[Pairs, int]:
    """{(dataset, seed): test accuracy of A − B} over the pairs with both runs, and the number of pairs missing."""
    done = load_rows(results)
    pairs, missing = {}, 0
    for dataset in datasets:
        folder, lang = ALL_DATASETS[dataset]
        bang = labels_with_bang(corpus / folder / "train.spacy")
        texts = [apply_overrides(generate_config(system, setting, lang, labels_with_bang=bang), sets, system).to_str()
                 for system, sets in ((a, a_set), (b, b_set))]
        for seed in seeds:
            runs = [done.get(run_key(dataset, text, seed)) for text in texts]
            if all(runs):
                pairs[dataset, seed] = runs[0]["test_tag_acc"] - runs[1]["test_tag_acc"]
            else:
                missing += 1
    return pairs, missing


def dataset_average(pairs: Pairs, signs: Dict[Tuple[str, int], int] = None) -> float:
    """The average over datasets of each dataset's mean difference (each dataset weighs the same)."""
    by_dataset: Dict[str, List[float]] = {}
    for (dataset, seed), value in pairs.items():
        by_dataset.setdefault(dataset, []).append(value * (signs[dataset, seed] if signs else 1))
    return statistics.mean(statistics.mean(values) for values in by_dataset.values())


def sign_flip_p(pairs: Pairs, draws: int = 20000, seed: int = 0) -> float:
    """Two-sided p-value of :func:`dataset_average` under random sign flips of the pairs."""
    observed = abs(dataset_average(pairs))
    rng = random.Random(seed)
    keys = list(pairs)
    hits = sum(abs(dataset_average(pairs, {k: rng.choice((1, -1)) for k in keys})) >= observed - 1e-12
               for _ in range(draws))
    return hits / draws


def report(pairs: Pairs, label: str) -> None:
    average = dataset_average(pairs)
    typer.echo(f"| {label} | {average:+.3f} | {len(pairs)} | {sign_flip_p(pairs):.3f} |")


def main(
    a: str = typer.Option("nldm_tagger", help="System A: tagger, crf_tagger or nldm_tagger."),
    b: str = typer.Option("crf_tagger", help="System B."),
    a_set: str = typer.Option("", help="A's config overrides, ';'-separated, as spacy-train's --set."),
    b_set: str = typer.Option("", help="B's config overrides."),
    setting: str = typer.Option("own", help="Encoder setting: own or shared."),
    seeds: str = typer.Option("0,1,2", help="Seeds, comma-separated."),
    datasets: str = typer.Option(",".join(DATASETS), help=f"Comma-separated, from {', '.join(ALL_DATASETS)}."),
    leave_out: str = typer.Option("te", help="Datasets to leave out in a second test, comma-separated ('' none)."),
    corpus: Path = typer.Option(Path("corpus"), help="Converted corpora (`spacy project run corpora`, then `spacy project run ud-corpora projects/paper`)."),
    results: Path = typer.Option(DEFAULT_RESULTS, help="spacy-train's runs file."),
) -> None:
    split = lambda text, sep: [part.strip() for part in text.split(sep) if part.strip()]  # noqa: E731
    names = choose(datasets, ALL_DATASETS, "dataset")
    pairs, missing = paired_differences(a, b, split(a_set, ";"), split(b_set, ";"), setting,
                                        [int(s) for s in split(seeds, ",")], corpus, results, names)
    if not pairs:
        raise typer.BadParameter(f"no pair has both runs in {results} ({missing} missing): run spacy-train")
    typer.echo(f"A = {a} {a_set or '(defaults)'}; B = {b} {b_set or '(defaults)'}; setting {setting}, seeds {seeds}"
               f"; {len(pairs)} pairs, {missing} missing\n")
    typer.echo("| dataset | A − B, mean | sd over seeds | pairs |\n|---|---|---|---|")
    for dataset in names:
        values = [v for (d, _), v in pairs.items() if d == dataset]
        if values:
            spread = statistics.stdev(values) if len(values) > 1 else 0.0
            typer.echo(f"| {dataset} | {statistics.mean(values):+.3f} | {spread:.3f} | {len(values)} |")
    typer.echo("\n| datasets | average of A − B | pairs | sign-flip p |\n|---|---|---|---|")
    report(pairs, "all")
    dropped = set(split(leave_out, ","))
    rest = {k: v for k, v in pairs.items() if k[0] not in dropped}
    if dropped and rest and len(rest) < len(pairs):
        report(rest, f"without {', '.join(sorted(dropped))}")


if __name__ == "__main__":
    typer.run(main)
