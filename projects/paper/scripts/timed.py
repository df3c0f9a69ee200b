"""Run a command with a fixed number of torch/BLAS threads, and record its wall time as JSON.

    python -m projects.paper.scripts.timed --threads 1 --record training/twitter/nldm/time.json -- python -m spacy train ...

The record has the wall time and the CPU time of the command (user + system): at one thread, the CPU time is
what the wall time would be on an idle machine. One thread per process: on a small shared machine, torch's default (one thread per core) oversubscribes the
cores as soon as two processes run, and training gets 10x slower or worse.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--record", type=Path, required=True, help="JSON file for the timing")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    cmd = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not cmd:
        parser.error("no command")
    if cmd[0] in ("python", "python3"):
        cmd[0] = sys.executable
    env = dict(os.environ)
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        env[var] = str(args.threads)
    env.setdefault("HF_HUB_OFFLINE", "1")
    env.setdefault("TRANSFORMERS_OFFLINE", "1")
    start = time.time()
    rc = subprocess.call(cmd, env=env)
    seconds = time.time() - start
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = usage.ru_utime + usage.ru_stime  # = wall time on an idle machine, at one thread
    args.record.parent.mkdir(parents=True, exist_ok=True)
    args.record.write_text(json.dumps({"command": cmd, "threads": args.threads, "seconds": round(seconds, 1),
                                       "cpu_seconds": round(cpu, 1),
                                       "returncode": rc}, indent=2) + "\n")
    print(f"[timed] {seconds:.1f} s wall, {cpu:.1f} s CPU, exit status {rc}: {' '.join(cmd[:6])} ...", flush=True)
    return rc


if __name__ == "__main__":
    sys.exit(main())
