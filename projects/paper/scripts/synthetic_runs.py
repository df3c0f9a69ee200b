#!/usr/bin/env python3
"""Train and evaluate NLDM and the first-order neural CRF on the synthetic data (paper, section 6.2).

For each seed, then each size, then each model: generate the corpus if it is missing
(``corpus/synth/<size>``, data seed fixed by --data-seed, so every model and training seed sees the same data),
``spacy train projects/paper/configs/synthetic_<model>.cfg`` with ``--system.seed <seed>``, then ``spacy evaluate
model-best`` on the test split (``--gold-preproc``). One row per run (key ``<model>-<size>-s<seed>``) goes to the
runs file --runs-file; a run with a row is skipped, so the script can be stopped and started again. ``--stop-at
HH:MM`` (UTC) starts no run after that time. Several copies can run at once on the same files: each claims a run
with a lock file (holding its pid) before starting it (``projects/paper/runs/queue.py``, shared with reproduce.py).

    python -m projects.paper.scripts.synthetic_runs --sizes 1000 3000 10000 --seeds 0 1 2
"""
import argparse
import datetime as dt
import hashlib
import json
import subprocess
import sys
import time
from pathlib import Path

if not __package__:  # run by path: the repository root on sys.path (for projects.paper.*), not this folder
    sys.path[0] = str(Path(__file__).resolve().parents[3])

from projects.paper.registry import STUDY_CONFIGS  # noqa: E402
from projects.paper.runs.queue import Run, last_logged_step, parse_overrides, run_queue, spacy_evaluate, spacy_train
from projects.paper.runs.records import RunsFile

ROOT = Path(__file__).resolve().parents[3]
CODE_DIRS = ("spacy_nldm/structs", "spacy_nldm/models", "spacy_nldm/pipeline")


def code_fingerprint() -> str:
    """Hash of the model code, to tell which runs were made with which version of it."""
    h = hashlib.sha256()
    for d in CODE_DIRS:
        for path in sorted((ROOT / d).rglob("*.py")):
            h.update(str(path.relative_to(ROOT)).encode())
            h.update(path.read_bytes())
    return h.hexdigest()[:12]


def git_head() -> str:
    try:
        return subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True
        ).stdout.strip()
    except Exception:  # pragma: no cover
        return "unknown"


def ensure_corpus(size: int, data_seed: int, corpus_dir: Path) -> Path:
    out = corpus_dir / str(size)
    settings = out / "settings.json"
    if settings.exists():
        meta = json.loads(settings.read_text())
        if meta["settings"]["n_samples"] == size and meta["settings"]["seed"] == data_seed:
            return out
    subprocess.run(
        [sys.executable, "-m", "projects.paper", "synth", "--samples", str(size), "--seed", str(data_seed),
         "--output", str(out)],
        cwd=ROOT, check=True,
    )
    return out


def ensure_heldout(n: int, data_seed: int, sample_seed: int, corpus_dir: Path) -> Path:
    """A large test set from the same model (same --seed), other samples (--sample-seed): every run, whatever
    its size, is also scored on it, so that the comparison is not limited by a 100-sequence test split."""
    path = corpus_dir / f"heldout-{n}-s{data_seed}-{sample_seed}" / "heldout.spacy"
    if not path.exists():
        from projects.paper.synthetic import SynthSettings, generate, write_heldout

        write_heldout(generate(SynthSettings(n_samples=n, seed=data_seed, sample_seed=sample_seed)), path)
    return path


def past(stop_at: str) -> bool:
    if not stop_at:
        return False
    hh, mm = (int(x) for x in stop_at.split(":"))
    now = dt.datetime.now(dt.timezone.utc)
    return (now.hour, now.minute) >= (hh, mm)


def run_one(model: str, size: int, seed: int, args) -> dict:
    """Train one model at one size and seed, test it on the size's test split and the held-out set."""
    corpus = ensure_corpus(size, args.data_seed, args.corpus_dir)
    name = f"{model}-{size}-s{seed}"
    out_dir = args.train_dir / name
    log = args.train_dir / f"{name}.log"
    overrides = {"paths.train": str(corpus / "train.spacy"), "paths.dev": str(corpus / "dev.spacy"),
                 "system.seed": str(seed), **parse_overrides(args.overrides)}
    fingerprint = code_fingerprint()
    train_s, _ = spacy_train(ROOT / STUDY_CONFIGS / f"synthetic_{model}.cfg", out_dir, overrides, log,
                             threads=args.threads, cwd=ROOT)
    t1 = time.time()
    scores = spacy_evaluate(out_dir / "model-best", corpus / "test.spacy", log, threads=args.threads, cwd=ROOT)
    eval_s = time.time() - t1
    heldout_scores = {}
    if args.heldout:
        heldout = ensure_heldout(args.heldout, args.data_seed, args.heldout_sample_seed, args.corpus_dir)
        heldout_scores = spacy_evaluate(out_dir / "model-best", heldout, log, threads=args.threads, cwd=ROOT)
    meta_path = out_dir / "model-best" / "meta.json"
    best = json.loads(meta_path.read_text()).get("performance", {}) if meta_path.exists() else {}
    last = last_logged_step(log)
    result = {
        "model": model,
        "size": size,
        "seed": seed,
        "data_seed": args.data_seed,
        "test_tag_acc": scores.get("tag_acc"),
        "dev_tag_acc": best.get("tag_acc"),
        "test_scores": scores,
        "heldout_tag_acc": heldout_scores.get("tag_acc"),
        "heldout_sequences": args.heldout or None,
        "train_seconds": round(train_s, 1),
        "eval_seconds": round(eval_s, 1),
        "last_logged_step": int(last[1]) if last else None,
        "overrides": args.overrides,
        "code_fingerprint": fingerprint,
        "git_head": git_head(),
        "finished": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
    }
    print(f"  {model} {size} s{seed}: test tag_acc {result['test_tag_acc']:.4f} "
          f"(dev {result['dev_tag_acc']}), train {result['train_seconds']}s", flush=True)
    return result


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", type=int, nargs="+", default=[1000, 3000, 10000])
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--models", nargs="+", default=["nldm", "crf"],
                   help="names <m> of projects/paper/configs/synthetic_<m>.cfg (nldm, crf; nldm_k1 is a diagnostic)")
    p.add_argument("--data-seed", type=int, default=0)
    p.add_argument("--corpus-dir", type=Path, default=ROOT / "corpus" / "synth")
    p.add_argument("--train-dir", type=Path, default=ROOT / "training" / "synthetic")
    p.add_argument("--runs-file", type=Path, default=ROOT / "training" / "synthetic" / "runs.jsonl",
                   help="the runs file (JSON lines), read by synthetic_report and synthetic_posterior")
    p.add_argument("--heldout", type=int, default=10000,
                   help="also score each run on this many fresh sequences of the same model (0: no)")
    p.add_argument("--heldout-sample-seed", type=int, default=1000)
    p.add_argument("--threads", type=int, default=1, help="torch threads per run (OMP_NUM_THREADS)")
    p.add_argument("--data-only", action="store_true", help="only generate the corpora and the held-out set")
    p.add_argument("--stop-at", default="", help="UTC HH:MM after which no new run starts")
    # any other option is passed on to spacy train, e.g. --training.max_steps 500
    args, unknown = p.parse_known_args()
    args.overrides = unknown
    for model in args.models:
        if not (ROOT / STUDY_CONFIGS / f"synthetic_{model}.cfg").exists():
            p.error(f"no projects/paper/configs/synthetic_{model}.cfg")
    args.train_dir.mkdir(parents=True, exist_ok=True)
    if args.data_only:
        for size in args.sizes:
            print(f"corpus {ensure_corpus(size, args.data_seed, args.corpus_dir)}", flush=True)
        if args.heldout:
            print(f"held-out {ensure_heldout(args.heldout, args.data_seed, args.heldout_sample_seed, args.corpus_dir)}")
        return
    queue = [
        Run(f"{model} size {size} seed {seed}", f"{model}-{size}-s{seed}", (model, size, seed))
        for seed in args.seeds for size in args.sizes for model in args.models
    ]
    run_queue(RunsFile(args.runs_file), queue, lambda run: run_one(*run.params, args),
              stop=lambda: f"past {args.stop_at} UTC" if past(args.stop_at) else None)


if __name__ == "__main__":
    main()
