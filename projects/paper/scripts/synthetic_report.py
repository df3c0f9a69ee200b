#!/usr/bin/env python3
"""Table and plot of the synthetic-data learning curve (the paper's Figure 3) from the runs file of
projects/paper/scripts/synthetic_runs.py.

Writes to --output (default projects/paper/results/synthetic/):
  table.md      test token accuracy per model and sample size: mean, std over seeds, number of seeds;
                the NLDM - CRF difference (paired by seed)
  runs.csv      one line per run (model, size, seed, test and dev accuracy, training seconds)
  accuracy.png  accuracy against sample size (log x), one line per model, error bars (std over seeds) where
                more than one seed ran

    python -m projects.paper.scripts.synthetic_report --runs-file training/synthetic/runs.jsonl --output projects/paper/results/synthetic
"""
import argparse
import csv
import math
import statistics
import sys
from collections import defaultdict
from pathlib import Path

if not __package__:  # run by path: the repository root on sys.path (for projects.paper.*), not this folder
    sys.path[0] = str(Path(__file__).resolve().parents[3])

from projects.paper.runs.records import RunsFile  # noqa: E402

ROOT = Path(__file__).resolve().parents[3]
NAMES = {"nldm": "NLDM", "crf": "Neural CRF (order 1)", "nldm_k1": "NLDM, max_dist 1 (= CRF order 1)"}
SHORT = {"nldm": "NLDM", "crf": "CRF", "nldm_k1": "NLDM-k1"}


def load_runs(runs_file: Path):
    """The finished runs of the runs file ``synthetic_runs`` writes, in key order."""
    return [r for _, r in sorted(RunsFile(runs_file).rows().items()) if r.get("test_tag_acc") is not None]


def summarise(runs, key="test_tag_acc"):
    """{(model, size): {seed: acc}} and the paired differences {size: [nldm - crf by seed]}."""
    acc = defaultdict(dict)
    for r in runs:
        if r.get(key) is not None:
            acc[(r["model"], r["size"])][r["seed"]] = float(r[key])
    diffs = {}
    for size in sorted({s for _, s in acc}):
        a, b = acc.get(("nldm", size), {}), acc.get(("crf", size), {})
        common = sorted(set(a) & set(b))
        if common:
            diffs[size] = [a[s] - b[s] for s in common]
    return acc, diffs


def word_majority_baseline(corpus: Path) -> float:
    """Test accuracy of tagging each word with its most frequent label in train (the most frequent label
    overall for unseen words): what the words alone give, without any context."""
    from collections import Counter

    from spacy.tokens import DocBin
    from spacy.vocab import Vocab

    vocab = Vocab()
    by_word = defaultdict(Counter)
    overall = Counter()
    for doc in DocBin().from_disk(corpus / "train.spacy").get_docs(vocab):
        for t in doc:
            by_word[t.text][t.tag_] += 1
            overall[t.tag_] += 1
    default = overall.most_common(1)[0][0]
    best = {w: c.most_common(1)[0][0] for w, c in by_word.items()}
    right = total = 0
    for doc in DocBin().from_disk(corpus / "test.spacy").get_docs(vocab):
        for t in doc:
            right += best.get(t.text, default) == t.tag_
            total += 1
    return right / total


def mean_std(xs):
    m = statistics.fmean(xs)
    s = statistics.stdev(xs) if len(xs) > 1 else float("nan")
    return m, s


def fmt(xs, scale=100.0):
    if not xs:
        return "-"
    m, s = mean_std(xs)
    if len(xs) > 1:
        return f"{m * scale:.2f} ± {s * scale:.2f} ({len(xs)})"
    return f"{m * scale:.2f} (1)"


def _diff_cell(d):
    if not d:
        return "-"
    m, s = mean_std(d)
    wins = sum(x > 0 for x in d)
    return f"{m * 100:+.2f}" + (f" ± {s * 100:.2f}" if len(d) > 1 else "") + f" ({wins}/{len(d)})"


def write_table(acc, diffs, runs, path: Path, baselines=None, held=None, held_diffs=None, held_n=None,
                post=None, post_diffs=None, code_note="") -> str:
    sizes = sorted({s for _, s in acc})
    models = [m for m in ("nldm", "crf") if any((m, s) in acc for s in sizes)]
    baselines = baselines or {}
    held = held or {}
    held_diffs = held_diffs or {}
    lines = [
        "# Synthetic infinite-order HMM data: token accuracy (%)",
        "",
        "Mean ± standard deviation over training seeds (number of seeds in brackets). The data of each size is",
        "fixed (model and data seed 0); the seeds change the initialisation and the batch order.",
        "`NLDM - CRF` is the difference paired by seed, with the number of seeds where NLDM is ahead.",
        "*Test split*: the size's own 10% test split (the paper's protocol; 100 sequences at 1k).",
        f"*Held-out*: {held_n or 'N'} fresh sequences from the same model (sample seed 1000), the same for every",
        "size, so that its figures are not limited by the small test splits.",
        "*Word majority*: each test-split word tagged with its most frequent label in train (no context).",
        "Produced by `projects/paper/scripts/synthetic_report.py` from the runs of `projects/paper/scripts/synthetic_runs.py`.",
        "",
        "| samples | train / test seq. | "
        + " | ".join(f"{NAMES[m]}, test split" for m in models)
        + " | NLDM - CRF, test split | "
        + " | ".join(f"{NAMES[m]}, held-out" for m in models)
        + " | NLDM - CRF, held-out | word majority |",
        "|---:|---:|" + "---:|" * (2 * len(models) + 3),
    ]
    for size in sizes:
        n_train = int(round(0.8 * size))
        n_test = size - n_train - int(round(0.1 * size))
        cells = [fmt(list(acc.get((m, size), {}).values())) for m in models]
        hcells = [fmt(list(held.get((m, size), {}).values())) for m in models]
        base = f"{100 * baselines[size]:.2f}" if size in baselines else "-"
        lines.append(
            f"| {size:,} | {n_train:,} / {n_test:,} | " + " | ".join(cells) + f" | {_diff_cell(diffs.get(size))} | "
            + " | ".join(hcells) + f" | {_diff_cell(held_diffs.get(size))} | {base} |"
        )
    post = post or {}
    post_diffs = post_diffs or {}
    if any(m in ("nldm", "crf") for m, _ in post):
        lines += [
            "",
            "Diagnostic (`projects/paper/scripts/synthetic_posterior.py`): the same models on the held-out set with *posterior*",
            "decoding (arg-max of each token's label marginal; for NLDM summed over all latent trees) instead of",
            "Viterbi (the CRF's exact MAP; for NLDM the paper's approximate MAP, the best labels and tree jointly).",
            "",
            "| samples | " + " | ".join(f"{NAMES[m]}, held-out, posterior" for m in models) + " | NLDM - CRF |",
            "|---:|" + "---:|" * (len(models) + 1),
        ]
        for size in sizes:
            cells = [fmt(list(post.get((m, size), {}).values())) for m in models]
            lines.append(f"| {size:,} | " + " | ".join(cells) + f" | {_diff_cell(post_diffs.get(size))} |")
    variants = sorted({m for m, _ in acc} - {"nldm", "crf"})
    if variants:
        lines += [
            "",
            "Diagnostic variants (same encoder, schedule and data; projects/paper/configs/synthetic_<variant>.cfg). NLDM with",
            "`max_dist = 1` can only build the chain 0->1->...->n, so it is a first-order CRF in NLDM's code path:",
            "it tells whether NLDM's gap to the CRF comes from the latent trees or from the implementation.",
            "",
            "| variant | samples | test split | held-out | held-out, posterior |",
            "|---|---:|---:|---:|---:|",
        ]
        for m in variants:
            for size in sizes:
                if (m, size) in acc:
                    lines.append(
                        f"| {NAMES.get(m, m)} | {size:,} | {fmt(list(acc[(m, size)].values()))} | "
                        f"{fmt(list(held.get((m, size), {}).values()))} | {fmt(list(post.get((m, size), {}).values()))} |"
                    )
    fps = sorted({r.get("code_fingerprint", "?") for r in runs})
    heads = sorted({r.get("git_head", "?") for r in runs})
    secs = defaultdict(list)
    for r in runs:
        secs[(r["model"], r["size"])].append(r.get("train_seconds", float("nan")))
    lines += [
        "",
        "Mean training time per run (s, 1 thread, shared 2-core CPU): "
        + "; ".join(
            f"{SHORT.get(m, m)} {s:,}: {statistics.fmean(v):.0f}"
            for (m, s), v in sorted(secs.items(), key=lambda kv: (kv[0][1], kv[0][0]))
        )
        + ".",
        f"Runs: {len(runs)}; git HEAD at the runs: {', '.join(heads)}; model-code fingerprint(s): {', '.join(fps)}."
        + (f" {code_note}" if code_note else ""),
        "",
    ]
    text = "\n".join(lines)
    path.write_text(text, encoding="utf8")
    return text


def write_csv(runs, path: Path) -> None:
    keys = ["model", "size", "seed", "data_seed", "test_tag_acc", "heldout_tag_acc", "dev_tag_acc",
            "test_tag_acc_posterior", "heldout_tag_acc_posterior", "train_seconds",
            "last_logged_step", "code_fingerprint", "git_head", "finished"]
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=keys, extrasaction="ignore")
        w.writeheader()
        for r in sorted(runs, key=lambda r: (r["size"], r["model"], r["seed"])):
            w.writerow(r)


def _panel(ax, acc, title):
    styles = {"nldm": dict(marker="o", color="tab:red"), "crf": dict(marker="s", color="tab:blue")}
    for model in ("nldm", "crf"):
        sizes = sorted(s for m, s in acc if m == model)
        if not sizes:
            continue
        ms, es = [], []
        for s in sizes:
            m, sd = mean_std(list(acc[(model, s)].values()))
            ms.append(100 * m)
            es.append(100 * sd if not math.isnan(sd) else 0.0)
        n_seeds = sorted({len(acc[(model, s)]) for s in sizes})
        count = str(n_seeds[0]) if len(n_seeds) == 1 else f"{n_seeds[0]}-{n_seeds[-1]}"
        label = f"{NAMES[model]} ({count} seed{'s' if max(n_seeds) > 1 else ''}{' per size' if len(n_seeds) > 1 else ''})"
        if any(len(acc[(model, s)]) > 1 for s in sizes):
            ax.errorbar(sizes, ms, yerr=es, capsize=3, label=label, **styles[model])
        else:
            ax.plot(sizes, ms, label=label, **styles[model])
    ax.set_xscale("log")
    all_sizes = sorted({s for _, s in acc})
    ax.set_xticks(all_sizes)
    ax.set_xticklabels([f"{s // 1000}k" if s % 1000 == 0 else str(s) for s in all_sizes])
    ax.minorticks_off()
    ax.set_xlabel("number of samples (80% train)")
    ax.set_ylabel("token accuracy (%)")
    ax.set_title(title, fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)


def write_plot(acc, path: Path, held=None, held_n=None) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [(acc, "test split (10% of each size)")]
    if held:
        panels.append((held, f"held-out set ({held_n or 'N'} sequences, same for all sizes)"))
    fig, axes = plt.subplots(1, len(panels), figsize=(5.2 * len(panels), 3.8), dpi=150, squeeze=False)
    for ax, (a, title) in zip(axes[0], panels):
        _panel(ax, a, title)
    fig.suptitle("Synthetic infinite-order HMM data: NLDM vs neural CRF (error bars: std over seeds)", fontsize=10)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs-file", type=Path, default=ROOT / "training" / "synthetic" / "runs.jsonl")
    p.add_argument("--output", type=Path, default=ROOT / "projects" / "paper" / "results" / "synthetic")
    p.add_argument("--skip-posterior", action="store_true", help="leave out the posterior-decoding diagnostic")
    p.add_argument("--code-note", default="", help="a sentence on the code the runs used, for the table's footer")
    p.add_argument("--corpus-dir", type=Path, default=ROOT / "corpus" / "synth",
                   help="where <size>/train.spacy and test.spacy are, for the word-majority baseline")
    args = p.parse_args()
    runs = load_runs(args.runs_file)
    if not runs:
        raise SystemExit(f"no finished runs in {args.runs_file}")
    args.output.mkdir(parents=True, exist_ok=True)
    acc, diffs = summarise(runs)
    held, held_diffs = summarise(runs, "heldout_tag_acc")
    held_n = next((r.get("heldout_sequences") for r in runs if r.get("heldout_sequences")), None)
    baselines = {}
    for size in sorted({s for _, s in acc}):
        if (args.corpus_dir / str(size) / "test.spacy").exists():
            baselines[size] = word_majority_baseline(args.corpus_dir / str(size))
    post, post_diffs = ({}, {}) if args.skip_posterior else summarise(runs, "heldout_tag_acc_posterior")
    text = write_table(acc, diffs, runs, args.output / "table.md", baselines, held, held_diffs, held_n,
                       post, post_diffs, args.code_note)
    write_csv(runs, args.output / "runs.csv")
    write_plot(acc, args.output / "accuracy.png", held, held_n)
    print(text)
    print(f"wrote {args.output / 'table.md'}, {args.output / 'runs.csv'}, {args.output / 'accuracy.png'}")


if __name__ == "__main__":
    main()
