"""Dev and test accuracy of trained pipelines under each decoder of their structured component.

Each pipeline is loaded once per decoder with every structured component's setting overridden at load time
(``paired_bootstrap.load_pipeline``) and scored with ``nlp.evaluate`` on the
dev and test DocBins (gold tokenisation). Prints one row per pipeline and the means (projects/paper/results/diagnosis.md §33).

    python -m projects.paper.scripts.decoder_scores training/glove_bilstm-tuned/twitter/nldm/seed{0,1,2,3,4}/model-best
"""
import argparse
import sys
from pathlib import Path

if not __package__:  # run by path: the repository root on sys.path (for projects.paper.*), not this folder
    sys.path[0] = str(Path(__file__).resolve().parents[3])


DECODERS = ("posterior", "viterbi")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("models", nargs="+", type=Path, help="trained pipelines (model-best folders)")
    p.add_argument("--corpus", type=Path, default=Path("corpus/twitter"), help="folder with dev.spacy and test.spacy")
    p.add_argument("--score", default="tag_acc", help="the score to report (tag_acc, or pos_acc for attr pos)")
    args = p.parse_args()

    import torch
    from spacy.training import Corpus

    from projects.paper.scripts.paired_bootstrap import load_pipeline

    torch.set_num_threads(1)
    for split in ("dev", "test"):
        if not (args.corpus / f"{split}.spacy").exists():
            raise SystemExit(f"error: {args.corpus / f'{split}.spacy'} not found")
    columns = [f"{decode} {split}" for decode in DECODERS for split in ("dev", "test")]
    print("| model | " + " | ".join(columns) + " |")
    print("|---" * (len(columns) + 1) + "|")
    totals = [0.0] * len(columns)
    for model in args.models:
        row = []
        for decode in DECODERS:
            try:
                nlp = load_pipeline(model, decode)
            except (OSError, ValueError, KeyError) as err:
                raise SystemExit(f"error: cannot load {model} with decode = {decode}: {err}")
            for split in ("dev", "test"):
                examples = list(Corpus(args.corpus / f"{split}.spacy", gold_preproc=True)(nlp))
                row.append(100 * nlp.evaluate(examples)[args.score])
        totals = [t + v for t, v in zip(totals, row)]
        print(f"| {model} | " + " | ".join(f"{v:.2f}" for v in row) + " |", flush=True)
    print(f"| mean of {len(args.models)} | " + " | ".join(f"{t / len(args.models):.2f}" for t in totals) + " |")


if __name__ == "__main__":
    main()
