"""The study's one run queue, and its one way to run ``spacy train`` and ``spacy evaluate --gold-preproc``
(Table 2: ``scripts/reproduce.py``; Figure 3: ``scripts/synthetic_runs.py``; GloVe, MiniLM, Figure 4:
:mod:`.seeds`; the runs of ``spacy-train`` use the same two commands: :mod:`.spacy_train`).

A run is one ``spacy train`` + ``spacy evaluate --gold-preproc``, whose row goes to a runs file
(:class:`.records.RunsFile`) when it finishes: a run with a current row is done and skipped, so a queue can be
stopped and started again. Several copies of a queue can share it: each run is claimed with a lock file
(:meth:`.records.RunsFile.lock`, holding the pid; the lock of a process that died is taken over).

Imported by the scripts as ``projects.paper.runs.queue``.
"""
from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, Iterable, List, Optional, Tuple

from .records import RunsFile, claim


class RunFailed(Exception):
    """A command of a run failed; the message says which and where its log is."""


@dataclass
class Run:
    name: str  # for messages, e.g. "te/nldm/seed0"
    key: str  # its row's key in the runs file, e.g. "te/nldm-seed0"
    params: tuple = ()  # what the queue's work function needs to know about the run
    #: what the run is made of (e.g. a hash of its config and budget), stored in its row: a row with
    #: another fingerprint (or none) is out of date and the run is done again; None: any row counts
    fingerprint: Optional[str] = None
    #: fields a row must hold to count (a row made before the run stored them is done again)
    required: Tuple[str, ...] = ()

    def stale(self, row: Optional[dict]) -> Optional[str]:
        """Why ``row`` (this run's row, or None) does not count (None: it does, or there is none)."""
        if row is None:
            return None
        found = row.get("fingerprint")
        if self.fingerprint is not None and found != self.fingerprint:
            return f"made with another config or budget ({found} != {self.fingerprint})"
        missing = [field for field in self.required if field not in row]
        return f"made without {', '.join(missing)}" if missing else None

    def done(self, rows: Dict[str, dict]) -> bool:
        return self.key in rows and self.stale(rows[self.key]) is None


def run_queue(runs_file: RunsFile, runs: Iterable[Run], work: Callable[[Run], dict],
              stop: Callable[[], Optional[str]] = lambda: None, *, jobs: int = 1,
              report: Callable[[Run, dict], None] = lambda run, row: None) -> int:
    """Do each run that has no current row in ``runs_file`` (:meth:`Run.done`) and that no other process holds,
    ``jobs`` at a time (threads; a run's commands are processes of their own), in order: ``work(run)`` returns
    the row, added with the run's key (and fingerprint), then ``report(run, row)``. ``stop()`` returning a reason
    starts no further run. A RunFailed is reported and the queue goes on. Returns the number of runs that failed."""
    stopped = threading.Event()

    def one(run: Run) -> bool:
        """Do ``run`` unless it is done, held or the queue stopped; False if it failed."""
        if stopped.is_set():
            return True
        rows = runs_file.rows()
        if run.done(rows):
            print(f"skip {run.name}: done in {runs_file.path}", flush=True)
            return True
        stale = run.stale(rows.get(run.key))
        if stale:
            print(f"redo {run.name}: its row in {runs_file.path} was {stale}", flush=True)
        reason = stop()
        if reason:
            stopped.set()
            print(f"stop: {reason}; {run.name} not started", flush=True)
            return True
        lock = runs_file.lock(run.key)
        if not claim(lock):
            print(f"skip {run.name}: claimed by another process ({lock})", flush=True)
            return True
        try:
            if run.done(runs_file.rows()):  # finished by another process since we looked
                return True
            print(f"== {run.name} ({time.strftime('%H:%M:%S')})", flush=True)
            try:
                row = work(run)
            except RunFailed as err:
                print(f"   FAILED {run.name}: {err}", flush=True)
                return False
            row = {"key": run.key, **row}
            if run.fingerprint is not None:
                row["fingerprint"] = run.fingerprint
            runs_file.add(row)
        finally:
            lock.unlink(missing_ok=True)
        report(run, row)
        return True

    if jobs <= 1:
        return sum(not one(run) for run in runs)
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        return sum(not ok for ok in pool.map(one, runs))


def thread_env(threads: int) -> Dict[str, str]:
    """The environment of a training process with ``threads`` torch/BLAS threads, offline."""
    env = dict(os.environ)
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        env[var] = str(threads)
    env.setdefault("HF_HUB_OFFLINE", "1")
    env.setdefault("TRANSFORMERS_OFFLINE", "1")
    return env


def parse_overrides(args: List[str]) -> Dict[str, str]:
    """Config overrides given on a command line (``--training.max_steps 500`` or ``--training.max_steps=500``)."""
    out: Dict[str, str] = {}
    items = iter(args)
    for item in items:
        if not item.startswith("--"):
            raise SystemExit(f"error: expected a config override such as --training.max_steps 500, got {item!r}")
        key, eq, value = item[2:].partition("=")
        out[key] = value if eq else next(items, "")
    return out


def children_cpu() -> float:
    """CPU seconds of the finished child processes (user + system), e.g. of a ``spacy train`` run."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _call(cmd: List[str], log: Path, threads: int, cwd: Optional[Path], append: bool) -> None:
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("a" if append else "w") as f:
        f.write(" ".join(cmd) + "\n")
        f.flush()
        rc = subprocess.call(cmd, stdout=f, stderr=subprocess.STDOUT, env=thread_env(threads), cwd=cwd)
    if rc != 0:
        raise RunFailed(f"{' '.join(cmd[2:4])} exited with status {rc}; see {log}")


def train_command(config: Path, output: Path, overrides: Dict[str, str]) -> List[str]:
    """``spacy train CONFIG --output OUTPUT --key value ...`` (a key such as ``gpu-id`` is an option of its own)."""
    cmd = [sys.executable, "-m", "spacy", "train", str(config), "--output", str(output)]
    for key, value in overrides.items():
        cmd += [f"--{key.lstrip('-')}", str(value)]
    return cmd


def spacy_train(config: Path, output: Path, overrides: Dict[str, str], log: Path, *, threads: int = 1,
                cwd: Optional[Path] = None) -> Tuple[float, float]:
    """:func:`train_command` run with its output in ``log`` (overwritten); returns its wall and CPU seconds."""
    wall, cpu = time.time(), children_cpu()
    _call(train_command(config, output, overrides), log, threads, cwd, append=False)
    return time.time() - wall, children_cpu() - cpu


def evaluate_command(model: Path, data: Path, output: Path, gpu_id: int = -1) -> List[str]:
    """``spacy evaluate MODEL DATA --output OUTPUT --gold-preproc --gpu-id GPU_ID``."""
    return [sys.executable, "-m", "spacy", "evaluate", str(model), str(data), "--output", str(output),
            "--gold-preproc", "--gpu-id", str(gpu_id)]


def spacy_evaluate(model: Path, data: Path, log: Path, *, threads: int = 1, cwd: Optional[Path] = None,
                   gpu_id: int = -1) -> dict:
    """The scores of :func:`evaluate_command` (its output appended to ``log``)."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "scores.json"
        _call(evaluate_command(model, data, out, gpu_id), log, threads, cwd, append=True)
        return json.loads(out.read_text())


def logged_steps(log: Path) -> List[List[str]]:
    """The rows of ``spacy train``'s table in ``log`` (epoch, step, losses, scores), in order."""
    rows = (line.split() for line in log.read_text().splitlines())
    return [parts for parts in rows if len(parts) >= 2 and parts[0].isdigit() and parts[1].isdigit()]


def last_logged_step(log: Path) -> Optional[List[str]]:
    """The last row of ``spacy train``'s table in ``log``, or None."""
    rows = logged_steps(log)
    return rows[-1] if rows else None
