"""projects/paper/results/table2.md: measured Table 2 (mean over seeds) beside the paper's, with NLDM's gain per baseline.

    python -m projects.paper.scripts.table2 [--runs projects/paper/results/runs.jsonl] [--output projects/paper/results/table2.md] --mirror ../shared/data
"""
from __future__ import annotations

import argparse
import json
import statistics
from collections import defaultdict
import sys
from pathlib import Path

import numpy

if not __package__:  # run by path: the repository root on sys.path (for projects.paper.*), not this folder
    sys.path[0] = str(Path(__file__).resolve().parents[3])

from projects.paper.registry import DATASETS, PAPER_AVG, PAPER_TABLE2, SYSTEM_NAMES, SYSTEMS, has_train
from projects.paper.runs.records import RunsFile
from projects.paper.scripts.paired_bootstrap import paired_bootstrap

#: bootstrap resamples of the test sentences for the paired significance
SAMPLES = 10_000


def fmt(values):
    if not values:
        return "–"
    m = statistics.mean(values)
    if len(values) > 1:
        return f"{m:.2f} ± {statistics.stdev(values):.2f}"
    return f"{m:.2f}"


def per_sentence(records: list) -> "tuple | None":
    """(correct tokens averaged over the seeds, tokens) per test sentence, from records that all hold the
    counts (``reproduce.py`` stores them); None if any lacks them."""
    if not records or any("test_correct" not in r for r in records):
        return None
    return (numpy.mean([r["test_correct"] for r in records], axis=0),
            numpy.asarray(records[0]["test_tokens"], dtype=float))


def significance_lines(records: dict) -> list:
    """The paired test of NLDM against each baseline per dataset: NLDM − baseline over the seeds both have,
    its 95% interval and the bootstrap p-value (the share of resamples of the test sentences in which the
    difference does not keep its sign)."""
    header = [
        "## Paired significance: NLDM against each baseline",
        "",
        f"Per test sentence, each system's correct tokens averaged over the seeds both systems ran with per-sentence "
        f"counts stored (the number in brackets; the table above averages all seeds); the difference "
        f"of the token accuracies resampled over sentences ({SAMPLES:,} paired bootstrap resamples, seed 0). Cell: "
        "NLDM − baseline [95% interval], p = share of resamples in which the difference does not keep its sign. "
        "– : no seed with counts for both (records made before `reproduce.py` stored them; `reproduce.py "
        "--significance` redoes them).",
        "",
        "| Data | " + " | ".join(f"NLDM − {SYSTEM_NAMES[s]}" for s in SYSTEMS[:3]) + " |",
        "|---|---|---|---|",
    ]
    rows = []
    for key, d in DATASETS.items():
        cells = []
        for s in SYSTEMS[:3]:
            ours_by_seed, theirs_by_seed = records.get((key, "nldm"), {}), records.get((key, s), {})
            seeds = sorted(k for k in set(ours_by_seed) & set(theirs_by_seed)  # both with per-sentence counts
                           if "test_correct" in ours_by_seed[k] and "test_correct" in theirs_by_seed[k])
            ours = per_sentence([records[key, "nldm"][k] for k in seeds])
            theirs = per_sentence([records[key, s][k] for k in seeds])
            if ours is None or theirs is None:
                cells.append("–")
                continue
            diff, low, high, flipped = paired_bootstrap(ours[0], theirs[0], ours[1], SAMPLES, seed=0)
            cells.append(f"{diff:+.2f} [{low:+.2f}, {high:+.2f}] p = {flipped:.3f} ({len(seeds)} seed{'s' if len(seeds) > 1 else ''})")
        if any(c != "–" for c in cells):
            rows.append(f"| {d['paper']} ({key}) | " + " | ".join(cells) + " |")
    return header + (rows or ["| (no dataset has per-sentence counts for NLDM and a baseline) | | | |"])


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--runs", type=Path, default=Path("projects/paper/results/runs.jsonl"), help="the runs file")
    p.add_argument("--output", type=Path, default=Path("projects/paper/results/table2.md"))
    p.add_argument("--mirror", type=Path, required=True, help="the data folder (project.yml: vars.mirror)")
    args = p.parse_args()
    acc = defaultdict(list)  # (dataset, system) -> [test acc]
    secs = defaultdict(list)
    cpus = defaultdict(list)
    budgets = set()
    records = defaultdict(dict)  # (dataset, system) -> {seed: record}
    for _, r in sorted(RunsFile(args.runs).rows().items()):
        records[r["dataset"], r["system"]][r["seed"]] = r
        acc[r["dataset"], r["system"]].append(r["test_acc"])
        secs[r["dataset"], r["system"]].append(r["train_seconds"])
        if "train_cpu_seconds" in r:
            cpus[r["dataset"], r["system"]].append(r["train_cpu_seconds"])
        budgets.add(json.dumps(r.get("budget", {}), sort_keys=True))

    lines = [
        "# Table 2: POS tagging accuracy (%), measured here vs. the paper",
        "",
        "Each cell: **measured** test token accuracy (mean ± sd over seeds; `spacy evaluate --gold-preproc`) / "
        "paper. Gains are NLDM minus the baseline, measured (paper in brackets). "
        "Generated by `python -m projects.paper.scripts.table2` from `projects/paper/results/runs.jsonl` "
        "(one row per dataset × system × seed, written by `projects/paper/scripts/reproduce.py`). Times are minutes per run; "
        "the CPU time (one thread) is what the run takes alone, the wall time depends on what else ran.",
        "",
        "| Data | Softmax | 1-order CRF | 2-order CRF | NLDM | NLDM − Softmax | NLDM − CRF1 | NLDM − CRF2 | seeds | train min / run, wall (CPU) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    means = defaultdict(dict)
    for key, d in DATASETS.items():
        cells = []
        for s in SYSTEMS:
            v = acc.get((key, s), [])
            paper = PAPER_TABLE2[s][key]
            cells.append(f"**{fmt(v)}** / {paper:.2f}" if v else f"– / {paper:.2f}")
            if v:
                means[key][s] = statistics.mean(v)
        gains = []
        for s in SYSTEMS[:3]:
            paper_gain = PAPER_TABLE2["nldm"][key] - PAPER_TABLE2[s][key]
            if "nldm" in means[key] and s in means[key]:
                gains.append(f"{means[key]['nldm'] - means[key][s]:+.2f} ({paper_gain:+.2f})")
            else:
                gains.append(f"– ({paper_gain:+.2f})")
        n_seeds = sorted({len(acc.get((key, s), [])) for s in SYSTEMS if acc.get((key, s))})
        times = [t for s in SYSTEMS for t in secs.get((key, s), [])]
        time_cell = "; ".join(
            f"{s} {statistics.mean(secs[key, s]) / 60:.1f}"
            + (f" ({statistics.mean(cpus[key, s]) / 60:.1f})" if cpus.get((key, s)) else "")
            for s in SYSTEMS if secs.get((key, s))
        )
        label = f"{d['paper']} ({key})"
        if not has_train(args.mirror, key):
            label += " — no train file in the mirror, not run"
        elif not times:
            label += " — not run yet"
        lines.append(
            f"| {label} | " + " | ".join(cells) + " | " + " | ".join(gains)
            + f" | {','.join(map(str, n_seeds)) or '–'} | {time_cell or '–'} |"
        )
    full = [k for k in DATASETS if all(s in means[k] for s in SYSTEMS)]
    if full:
        avg = {s: statistics.mean(means[k][s] for k in full) for s in SYSTEMS}
        paper_avg = {s: statistics.mean(PAPER_TABLE2[s][k] for k in full) for s in SYSTEMS}
        lines.append(
            f"| Avg. over the {len(full)} rows run ({', '.join(DATASETS[k]['paper'] for k in full)}) | "
            + " | ".join(f"**{avg[s]:.2f}** / {paper_avg[s]:.2f}" for s in SYSTEMS) + " | "
            + " | ".join(f"{avg['nldm'] - avg[s]:+.2f} ({paper_avg['nldm'] - paper_avg[s]:+.2f})" for s in SYSTEMS[:3])
            + " | | |"
        )
    lines += [
        "",
        f"Paper averages over its nine columns: " + ", ".join(f"{SYSTEM_NAMES[s]} {PAPER_AVG[s]:.2f}" for s in SYSTEMS) + ".",
        "",
        "Budgets used (spaCy `[training]` overrides): " + "; ".join(f"`{b}`" for b in sorted(budgets)) if budgets else "No runs yet.",
        "",
        *significance_lines(records),
        "",
    ]
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
