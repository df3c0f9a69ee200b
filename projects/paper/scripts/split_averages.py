"""Which part's averaging recovers the final weights' loss on Pl (projects/paper/results/diagnosis.md, section 16)?

Trains one system with ``projects.paper.runs.loop.train`` (the loop of ``python -m projects.paper accuracy``) under spaCy's
default optimizer with averages kept (which does not change the updates), and scores the test split with: the
final weights; all weights averaged; only the torch head averaged; only its label interactions (every head
parameter but the emission W, b); only the tok2vec (everything but the head). Prints one JSON line.

    python projects/paper/scripts/split_averages.py pl nldm_tagger 2
"""
import json
import sys
from pathlib import Path

import spacy

if not __package__:  # run by path: the repository root on sys.path (for projects.paper.*), not this folder
    sys.path[0] = str(Path(__file__).resolve().parents[3])

from projects.paper.runs.loop import RunSpec, is_emission, train


def main(dataset: str, factory: str, seed: int) -> None:
    optimizer = {**spacy.blank("en").config["training"]["optimizer"], "use_averages": True}
    spec = RunSpec(dataset=dataset, system=f"{factory}, averages kept", factory=factory, seed=seed, optimizer=optimizer)
    nlp, sgd, test, *_ = train(spec)
    shim_ids = {shim.id for node in nlp.get_pipe("tagger").model.walk() for shim in node.shims}
    head = {k: v for k, v in sgd.averages.items() if isinstance(k, tuple) and k[0] in shim_ids}
    interactions = {k: v for k, v in head.items() if not is_emission(k[1])}
    tok2vec = {k: v for k, v in sgd.averages.items() if k not in head}

    def acc(params=None):
        if params is None:
            return round(100 * nlp.evaluate(test)["tag_acc"], 2)
        with nlp.use_params(params):
            return round(100 * nlp.evaluate(test)["tag_acc"], 2)

    print(json.dumps({"dataset": dataset, "factory": factory, "seed": seed, "final": acc(),
                      "all averaged": acc(sgd.averages), "head averaged": acc(head),
                      "interactions averaged": acc(interactions), "tok2vec averaged": acc(tok2vec),
                      "head parameters": sorted(k[1] for k in head)}))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]))
