"""How often spaCy's gradient clipping acts on a component's updates (results/diagnosis.md, section 6).

    python scripts/gradient_clipping.py nldm_tagger sum|mean [--corpus corpus/twitter/train.spacy]

Trains the factory's default model in the plain loop (``nlp.initialize``'s default optimizer, batches of
16 sentences, 2 epochs, seed 0) with ``normalize_loss`` false (sum) or true (mean), and prints the share
of parameter updates whose gradient norm exceeded ``grad_clip`` (thinc clips each parameter separately).
"""
import random

import numpy
import spacy
import torch
import typer
from spacy.tokens import Doc, DocBin
from spacy.training import Example


class NormRecorder:
    """An optimizer stand-in that records each gradient's norm and hands the update on."""

    def __init__(self, inner):
        self.inner, self.norms = inner, []

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def __call__(self, key, weights, gradient, lr_scale=1.0):
        self.norms.append(float(numpy.sqrt((gradient.astype("float64") ** 2).sum())))
        return self.inner(key, weights, gradient, lr_scale=lr_scale)


def main(factory: str, loss: str, corpus: str = "corpus/twitter/train.spacy", epochs: int = 2) -> None:
    torch.set_num_threads(1)
    nlp = spacy.blank("en")
    nlp.add_pipe(factory, config={"normalize_loss": loss == "mean"})
    gold = list(DocBin().from_disk(corpus).get_docs(nlp.vocab))
    examples = [Example(Doc(nlp.vocab, words=[t.text for t in doc]), doc) for doc in gold]
    recorder = NormRecorder(nlp.initialize(lambda: examples))
    clip = recorder.inner.grad_clip
    random.seed(0)
    for _ in range(epochs):
        random.shuffle(examples)
        for i in range(0, len(examples), 16):
            nlp.update(examples[i:i + 16], sgd=recorder)
    norms = numpy.array(recorder.norms)
    print(f"{factory}, loss {loss}: {len(norms)} parameter updates, {100 * (norms > clip).mean():.0f}% clipped "
          f"(norm > grad_clip = {clip}), median norm {numpy.median(norms):.3g}")


if __name__ == "__main__":
    typer.run(main)
