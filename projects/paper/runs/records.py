"""The study's one run record: a runs file of JSON lines, one object a finished run, found by its ``"key"``.

Every harness reads and writes its runs here: the queue of ``spacy train`` + ``spacy evaluate`` runs
(:mod:`.queue`: Table 2, Figure 3, the seed tables), ``spacy-train`` (:mod:`.spacy_train`) and the plain
``nlp.update`` loop (:mod:`.loop`). A run whose key is in the file is done; a run done again is appended and its
last line wins, so the file only grows and a half-finished campaign loses nothing. Appends take an exclusive lock
on the file (several processes share one file); a run being trained is claimed with a lock file under
``<file>.locks/`` (:func:`claim`).
"""
from __future__ import annotations

import fcntl
import hashlib
import json
import os
from pathlib import Path
from typing import Dict, Iterator, Tuple


class RunsFile:
    """A runs file (JSON lines). ``rows()``: key -> the last row of that key; ``add(row)``: one line more."""

    def __init__(self, path: Path):
        self.path = Path(path)

    def __repr__(self) -> str:
        return f"RunsFile({str(self.path)!r})"

    def lines(self) -> Iterator[Tuple[int, dict]]:
        """(line number, row) of each non-empty line; a line that is not a JSON object with a key is a ValueError
        naming the file and line."""
        if not self.path.exists():
            return
        with self.path.open(encoding="utf8") as f:
            for number, line in enumerate(f, start=1):
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                except json.JSONDecodeError as err:
                    raise ValueError(f"{self.path}:{number}: not a JSON line ({err.msg})") from None
                if not isinstance(row, dict) or not isinstance(row.get("key"), str):
                    raise ValueError(f"{self.path}:{number}: a run's row needs a \"key\" (a string)")
                yield number, row

    def rows(self) -> Dict[str, dict]:
        """Key -> row, the last line of each key; in the order the keys first appear."""
        out: Dict[str, dict] = {}
        for _, row in self.lines():
            out[row["key"]] = row
        return out

    def add(self, row: dict) -> None:
        """Append ``row`` (which has a ``"key"``) as one line, holding the file's lock while writing."""
        if not isinstance(row.get("key"), str):
            raise ValueError(f"{self.path}: a run's row needs a \"key\" (a string), got {row.get('key')!r}")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        line = json.dumps(row) + "\n"
        with self.path.open("a", encoding="utf8") as f:
            fcntl.flock(f, fcntl.LOCK_EX)
            try:
                f.write(line)
                f.flush()
            finally:
                fcntl.flock(f, fcntl.LOCK_UN)

    def lock(self, key: str) -> Path:
        """The lock file of the run ``key`` (see :func:`claim`): named by a hash of the key, which can be longer
        than a file name may be (the plain loop's keys are their specs as JSON)."""
        return Path(f"{self.path}.locks") / f"{hashlib.sha1(key.encode('utf8')).hexdigest()[:16]}.lock"


def claim(lock: Path) -> bool:
    """Create ``lock`` holding our pid; False if a live process holds it (a dead holder's lock is taken)."""
    lock.parent.mkdir(parents=True, exist_ok=True)
    for _ in range(2):
        try:
            fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            try:
                pid = int(lock.read_text().strip() or 0)
                os.kill(pid, 0)
                return False
            except (ValueError, ProcessLookupError, FileNotFoundError):
                lock.unlink(missing_ok=True)  # left by a process that died (or half written)
                continue
            except PermissionError:  # alive, another user's
                return False
        with os.fdopen(fd, "w") as f:
            f.write(str(os.getpid()))
        return True
    return False
