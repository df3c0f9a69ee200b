"""Training speed of the entity components on full and on partial annotation, side by side in one process.

    OMP_NUM_THREADS=1 python -m projects.paper.scripts.partial_speed corpus/ner/wnut17/train.spacy \\
        corpus/ner/wnut17_half_unknown/train.spacy corpus/ner/wnut17_half_incorrect/train.spacy

(the other corpora from ``scripts/partial_entities.py``: half the entities removed, their tokens unknown, and
the same with an incorrect span on each). Each factory (``crf_ner``, ``nldm_ner``, defaults, on ``bench
pipeline``'s CNN encoder) trains on the first ``--limit`` sentences of each corpus in batches of about 1,000
words, after one untimed batch; printed: words per second of process CPU time and each corpus's ratio to the
first. With unknown tokens the loss's numerator is a sum over the labels they allow (log S under a label mask);
incorrect spans add one log S per set of them that can hold together in a sentence.
"""
import time
from pathlib import Path
from typing import List

import typer


def main(corpora: List[Path] = typer.Argument(..., help="DocBins of the same docs: full annotation first, then "
                                                         "readings with some of it unknown"),
         factories: str = typer.Option("crf_ner,nldm_ner", help="Comma-separated entity factories"),
         limit: int = typer.Option(600, help="Sentences of each corpus"),
         seed: int = typer.Option(0, help="Seed of the weights")) -> None:
    import spacy
    import torch
    from spacy.training import Corpus
    from thinc.api import fix_random_seed

    from spacy_nldm.cli.bench_pipeline import batches, encoder

    torch.set_num_threads(1)
    names = [path.parent.name for path in corpora]
    print("| factory | " + " | ".join(f"{name} w/s" for name in names) + " | "
          + " | ".join(f"{name} / {names[0]}" for name in names[1:]) + " |")
    print("|---|" + "---|" * (2 * len(names) - 1))
    for factory in factories.split(","):
        speeds: List[float] = []
        for path in corpora:
            fix_random_seed(seed)
            nlp = spacy.blank("en")
            nlp.add_pipe(factory, config={"model": {"tok2vec": encoder("cnn", 96)}})
            examples = list(Corpus(str(path), gold_preproc=True)(nlp))[:limit]
            optimizer = nlp.initialize(lambda: examples)
            parts = list(batches(examples, 1000))
            nlp.update(parts[0], sgd=optimizer)  # untimed: first-call costs
            start = time.process_time()
            for batch in parts[1:]:
                nlp.update(batch, sgd=optimizer)
            speeds.append(sum(len(eg) for batch in parts[1:] for eg in batch) / (time.process_time() - start))
        print(f"| {factory} | " + " | ".join(f"{v:.0f}" for v in speeds) + " | "
              + " | ".join(f"{v / speeds[0]:.2f}" for v in speeds[1:]) + " |", flush=True)


if __name__ == "__main__":
    typer.run(main)
