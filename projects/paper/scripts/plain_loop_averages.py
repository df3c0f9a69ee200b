"""The components' ``average_params`` in the plain loop of ``python -m projects.paper accuracy``.

    python -m projects.paper.scripts.plain_loop_averages [--datasets tw,tb2] [--seeds 0]

The loop's optimizer is ``nlp.initialize``'s (spaCy's default config: ``use_averages = false``), so a
component with ``average_params = true`` (the default) averages its own weights there. Each structured
component is trained with the setting off and on, the rest at its factory defaults; runs are kept in
``projects/paper/results/accuracy/average_params.jsonl`` and never re-run.
"""
from pathlib import Path

import typer

from projects.paper.cli.accuracy import default_signature
from projects.paper.registry import STUDY_RESULTS
from projects.paper.runs.loop import RunSpec, run_all

ROOT = Path(__file__).resolve().parents[3]


def main(
    datasets: str = typer.Option("tw,tb2", help="Datasets (see projects.paper.runs.loop.DATASETS)."),
    seeds: str = typer.Option("0", help="Seeds, comma-separated."),
    corpus: str = typer.Option("corpus", help="Converted corpora folder."),
    results: Path = typer.Option(ROOT / STUDY_RESULTS / "accuracy" / "average_params.jsonl", help="Runs file."),
    workers: int = typer.Option(1, help="Runs at a time."),
) -> None:
    specs = []
    for d in datasets.split(","):
        for seed in (int(s) for s in seeds.split(",")):
            for factory in ("crf_tagger", "nldm_tagger"):
                signature = default_signature(factory)
                for average in (False, True):
                    specs.append(RunSpec(dataset=d, system=f"{factory} average_params={average} {signature}",
                                         factory=factory, seed=seed, corpus=corpus,
                                         config={"average_params": average}))
    done = run_all(specs, results, workers=workers, log=typer.echo)
    typer.echo("\n| dataset | seed | component | average_params = false | true | change |\n|---|---|---|---|---|---|")
    for off, on in zip(specs[::2], specs[1::2]):
        a, b = done.get(off.key()), done.get(on.key())
        if a and b:
            typer.echo(f"| {off.dataset} | {off.seed} | {off.factory} | {a['acc']:.2f} | {b['acc']:.2f} | "
                       f"{b['acc'] - a['acc']:+.2f} |")


if __name__ == "__main__":
    typer.run(main)
