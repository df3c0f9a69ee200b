"""Which part's averaging recovers the final weights' loss on Pl (results/diagnosis.md, section 16)?

Trains one system as ``spacy_nldm.cli.accuracy_loop`` does (spaCy's default optimizer, averages kept, which
does not change the updates) and scores the held-out split with: the final weights; all weights averaged;
only the torch head averaged; only its label interactions (every head parameter but the emission W, b);
only the tok2vec (everything but the head). Prints one JSON line.

    python results/diagnosis/split_averages.py pl nldm_tagger 2
"""
import json
import random
import sys
from pathlib import Path

import spacy
import torch
from spacy.util import fix_random_seed, minibatch, registry

from spacy_nldm.cli.accuracy_loop import DATASETS, _examples

ADAM = {"@optimizers": "Adam.v1", "learn_rate": 0.001, "beta1": 0.9, "beta2": 0.999, "L2_is_weight_decay": True,
        "L2": 0.01, "grad_clip": 1.0, "use_averages": True, "eps": 1e-8}


def main(dataset: str, factory: str, seed: int, epochs: int = 10, batch_size: int = 16) -> None:
    torch.set_num_threads(1)
    fix_random_seed(seed)
    info = DATASETS[dataset]
    nlp = spacy.blank(info["lang"])
    nlp.add_pipe(factory, name="tagger", config={"attr": "tag"})
    root = Path("corpus") / info["path"]
    train, test = _examples(nlp, root / "train.spacy"), _examples(nlp, root / "test.spacy")
    sgd = registry.resolve({"optimizer": ADAM})["optimizer"]
    sgd = nlp.initialize(lambda: train, sgd=sgd)
    rng = random.Random(seed)
    for _ in range(epochs):
        order = list(train)
        rng.shuffle(order)
        for batch in minibatch(order, size=batch_size):
            nlp.update(batch, sgd=sgd)
    shim_ids = {shim.id for node in nlp.get_pipe("tagger").model.walk() for shim in node.shims}
    head = {k: v for k, v in sgd.averages.items() if isinstance(k, tuple) and k[0] in shim_ids}
    interactions = {k: v for k, v in head.items() if k[1].rsplit(".", 1)[-1] not in ("W", "b")}
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
