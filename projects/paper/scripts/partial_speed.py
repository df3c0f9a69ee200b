"""Training speed of the entity components on full and on partial annotation, side by side in one process.

    OMP_NUM_THREADS=1 python -m projects.paper.scripts.partial_speed corpus/ner/wnut17/train.spacy \\
        corpus/ner/wnut17_half_unknown/train.spacy

(the second corpus from ``scripts/partial_entities.py``: half the entities removed, their tokens unknown).
Each factory (``crf_ner``, ``nldm_ner``, defaults, on ``bench pipeline``'s CNN encoder) trains on the first
``--limit`` sentences of each corpus in batches of about 1,000 words, after one untimed batch; printed: words
per second of process CPU time and the partial / full ratio. With unknown tokens the loss's numerator is a sum
over the labels they allow (log S under a label mask), the only difference between the two runs.
"""
import time
from pathlib import Path
from typing import List

import typer


def main(full: Path = typer.Argument(..., help="DocBin with full annotation"),
         partial: Path = typer.Argument(..., help="DocBin of the same docs with some annotation unknown"),
         factories: str = typer.Option("crf_ner,nldm_ner", help="Comma-separated entity factories"),
         limit: int = typer.Option(600, help="Sentences of each corpus"),
         seed: int = typer.Option(0, help="Seed of the weights")) -> None:
    import spacy
    import torch
    from spacy.training import Corpus
    from thinc.api import fix_random_seed

    from spacy_nldm.cli.bench_pipeline import batches, encoder

    torch.set_num_threads(1)
    print("| factory | full w/s | partial w/s | partial / full |")
    print("|---|---|---|---|")
    for factory in factories.split(","):
        speeds: List[float] = []
        for path in (full, partial):
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
        print(f"| {factory} | {speeds[0]:.0f} | {speeds[1]:.0f} | {speeds[1] / speeds[0]:.2f} |", flush=True)


if __name__ == "__main__":
    typer.run(main)
