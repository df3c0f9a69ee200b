"""How far each system's dev accuracy still climbs at the end of `python -m projects.paper spacy-train`'s runs.

    python -m projects.paper.scripts.spacy_train_curves [--results projects/paper/results/spacy_train/runs.jsonl] \
        [--workdir training/spacy_train] [--setting own] [--corpus corpus]

For every finished run of today's defaults (the configs ``python -m projects.paper spacy-train`` generates now, in the given
setting) whose ``train.log`` is still in the workdir, the dev accuracy column of spaCy's training log is read per evaluation. Printed per system: runs, the mean dev
gain from step 1,000 to the last evaluation and from step 400, and how many runs have their best dev
score at the last evaluation (a run still improving when the step budget ends).
"""
import argparse
import json
from collections import defaultdict
from pathlib import Path
from typing import Dict, List, Tuple

from projects.paper.runs.queue import logged_steps
from projects.paper.runs.spacy_train import run_key


def dev_curve(log: Path, system: str) -> List[Tuple[int, float]]:
    """(step, dev accuracy %) per evaluation of a ``spacy train`` console log. The tagger's rows end in
    TAG_ACC POS_ACC SCORE, the structured components' in TAG_ACC SCORE."""
    column = -3 if system == "tagger" else -2
    return [(int(fields[1]), float(fields[column])) for fields in logged_steps(log) if len(fields) >= 4]


def gain_since(curve: List[Tuple[int, float]], step: int) -> float:
    """Dev accuracy at the last evaluation minus at the first evaluation at or after ``step``."""
    start = next(acc for s, acc in curve if s >= step)
    return curve[-1][1] - start


def current_keys(corpus: Path, setting: str) -> set:
    """The run keys (any seed up to 9) of the configs spacy-train generates today, per dataset and system."""
    from projects.paper.runs.spacy_train import DATASETS, SYSTEMS, generate_config, labels_with_bang

    keys = set()
    for dataset, (folder, lang) in DATASETS.items():
        train = corpus / folder / "train.spacy"
        if not train.exists():
            continue
        bang = labels_with_bang(train)
        for system in SYSTEMS:
            text = generate_config(system, setting, lang, labels_with_bang=bang).to_str()
            keys.update(run_key(dataset, text, seed) for seed in range(10))
    return keys


def summarise(rows: List[dict], workdir: Path) -> Dict[str, dict]:
    found: Dict[str, List[List[Tuple[int, float]]]] = defaultdict(list)
    for row in rows:
        log = workdir / run_key(row["dataset"], row["config"], row["seed"]).replace("/", "-") / "train.log"
        if log.exists():
            curve = dev_curve(log, row["system"])
            if curve and curve[-1][0] >= 1000:
                found[row["system"]].append(curve)
    out = {}
    for system, curves in sorted(found.items()):
        out[system] = {
            "runs": len(curves),
            "gain_from_1000": sum(gain_since(c, 1000) for c in curves) / len(curves),
            "gain_from_400": sum(gain_since(c, 400) for c in curves) / len(curves),
            "best_at_last": sum(max(a for _, a in c) == c[-1][1] for c in curves),
        }
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", type=Path, default=Path("projects/paper/results/spacy_train/runs.jsonl"))
    parser.add_argument("--workdir", type=Path, default=Path("training/spacy_train"))
    parser.add_argument("--setting", default="own", choices=["own", "shared"])
    parser.add_argument("--corpus", type=Path, default=Path("corpus"), help="the converted corpora")
    args = parser.parse_args()
    if not args.results.exists():
        parser.error(f"{args.results} does not exist")
    rows = [json.loads(line) for line in args.results.read_text(encoding="utf8").splitlines() if line.strip()]
    keys = current_keys(args.corpus, args.setting)
    rows = [r for r in rows if run_key(r["dataset"], r["config"], r["seed"]) in keys]  # (a stored key may predate a setting)
    print("| system | runs | dev gain, step 1000 -> last | dev gain, step 400 -> last | best dev at the last evaluation |")
    print("|---|---|---|---|---|")
    for system, s in summarise(rows, args.workdir).items():
        print(f"| {system} | {s['runs']} | {s['gain_from_1000']:+.2f} | {s['gain_from_400']:+.2f} | "
              f"{s['best_at_last']}/{s['runs']} |")


if __name__ == "__main__":
    main()
