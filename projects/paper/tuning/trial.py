"""One trial: a ``spacy train`` subprocess whose dev scores are read live from spaCy's progress table.

The trial forces ``spacy.ConsoleLogger.v3`` (no progress bar) so that every evaluation prints one table row,
flushed, on stdout: ``E  #  LOSS <PIPE>...  TAG_ACC  SCORE``. :class:`ProgressTable` finds the metric's column
in the header and reads it from each row; :func:`run_training` hands each (step, score) to a callback and, when
the callback says stop (the trial is pruned), kills the subprocess (SIGTERM, then SIGKILL). The subprocess
stays in the tuner's process group (a signal to the group reaches it) and, on Linux, is sent SIGTERM if the
tuner dies. No model is written (``spacy train`` without ``--output``): a trial's result is its best dev score.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, List, Mapping, Optional, Sequence, Tuple

# spaCy's console logger, one flushed row per evaluation and no progress bar (stdout is a pipe here)
CONSOLE_LOGGER = {"@loggers": "spacy.ConsoleLogger.v3", "progress_bar": None, "console_output": True,
                  "output_file": None}
SPACY_TRAIN = (sys.executable, "-m", "spacy", "train")


def column_title(metric: str) -> str:
    """The metric's column title in spaCy's table (upper case, cut to 13 characters as spaCy does)."""
    title = metric.upper()
    return title if len(title) <= 13 else title[:10] + "..."


class ProgressTable:
    """Reads spaCy's training progress table line by line: ``feed(line)`` returns ``(epoch, step, score)`` for a
    table row (the score in percent, as printed), else None."""

    def __init__(self, metric: str = "tag_acc"):
        self.metric = metric
        self.title = column_title(metric)
        self.index: Optional[int] = None
        self.width = 0
        self.header_seen = False

    def feed(self, line: str) -> Optional[Tuple[int, int, float]]:
        cells = line.split()
        if len(cells) >= 3 and cells[0] == "E" and cells[1] == "#":
            # the loss columns are titled "LOSS <PIPE>" (two words in the header, one number in a row)
            self.header_seen = True
            n_loss = cells.count("LOSS")
            self.width = len(cells) - n_loss
            self.index = cells.index(self.title) - n_loss if self.title in cells[2 + 2 * n_loss:] else None
            return None
        if self.index is None or len(cells) != self.width or not (cells[0].isdigit() and cells[1].isdigit()):
            return None
        try:
            return int(cells[0]), int(cells[1]), float(cells[self.index])
        except ValueError:
            return None


@dataclass
class TrainingRun:
    """What became of one ``spacy train`` subprocess."""

    scores: List[Tuple[int, float]] = field(default_factory=list)  # (step, dev score in percent)
    stopped: bool = False  # killed because the callback asked (pruned)
    returncode: Optional[int] = None
    pid: Optional[int] = None
    seconds: float = 0.0
    metric_missing: bool = False  # the table had no column for the metric

    @property
    def best(self) -> Optional[float]:
        return max(s for _, s in self.scores) if self.scores else None


def build_command(config: Path | str, overrides: Mapping[str, object], *, gpu_id: int = -1,
                  train_command: Sequence[str] = SPACY_TRAIN) -> List[str]:
    """``spacy train CONFIG --key value ...`` (values as JSON, which spaCy parses; plain strings stay plain)."""
    cmd = [*train_command, str(config)]
    for key, value in overrides.items():
        cmd += [f"--{key}", value if isinstance(value, str) else json.dumps(value)]
    if gpu_id >= 0:
        cmd += ["--gpu-id", str(gpu_id)]
    return cmd


def training_env(threads: int) -> Dict[str, str]:
    """The subprocess environment: the run queue's (``threads`` torch/BLAS threads, no model-hub access) with
    unbuffered output, so that a trial's dev scores are read as spaCy prints them."""
    from ..runs.queue import thread_env

    return {**thread_env(threads), "PYTHONUNBUFFERED": "1"}


def run_training(cmd: Sequence[str], *, log_path: Path, metric: str = "tag_acc",
                 on_score: Optional[Callable[[int, float], bool]] = None, env: Optional[Mapping[str, str]] = None,
                 cwd: Optional[Path] = None, kill_grace: float = 10.0) -> TrainingRun:
    """Run ``cmd``, copying its output to ``log_path``; call ``on_score(step, score)`` for each evaluation row and
    kill the run when it returns True. Ctrl-C (or any error) here kills the run too, then propagates."""
    table = ProgressTable(metric)
    run = TrainingRun()
    log_path.parent.mkdir(parents=True, exist_ok=True)
    start = time.time()
    with open(log_path, "w", encoding="utf8") as log:
        log.write("$ " + " ".join(cmd) + "\n")
        log.flush()
        proc = subprocess.Popen(list(cmd), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                bufsize=1, env=dict(env) if env is not None else None, cwd=cwd,
                                preexec_fn=_die_with_parent if sys.platform.startswith("linux") else None)
        run.pid = proc.pid
        try:
            assert proc.stdout is not None
            for line in proc.stdout:
                log.write(line)
                row = table.feed(line)
                if row is None:
                    continue
                _, step, score = row
                run.scores.append((step, score))
                log.flush()
                if on_score is not None and on_score(step, score):
                    run.stopped = True
                    log.write(f"[tune] pruned at step {step}: killing process {proc.pid}\n")
                    log.flush()
                    kill(proc, kill_grace)
                    break
            run.returncode = proc.wait()
        except BaseException:
            kill(proc, kill_grace)
            raise
        finally:
            if proc.stdout is not None:
                proc.stdout.close()
    run.seconds = time.time() - start
    run.metric_missing = table.header_seen and table.index is None
    return run


def kill(proc: subprocess.Popen, grace: float = 10.0) -> None:
    """End ``proc``: SIGTERM, then SIGKILL if it is still there after ``grace`` seconds; reap it."""
    if proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def _die_with_parent() -> None:  # pragma: no cover - runs in the child
    """In the child, before exec: ask Linux to send SIGTERM when the tuner process dies (PR_SET_PDEATHSIG)."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)
    except Exception:
        pass


def pid_alive(pid: int) -> bool:
    """Whether a process with this id exists (on this machine)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
