"""Train and test each system over seeds, resumably, and the mean ± std table (``projects/paper/results/glove.md``,
``projects/paper/results/minilm.md``).

One run = ``spacy train <config> --output <training>/<system>/seed<k>`` with the given data, seed and budget,
then ``spacy evaluate model-best <test> --gold-preproc``; its record goes to ``<results>/<system>-seed<k>.json``
(test and dev accuracy, times, the two commands). A run whose record exists is skipped (delete it to redo).
"""
from __future__ import annotations

import json
import math
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence

from ..registry import PAPER_TABLE2, SEED_TABLE_NAMES, SYSTEMS, canonical
from ..tuning.trial import training_env
from .queue import children_cpu

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
    results: Path  # records: <results>/<system>-seed<k>.json
    max_steps: int = 0  # 0: the config's own
    eval_frequency: int = 0  # 0: the config's own
    threads: int = 1
    gpu_id: int = -1
    overrides: Optional[Dict[str, str]] = None

    def config(self, system: str) -> Path:
        return Path(self.config_pattern.format(system=system))


def run_one(spec: RunSpec, system: str, seed: int, echo: Callable[[str], None] = print) -> Optional[dict]:
    """Train and test one (system, seed) unless its record exists; return the record (None when skipped)."""
    record_path = spec.results / f"{system}-seed{seed}.json"
    if record_path.exists():
        echo(f"skip {system} seed {seed}: {record_path} exists")
        return None
    config = spec.config(system)
    if not config.exists():
        raise RunError(f"config not found: {config}")
    for what, path in (("train", spec.train), ("dev", spec.dev), ("test", spec.test)):
        if not Path(path).exists():
            raise RunError(f"{what} data not found: {path}")
    out = spec.training / system / f"seed{seed}"
    out.mkdir(parents=True, exist_ok=True)
    train_cmd = [sys.executable, "-m", "spacy", "train", str(config), "--output", str(out),
                 "--paths.train", str(spec.train), "--paths.dev", str(spec.dev), "--system.seed", str(seed),
                 "--gpu-id", str(spec.gpu_id)]
    if spec.max_steps:
        train_cmd += ["--training.max_steps", str(spec.max_steps), "--training.max_epochs", "0"]
    if spec.eval_frequency:
        train_cmd += ["--training.eval_frequency", str(spec.eval_frequency)]
    for key, value in (spec.overrides or {}).items():
        train_cmd += [f"--{key}", value]
    env = training_env(spec.threads)
    echo(f"== {system} seed {seed}: training ({time.strftime('%H:%M:%S')}), log {out / 'train.log'}")
    t0, cpu0 = time.time(), children_cpu()
    with open(out / "train.log", "w", encoding="utf8") as log:
        log.write("$ " + shlex.join(train_cmd) + "\n")
        log.flush()
        rc = subprocess.call(train_cmd, stdout=log, stderr=subprocess.STDOUT, env=env)
    train_s, train_cpu = time.time() - t0, children_cpu() - cpu0
    if rc != 0:
        raise RunError(f"{system} seed {seed}: training failed (exit status {rc}); see {out / 'train.log'}")
    metrics = out / "test_metrics.json"
    eval_cmd = [sys.executable, "-m", "spacy", "evaluate", str(out / "model-best"), str(spec.test),
                "--output", str(metrics), "--gold-preproc", "--gpu-id", str(spec.gpu_id)]
    t1 = time.time()
    rc = subprocess.call(eval_cmd, stdout=subprocess.DEVNULL, env=env)
    if rc != 0:
        raise RunError(f"{system} seed {seed}: evaluation failed (exit status {rc}): {shlex.join(eval_cmd)}")
    scores = json.loads(metrics.read_text())
    meta = json.loads((out / "model-best" / "meta.json").read_text())
    record = {
        "system": system, "seed": seed, "config": str(config),
        "max_steps": spec.max_steps or None, "eval_frequency": spec.eval_frequency or None,
        "test_acc": round(100 * scores["tag_acc"], 2),
        "dev_acc": round(100 * meta["performance"].get("tag_acc", float("nan")), 2),
        "train_seconds": round(train_s, 1), "train_cpu_seconds": round(train_cpu, 1),
        "eval_seconds": round(time.time() - t1, 1), "threads": spec.threads,
        "train_command": shlex.join(train_cmd), "eval_command": shlex.join(eval_cmd),
        "finished": time.strftime("%Y-%m-%dT%H:%M:%S"),
    }
    record_path.parent.mkdir(parents=True, exist_ok=True)
    record_path.write_text(json.dumps(record, indent=2) + "\n")
    echo(f"   test {record['test_acc']:.2f}  dev {record['dev_acc']:.2f}  ({train_s:.0f} s wall, "
         f"{train_cpu:.0f} s CPU training)")
    return record


def run_all(spec: RunSpec, systems: Sequence[str], seeds: Sequence[int], echo: Callable[[str], None] = print):
    for seed in seeds:  # seed-major: every system has a first result early
        for system in systems:
            run_one(spec, system, seed, echo)


def mean_std(values: Sequence[float]) -> tuple:
    """Mean and sample standard deviation (n - 1; None for one value)."""
    n = len(values)
    mean = sum(values) / n
    std = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1)) if n > 1 else None
    return mean, std


def load_records(results: Path) -> Dict[str, List[dict]]:
    out: Dict[str, List[dict]] = {}
    for path in sorted(Path(results).glob("*-seed*.json")):
        record = json.loads(path.read_text())
        out.setdefault(record["system"], []).append(record)
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
    lines += ["", "Std: sample standard deviation over seeds. Each run's exact commands are in its record "
              f"({results}/<system>-seed<k>.json).", ""]
    return "\n".join(lines)


def write_table(results: Path, output: Path, **kwargs) -> str:
    text = render_table(results, **kwargs)
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(text, encoding="utf8")
    return text

