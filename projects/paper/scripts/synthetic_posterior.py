#!/usr/bin/env python3
"""Diagnostic: score the trained synthetic-data models again with posterior decoding (the arg-max of each
token's label marginal) instead of the configured Viterbi decoding, on the test split and the held-out set.

For the CRF, Viterbi is the exact MAP label sequence; for NLDM it is the paper's approximate MAP (the best
labels *and* tree jointly), and the label marginals sum over all trees. The figures are added to each run's
row of the runs file (a row more, the last of its key wins) as ``test_tag_acc_posterior`` and
``heldout_tag_acc_posterior`` (runs that have them are skipped).

    python -m projects.paper.scripts.synthetic_posterior --runs-file training/synthetic/runs.jsonl --models training/synthetic
"""
import argparse
import sys
from pathlib import Path

if not __package__:  # run by path: the repository root on sys.path (for projects.paper.*), not this folder
    sys.path[0] = str(Path(__file__).resolve().parents[3])

from projects.paper.runs.records import RunsFile  # noqa: E402

ROOT = Path(__file__).resolve().parents[3]


def accuracy(nlp, path: Path) -> float:
    from spacy.tokens import Doc, DocBin
    from spacy.training import Example

    refs = list(DocBin().from_disk(path).get_docs(nlp.vocab))
    examples = [Example(Doc(nlp.vocab, words=[t.text for t in r], spaces=[bool(t.whitespace_) for t in r]), r)
                for r in refs]
    return float(nlp.evaluate(examples)["tag_acc"])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs-file", type=Path, default=ROOT / "training" / "synthetic" / "runs.jsonl")
    p.add_argument("--models", type=Path, default=ROOT / "training" / "synthetic",
                   help="synthetic_runs' --train-dir: <models>/<key>/model-best")
    p.add_argument("--corpus-dir", type=Path, default=ROOT / "corpus" / "synth")
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args()
    import torch

    torch.set_num_threads(args.threads)
    import spacy

    runs_file = RunsFile(args.runs_file)
    for key, run in runs_file.rows().items():
        if "heldout_tag_acc_posterior" in run or "model" not in run:
            continue
        model_dir = args.models / key / "model-best"
        if not model_dir.exists():
            continue
        nlp = spacy.load(model_dir, config={"components": {"tagger": {"decode": "posterior"}}})
        corpus = args.corpus_dir / str(run["size"])
        run["test_tag_acc_posterior"] = accuracy(nlp, corpus / "test.spacy")
        n = run.get("heldout_sequences")
        if n:
            held = args.corpus_dir / f"heldout-{n}-s{run.get('data_seed', 0)}-1000" / "heldout.spacy"
            run["heldout_tag_acc_posterior"] = accuracy(nlp, held)
        runs_file.add(run)  # the run's row again, with the posterior's figures: the last row of a key wins
        print(
            f"{key}: test viterbi {run['test_tag_acc']:.4f} posterior {run['test_tag_acc_posterior']:.4f}; "
            f"held-out viterbi {run.get('heldout_tag_acc')} posterior {run.get('heldout_tag_acc_posterior')}",
            flush=True,
        )


if __name__ == "__main__":
    main()
