"""Train and test each system over seeds, resumably, and the mean ± std table (``projects/paper/results/glove.md``,
``projects/paper/results/minilm.md``).

One run = ``spacy train <config> --output <training>/<system>/seed<k>`` with the given data, seed and budget,
then ``spacy evaluate model-best <test> --gold-preproc``, through the study's run queue (:mod:`.queue`); its
row goes to the runs file ``<results>`` under the key ``<system>-seed<k>`` (test and dev accuracy, times, the
two commands; :mod:`.records`). A run with a row is skipped.
"""
from __future__ import annotations

import json
import math
import shlex
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Sequence

from ..registry import PAPER_TABLE2, SEED_TABLE_NAMES, SYSTEMS, canonical
from .queue import Run, evaluate_command, run_queue, spacy_evaluate, spacy_train, train_command
from .records import RunsFile

# the paper's Table 2 for the English sets, for reference in the tables
PAPER = {key: {system: PAPER_TABLE2[system][key] for system in SYSTEMS} for key in ("twitter", "en")}
SYSTEM_NAMES = SEED_TABLE_NAMES


class RunError(RuntimeError):
    """A run that could not be trained or tested."""


@dataclass
class RunSpec:
    """The runs of one table: systems x seeds of one config pattern on one dataset."""

    config_pattern: str  # e.g. "projects/paper/configs/glove/{system}.cfg"
    train: Path
    dev: Path
    test: Path
    training: Path  # models: <training>/<system>/seed<k>
    results: Path  # the runs file: a row <prefix><system>-seed<k> a run
    max_steps: int = 0  # 0: the config's own
    eval_frequency: int = 0  # 0: the config's own
    threads: int = 1
    gpu_id: int = -1
    overrides: Optional[Dict[str, str]] = None
    prefix: str = ""  # of the runs' keys, e.g. "k5/" (several tables in one runs file)

    def config(self, system: str) -> Path:
        return Path(self.config_pattern.format(system=system))


def _train_and_test(spec: RunSpec, system: str, seed: int) -> dict:
    """Train one (system, seed) with :func:`.queue.spacy_train`, test its model-best; the record."""
    config, out = spec.config(system), spec.training / system / f"seed{seed}"
    overrides = {"paths.train": spec.train, "paths.dev": spec.dev, "system.seed": seed, "gpu-id": spec.gpu_id}
    if spec.max_steps:
        overrides.update({"training.max_steps": spec.max_steps, "training.max_epochs": 0})
    if spec.eval_frequency:
        overrides["training.eval_frequency"] = spec.eval_frequency
    overrides.update(spec.overrides or {})
    train_s, train_cpu = spacy_train(config, out, overrides, out / "train.log", threads=spec.threads)
    t1 = time.time()
    scores = spacy_evaluate(out / "model-best", spec.test, out / "evaluate.log", threads=spec.threads,
                            gpu_id=spec.gpu_id)
    meta = json.loads((out / "model-best" / "meta.json").read_text())
    record = {
        "system": system, "seed": seed, "config": str(config),
        "max_steps": spec.max_steps or None, "eval_frequency": spec.eval_frequency or None,
        "test_acc": round(100 * scores["tag_acc"], 2),
        "dev_acc": round(100 * meta["performance"].get("tag_acc", float("nan")), 2),
        "train_seconds": round(train_s, 1), "train_cpu_seconds": round(train_cpu, 1),
        "eval_seconds": round(time.time() - t1, 1), "threads": spec.threads,
        "train_command": shlex.join(train_command(config, out, overrides)),
        "eval_command": shlex.join(evaluate_command(out / "model-best", spec.test, Path("<scores>"), spec.gpu_id)),
        "finished": time.strftime("%Y-%m-%dT%H:%M:%S"),
    }
    print(f"   test {record['test_acc']:.2f}  dev {record['dev_acc']:.2f}  ({train_s:.0f} s wall, "
          f"{train_cpu:.0f} s CPU training)", flush=True)
    return record


def run_all(spec: RunSpec, systems: Sequence[str], seeds: Sequence[int]) -> None:
    """Each (system, seed) without a record trained and tested through the run queue (:func:`.queue.run_queue`:
    resumable, shared by several processes), seed-major, so that every system has a first result early.
    A missing config or data file, or a failed run, is a RunError."""
    for system in systems:
        if not spec.config(system).exists():
            raise RunError(f"config not found: {spec.config(system)}")
    for what, path in (("train", spec.train), ("dev", spec.dev), ("test", spec.test)):
        if not Path(path).exists():
            raise RunError(f"{what} data not found: {path}")
    runs = [Run(f"{spec.prefix}{system}/seed{seed}", f"{spec.prefix}{system}-seed{seed}", (system, seed))
            for seed in seeds for system in systems]
    failed = run_queue(RunsFile(spec.results), runs, lambda run: _train_and_test(spec, *run.params))
    if failed:
        raise RunError(f"{failed} of {len(runs)} runs failed (their logs are under {spec.training})")


def mean_std(values: Sequence[float]) -> tuple:
    """Mean and sample standard deviation (n - 1; None for one value)."""
    n = len(values)
    mean = sum(values) / n
    std = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1)) if n > 1 else None
    return mean, std


def load_records(results: Path, prefix: str = "") -> Dict[str, List[dict]]:
    """System -> the rows of the runs file ``results`` whose keys are ``<prefix>...-seed<k>``, by their system."""
    out: Dict[str, List[dict]] = {}
    for key, row in sorted(RunsFile(results).rows().items()):
        rest = key[len(prefix):] if key.startswith(prefix) else ""
        if "/" not in rest and "-seed" in rest:
            out.setdefault(row["system"], []).append(row)
    return out


def render_table(results: Path, title: str, systems: Sequence[str], command: str = "", note: str = "",
                 paper: Optional[str] = None) -> str:
    """Mean ± std test accuracy per system over its seeds."""
    records = load_records(results)
    lines = [f"# {title}", ""]
    if note:
        lines += [note, ""]
    if command:
        lines += [f"Command: `{command}`", ""]
    head = "| System | Test acc. (mean ± std) | Dev acc. (mean) | Seeds | Steps (eval every) | Train min/run (wall) |"
    rule = "|---|---|---|---|---|---|"
    # the paper's column only for the English sets it reports
    paper = canonical(paper) if paper and canonical(paper) in PAPER else None
    if paper:
        head, rule = head + f" Paper ({paper}) |", rule + "---|"
    lines += [head, rule]
    for system in systems:
        runs = sorted(records.get(system, []), key=lambda r: r["seed"])
        if not runs:
            row = f"| {SYSTEM_NAMES.get(system, system)} (`{system}`) | not run | – | – | – | – |"
        else:
            mean, std = mean_std([r["test_acc"] for r in runs])
            dev, _ = mean_std([r["dev_acc"] for r in runs])
            minutes = sum(r["train_seconds"] for r in runs) / len(runs) / 60
            acc = f"{mean:.2f} ± {std:.2f}" if std is not None else f"{mean:.2f}"
            seeds = ",".join(str(r["seed"]) for r in runs)
            budgets = sorted({f"{r.get('max_steps') or 'config'} ({r.get('eval_frequency') or 'config'})" for r in runs})
            row = (f"| {SYSTEM_NAMES.get(system, system)} (`{system}`) | {acc} | {dev:.2f} | {seeds} | "
                   f"{' / '.join(budgets)} | {minutes:.1f} |")
        if paper:
            row += f" {PAPER[paper][system]:.2f} |"
        lines.append(row)
    lines += ["", "Std: sample standard deviation over seeds. Each run's exact commands are in its row "
              f"of {results} (key <system>-seed<k>).", ""]
    return "\n".join(lines)


def write_table(results: Path, output: Path, **kwargs) -> str:
    text = render_table(results, **kwargs)
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(text, encoding="utf8")
    return text

