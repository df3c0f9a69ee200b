"""Table 2: train and evaluate every (dataset, system, seed), resumably, one row per run in a runs file.

    python -m projects.paper.scripts.reproduce --datasets twitter,en,fr,te --systems all --seeds 0,1 \
        --mirror ../shared/data [--max-epochs 30 --patience 2000 --eval-frequency 200]

A run whose row (key <dataset>/<system>-seed<k>) in projects/paper/results/runs.jsonl was made with today's config and budget
is skipped (its fingerprint: a hash of configs/<system>.cfg, or of --configs' file, and the budget options); a row made with
another config or budget is redone. Several copies can share the queue (projects/paper/runs/queue.py: one lock file per run).
Each run: `spacy train configs/<system>.cfg` on corpus/<dataset>/train.spacy with dev for model selection,
then `spacy evaluate model-best test.spacy --gold-preproc` (token accuracy on the given tokens) and the
correct tokens of each test sentence (for the paired significance in Table 2; ``--significance`` redoes the
records made without them). A dataset
without a train file in the mirror (It, Ru) is reported and skipped. Then `python -m projects.paper.scripts.table2`.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from pathlib import Path

import torch

if not __package__:  # run by path: the repository root on sys.path (for projects.paper.*), not this folder
    sys.path[0] = str(Path(__file__).resolve().parents[3])

from projects.paper.registry import DATASETS, SYSTEMS, corpus_file, has_train, parse_list
from projects.paper.runs.queue import Run, RunFailed, last_logged_step, run_queue, spacy_evaluate, spacy_train
from projects.paper.runs.records import RunsFile
from projects.paper.scripts.paired_bootstrap import correct_per_sentence
from thinc.api import Config

#: what a record holds for the paired significance of Table 2 (``--significance`` redoes records without it)
SENTENCE_FIELDS = ("test_correct", "test_tokens")


def _steps_per_epoch(key: str, batch_words: int = 500) -> int:
    """About one evaluation per epoch (spaCy evaluates every eval_frequency steps, not at the last step)."""
    from spacy.tokens import DocBin
    from spacy.vocab import Vocab

    n_words = sum(len(d) for d in DocBin().from_disk(corpus_file(key, "train")).get_docs(Vocab()))
    return max(5, round(n_words / batch_words))


def train_and_test(args, key: str, system: str, seed: int) -> dict:
    """One run: spacy train, spacy evaluate model-best on test; its record."""
    out = args.training / key / system / f"seed{seed}"
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
    log = out / "train.log"
    train_s, train_cpu = spacy_train(args.configs / f"{system}.cfg", out, overrides, log, threads=args.threads)
    t1 = time.time()
    scores = spacy_evaluate(out / "model-best", corpus_file(key, "test"), out / "evaluate.log", threads=args.threads)
    eval_s = time.time() - t1
    torch.set_num_threads(args.threads)  # the per-sentence counts are tagged in this process
    correct, tokens = correct_per_sentence([out / "model-best"], corpus_file(key, "test"), "tag_")
    if abs(100 * correct.sum() / tokens.sum() - 100 * scores["tag_acc"]) > 0.005:
        raise RunFailed(f"{key}/{system}/seed{seed}: the per-sentence counts give {100 * correct.sum() / tokens.sum():.3f}, "
                        f"spacy evaluate {100 * scores['tag_acc']:.3f}")
    meta = json.loads((out / "model-best" / "meta.json").read_text())
    record = {
        "dataset": key, "paper_column": DATASETS[key]["paper"], "system": system, "seed": seed,
        "test_acc": round(100 * scores["tag_acc"], 2),
        "dev_acc": round(100 * meta["performance"].get("tag_acc", float("nan")), 2),
        "train_seconds": round(train_s, 1), "train_cpu_seconds": round(train_cpu, 1),
        "eval_seconds": round(eval_s, 1),
        # per test sentence: correct tokens and tokens (for the paired significance of python -m projects.paper.scripts.table2)
        "test_correct": [int(c) for c in correct], "test_tokens": [int(n) for n in tokens],
        "last_log_line": last_logged_step(log),
        "budget": {k: overrides[k] for k in overrides if k.startswith("training.")},
        "threads": args.threads, "finished": time.strftime("%Y-%m-%dT%H:%M:%S"),
    }
    print(f"   test {record['test_acc']:.2f}  dev {record['dev_acc']:.2f}  "
          f"({train_s:.0f} s wall, {train_cpu:.0f} s CPU training)", flush=True)
    return record


def fingerprint(system: str, args) -> str:
    """What makes a run's result: its config file's settings and the budget options."""
    budget = {"max_epochs": args.max_epochs, "max_steps": args.max_steps, "patience": args.patience,
              "eval_frequency": args.eval_frequency}
    return config_fingerprint((args.configs / f"{system}.cfg").read_text(encoding="utf8"), budget)


def config_fingerprint(config_text: str, budget: dict) -> str:
    """12 hex digits of a SHA-256 of the config's settings (sections and keys in any order, comments left out)
    and the budget."""
    settings = json.dumps(Config().from_str(config_text, interpolate=False), sort_keys=True, default=str)
    text = settings.encode("utf8") + json.dumps(budget, sort_keys=True).encode()
    return hashlib.sha256(text).hexdigest()[:12]


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--datasets", default="all")
    p.add_argument("--systems", default="all")
    p.add_argument("--seeds", default="0,1")
    p.add_argument("--mirror", type=Path, required=True, help="the data folder (project.yml: vars.mirror)")
    p.add_argument("--max-epochs", type=int, default=30)
    p.add_argument("--max-steps", type=int, default=0)
    p.add_argument("--patience", type=int, default=2000)
    p.add_argument("--eval-frequency", type=int, default=0, help="0: about once per epoch")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--results", type=Path, default=Path("projects/paper/results/runs.jsonl"),
                   help="the runs file (JSON lines)")
    p.add_argument("--configs", type=Path, default=Path("configs"),
                   help="folder of the <system>.cfg files (a variant's folder for a screen; Table 2: configs)")
    p.add_argument("--training", type=Path, default=Path("training/reproduce"))
    p.add_argument("--significance", action="store_true",
                   help="redo the runs whose records lack per-sentence test counts (made before they were stored), "
                        "so that table2.py can test NLDM against each baseline over sentences")
    args = p.parse_args()
    keys = parse_list(args.datasets, list(DATASETS))
    systems = parse_list(args.systems, SYSTEMS)
    seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
    queue = []
    for key in keys:
        if not has_train(args.mirror, key):
            print(f"skip {key}: no train file in the mirror (the row stays in the table, marked)", flush=True)
            continue
        if not corpus_file(key, "train").exists():
            sys.exit(f"error: {corpus_file(key, 'train')} missing: run the convert commands first")
        for seed in seeds:
            for system in systems:
                queue.append(Run(f"{key}/{system}/seed{seed}", f"{key}/{system}-seed{seed}", (key, system, seed),
                                 fingerprint(system, args),
                                 required=SENTENCE_FIELDS if args.significance else ()))
    run_queue(RunsFile(args.results), queue, lambda run: train_and_test(args, *run.params))


if __name__ == "__main__":
    main()
