"""Table 2: train and evaluate every (dataset, system, seed), resumably, one result JSON per run.

    python scripts/reproduce.py --datasets twitter,en,fr,te --systems all --seeds 0,1 \
        [--max-epochs 30 --patience 2000 --eval-frequency 200] [--mirror ../shared/data]

A run whose results/runs/<dataset>/<system>-seed<k>.json exists is skipped (delete it to redo the run).
Each run: `spacy train configs/<system>.cfg` on corpus/<dataset>/train.spacy with dev for model selection,
then `spacy evaluate model-best test.spacy --gold-preproc` (token accuracy on the given tokens). A dataset
without a train file in the mirror (It, Ru) is reported and skipped. Then `python scripts/table2.py`.
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

from datasets import DATASETS, SYSTEMS, corpus_file, has_train, parse_list


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _steps_per_epoch(key: str, batch_words: int = 500) -> int:
    """About one evaluation per epoch (spaCy evaluates every eval_frequency steps, not at the last step)."""
    from spacy.tokens import DocBin

    n_words = sum(len(d) for d in DocBin().from_disk(corpus_file(key, "train")).get_docs(_vocab()))
    return max(5, round(n_words / batch_words))


def _vocab():
    from spacy.vocab import Vocab

    return Vocab()


def run_one(args, key: str, system: str, seed: int) -> None:
    result = args.results / key / f"{system}-seed{seed}.json"
    if result.exists():
        print(f"skip {key}/{system}/seed{seed}: {result} exists", flush=True)
        return
    # Several workers may share the queue (e.g. one per seed): a run is claimed with an exclusive lock file.
    claim = result.with_suffix(".running")
    claim.parent.mkdir(parents=True, exist_ok=True)
    if claim.exists():
        try:
            pid = int(claim.read_text().strip() or 0)
            os.kill(pid, 0)
            print(f"skip {key}/{system}/seed{seed}: running in process {pid}", flush=True)
            return
        except (ValueError, ProcessLookupError, PermissionError):
            claim.unlink()  # left by a worker that died
    try:
        fd = os.open(claim, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        return
    os.write(fd, str(os.getpid()).encode())
    os.close(fd)
    try:
        _train_and_test(args, key, system, seed, result)
    finally:
        claim.unlink(missing_ok=True)


def _train_and_test(args, key: str, system: str, seed: int, result: Path) -> None:
    out = args.training / key / system / f"seed{seed}"
    out.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        env[var] = str(args.threads)
    overrides = {
        "paths.train": str(corpus_file(key, "train")),
        "paths.dev": str(corpus_file(key, "dev")),
        "nlp.lang": DATASETS[key]["lang"],
        "system.seed": str(seed),
        "training.max_epochs": str(args.max_epochs),
        "training.max_steps": str(args.max_steps),
        "training.patience": str(args.patience),
        "training.eval_frequency": str(args.eval_frequency or _steps_per_epoch(key)),
    }
    cmd = [sys.executable, "-m", "spacy", "train", f"configs/{system}.cfg", "--output", str(out)]
    for k, v in overrides.items():
        cmd += [f"--{k}", v]
    print(f"== {key}/{system}/seed{seed}: training ({time.strftime('%H:%M:%S')})", flush=True)
    t0 = time.time()
    cpu0 = _children_cpu()
    with open(out / "train.log", "w") as log:
        rc = subprocess.call(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)
    train_s = time.time() - t0
    train_cpu = _children_cpu() - cpu0
    if rc != 0:
        print(f"   FAILED (exit {rc}); see {out / 'train.log'}", flush=True)
        return
    metrics = out / "test_metrics.json"
    t1 = time.time()
    rc = subprocess.call(
        [sys.executable, "-m", "spacy", "evaluate", str(out / "model-best"), str(corpus_file(key, "test")),
         "--output", str(metrics), "--gold-preproc"],
        stdout=subprocess.DEVNULL, env=env,
    )
    eval_s = time.time() - t1
    if rc != 0:
        print(f"   evaluation FAILED (exit {rc})", flush=True)
        return
    scores = json.loads(metrics.read_text())
    meta = json.loads((out / "model-best" / "meta.json").read_text())
    last_line = [ln for ln in (out / "train.log").read_text().splitlines() if ln.strip()[:1].isdigit()]
    record = {
        "dataset": key, "paper_column": DATASETS[key]["paper"], "system": system, "seed": seed,
        "test_acc": round(100 * scores["tag_acc"], 2),
        "dev_acc": round(100 * meta["performance"].get("tag_acc", float("nan")), 2),
        "train_seconds": round(train_s, 1), "train_cpu_seconds": round(train_cpu, 1),
        "eval_seconds": round(eval_s, 1),
        "last_log_line": last_line[-1].split() if last_line else None,
        "budget": {k: overrides[k] for k in overrides if k.startswith("training.")},
        "threads": args.threads, "finished": time.strftime("%Y-%m-%dT%H:%M:%S"),
    }
    result.parent.mkdir(parents=True, exist_ok=True)
    result.write_text(json.dumps(record, indent=2) + "\n")
    print(f"   test {record['test_acc']:.2f}  dev {record['dev_acc']:.2f}  "
          f"({train_s:.0f} s wall, {train_cpu:.0f} s CPU training)", flush=True)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--datasets", default="all")
    p.add_argument("--systems", default="all")
    p.add_argument("--seeds", default="0,1")
    p.add_argument("--mirror", type=Path, default=Path("../shared/data"))
    p.add_argument("--max-epochs", type=int, default=30)
    p.add_argument("--max-steps", type=int, default=0)
    p.add_argument("--patience", type=int, default=2000)
    p.add_argument("--eval-frequency", type=int, default=0, help="0: about once per epoch")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--results", type=Path, default=Path("results/runs"))
    p.add_argument("--training", type=Path, default=Path("training/reproduce"))
    args = p.parse_args()
    keys = parse_list(args.datasets, list(DATASETS))
    systems = parse_list(args.systems, SYSTEMS)
    seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
    for key in keys:
        if not has_train(args.mirror, key):
            print(f"skip {key}: no train file in the mirror (the row stays in the table, marked)", flush=True)
            continue
        if not corpus_file(key, "train").exists():
            sys.exit(f"error: {corpus_file(key, 'train')} missing: run the convert commands first")
        for seed in seeds:
            for system in systems:
                run_one(args, key, system, seed)


if __name__ == "__main__":
    main()
