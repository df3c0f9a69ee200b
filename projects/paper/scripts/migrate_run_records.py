"""One-off migration of the queue's run records (one JSON file a run) into runs files (JSON lines, one row a run:
:mod:`projects.paper.runs.records`), the one run record of the study (run once; kept to show what changed).

    python -m projects.paper.scripts.migrate_run_records [projects/paper/results]

A folder of records becomes the runs file ``<folder>.jsonl`` beside it: ``runs/<dataset>/<system>-seed<k>.json``
(Table 2) becomes the row ``<dataset>/<system>-seed<k>`` of ``runs.jsonl``, ``arc-length/k<k>/nldm-seed<s>.json``
(Figure 4) the row ``k<k>/nldm-seed<s>`` of ``arc-length.jsonl``, and ``<folder>/<system>-seed<k>.json`` (the seed
tables) the row ``<system>-seed<k>`` of ``<folder>.jsonl`` (of ``<folder>/runs.jsonl`` where the folder keeps other
files, such as the config diffs of a screen). Each row is the record as it was, with its key first;
rows in the order of their keys. The record files are removed once their runs file is written. The rows of the
plain loop's ``diagnosis/exploration.jsonl`` made before rows held their key get it (:meth:`RunSpec.key` of their
spec, as the later rows hold it).
"""
import json
import re
import sys
from collections import defaultdict
from pathlib import Path
from typing import Dict, List, Tuple

if not __package__:  # run by path: the repository root on sys.path (for projects.paper.*), not this folder
    sys.path[0] = str(Path(__file__).resolve().parents[3])

from projects.paper.registry import DATASETS  # noqa: E402
from projects.paper.runs.loop import RunSpec  # noqa: E402

#: a folder of records one level below the folder that is the runs file: a dataset (Table 2) or a k (Figure 4)
GROUPED = re.compile(r"^(k\d+|" + "|".join(map(re.escape, DATASETS)) + r")$")


def is_run_record(path: Path) -> bool:
    """A record of the queue: a JSON object with the run's system and seed and its test accuracy."""
    try:
        record = json.loads(path.read_text(encoding="utf8"))
    except ValueError:
        return False
    return isinstance(record, dict) and {"system", "seed", "test_acc"} <= set(record)


def plan(results: Path) -> Dict[Path, List[Tuple[str, Path]]]:
    """Runs file -> [(key, record file)] for every run record under ``results``."""
    out: Dict[Path, List[Tuple[str, Path]]] = defaultdict(list)
    for path in sorted(results.rglob("*.json")):
        if not is_run_record(path):
            continue
        folder = path.parent
        if GROUPED.match(folder.name):
            out[folder.parent.with_suffix(".jsonl")].append((f"{folder.name}/{path.stem}", path))
        elif any(not is_run_record(other) for other in folder.iterdir()):  # it keeps config diffs: the runs file too
            out[folder / "runs.jsonl"].append((path.stem, path))
        else:
            out[folder.with_suffix(".jsonl")].append((path.stem, path))
    return out


def key_loop_rows(path: Path) -> int:
    """Give the rows of a plain-loop runs file without a key their :meth:`RunSpec.key`; how many."""
    rows = [json.loads(line) for line in path.read_text(encoding="utf8").splitlines() if line.strip()]
    keyed = [row if "key" in row else {"key": RunSpec(**row["spec"]).key(), **row} for row in rows]
    path.write_text("".join(json.dumps(row) + "\n" for row in keyed), encoding="utf8")
    return sum("key" not in row for row in rows)


def main(results: Path = Path("projects/paper/results")) -> None:
    exploration = results / "diagnosis" / "exploration.jsonl"
    print(f"{exploration}: {key_loop_rows(exploration)} rows keyed")
    for runs_file, records in sorted(plan(results).items()):
        if runs_file.exists():
            raise SystemExit(f"{runs_file} exists: not overwritten")
        rows = [{"key": key, **json.loads(path.read_text(encoding="utf8"))} for key, path in sorted(records)]
        runs_file.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf8")
        for _, path in records:
            path.unlink()
        for folder in sorted({path.parent for _, path in records}, key=lambda p: -len(p.parts)):
            while folder != results and folder.exists() and not any(folder.iterdir()):
                folder.rmdir()
                folder = folder.parent
        print(f"{runs_file}: {len(rows)} runs")


if __name__ == "__main__":
    main(*(Path(arg) for arg in sys.argv[1:2]))
