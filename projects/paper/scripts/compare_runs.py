"""Two sets of Table 2 records side by side: per dataset and system, the mean test (and dev) accuracy of each
over the seeds both have, and the change; then the average change per system over the datasets both have, and
for pairs of systems the difference of their test changes (mean over the datasets with both, its standard error
from the spread over datasets: whether one system gained more than another beyond the datasets' noise).

    python -m projects.paper.scripts.compare_runs --base projects/paper/results/runs.jsonl --variant projects/paper/results/diagnosis/table2_wd/runs.jsonl

Runs are the rows (keys ``<dataset>/<system>-seed<k>``) of the runs files that ``projects/paper/scripts/reproduce.py`` writes
(``--results``); a (dataset, system) pair without a common seed is left blank. Prints a Markdown table.
"""
import argparse
import statistics
from collections import defaultdict
import sys
from pathlib import Path
from typing import Dict, Tuple

if not __package__:  # run by path: the repository root on sys.path (for projects.paper.*), not this folder
    sys.path[0] = str(Path(__file__).resolve().parents[3])

from projects.paper.runs.records import RunsFile
from projects.paper.registry import DATASETS, SYSTEMS

Scores = Dict[Tuple[str, str], Dict[int, Tuple[float, float]]]
#: (system, other): "did system gain more than other?"
PAIRS = [("nldm", "crf1"), ("nldm", "crf2"), ("nldm", "softmax"), ("crf1", "softmax"), ("crf2", "softmax")]


def load(runs: Path) -> Scores:
    """(dataset, system) -> {seed: (test accuracy, dev accuracy)}."""
    scores: Scores = defaultdict(dict)
    for _, record in sorted(RunsFile(runs).rows().items()):
        scores[record["dataset"], record["system"]][record["seed"]] = (record["test_acc"], record["dev_acc"])
    return scores


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", type=Path, default=Path("projects/paper/results/runs.jsonl"))
    parser.add_argument("--variant", type=Path, required=True)
    args = parser.parse_args()
    for path in (args.base, args.variant):
        if not path.is_file():
            parser.error(f"{path} is not a runs file")
    base, variant = load(args.base), load(args.variant)
    print("| dataset | " + " | ".join(f"{s}: base → variant (test change; dev change)" for s in SYSTEMS) + " |")
    print("|---|" + "---|" * len(SYSTEMS))
    changes: Dict[Tuple[str, str], Tuple[float, float]] = {}  # (dataset, system) -> (test change, dev change)
    for dataset in DATASETS:
        cells = []
        for system in SYSTEMS:
            seeds = sorted(set(base.get((dataset, system), {})) & set(variant.get((dataset, system), {})))
            if not seeds:
                cells.append("")
                continue
            b_test, b_dev = (statistics.mean(base[dataset, system][k][i] for k in seeds) for i in (0, 1))
            v_test, v_dev = (statistics.mean(variant[dataset, system][k][i] for k in seeds) for i in (0, 1))
            changes[dataset, system] = (v_test - b_test, v_dev - b_dev)
            note = f", seeds {','.join(map(str, seeds))}"
            cells.append(f"{b_test:.2f} → {v_test:.2f} ({v_test - b_test:+.2f}; dev {v_dev - b_dev:+.2f}{note})")
        if any(cells):
            print(f"| {dataset} | " + " | ".join(cells) + " |")
    cells = []
    for system in SYSTEMS:
        rows = [change for (_, s), change in changes.items() if s == system]
        cells.append(f"test {statistics.mean(r[0] for r in rows):+.2f}; dev {statistics.mean(r[1] for r in rows):+.2f} "
                     f"({len(rows)} datasets)" if rows else "")
    print("| **mean change** | " + " | ".join(cells) + " |")
    print_pairs(changes)


def print_pairs(changes: Dict[Tuple[str, str], Tuple[float, float]]) -> None:
    """Per pair of systems: test change of the first minus the second, per dataset, mean and standard error."""
    lines = []
    for system, other in PAIRS:
        diffs = [(d, changes[d, system][0] - changes[d, other][0]) for d in DATASETS
                 if (d, system) in changes and (d, other) in changes]
        if len(diffs) < 2:
            continue
        values = [v for _, v in diffs]
        se = statistics.stdev(values) / len(values) ** 0.5
        per_dataset = ", ".join(f"{d} {v:+.2f}" for d, v in diffs)
        lines.append(f"| {system} − {other} | {statistics.mean(values):+.2f} ± {se:.2f} | {len(values)} | {per_dataset} |")
    if lines:
        print()
        print("| test change of a − change of b | mean ± standard error | datasets | per dataset |")
        print("|---|---|---|---|")
        print("\n".join(lines))


if __name__ == "__main__":
    main()
