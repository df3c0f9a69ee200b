"""How often spaCy's gradient clipping acts on a component's updates (projects/paper/results/diagnosis.md, section 6).

    python -m projects.paper.scripts.gradient_clipping nldm_tagger sum|mean [--tok2vec-loss sum|mean|same] [--corpus ...]

Trains the factory's default model in the plain loop (``nlp.initialize``'s default optimizer, batches of
16 sentences, 2 epochs, seed 0) with ``normalize_loss`` false (sum) or true (mean) and ``tok2vec_loss``
(``same``: the head's normalisation, as in section 6; section 20), and prints the share of parameter
updates whose gradient norm exceeded ``grad_clip`` (thinc clips each parameter separately), for the whole
model and for the tok2vec and the head apart.
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
        self.inner, self.norms, self.keys = inner, [], []

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def __call__(self, key, weights, gradient, lr_scale=1.0):
        self.norms.append(float(numpy.sqrt((gradient.astype("float64") ** 2).sum())))
        self.keys.append(key)
        return self.inner(key, weights, gradient, lr_scale=lr_scale)


def main(factory: str, loss: str, tok2vec_loss: str = "same", corpus: str = "corpus/twitter/train.spacy",
         epochs: int = 2) -> None:
    torch.set_num_threads(1)
    nlp = spacy.blank("en")
    pipe = nlp.add_pipe(factory, config={"normalize_loss": loss == "mean",
                                         "tok2vec_loss": None if tok2vec_loss == "same" else tok2vec_loss})
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
    tok2vec_ids = {node.id for node in pipe.model.get_ref("tok2vec").walk()}
    in_tok2vec = numpy.array([key[0] in tok2vec_ids for key in recorder.keys])
    print(f"{factory}, loss {loss}, tok2vec loss {tok2vec_loss}, grad_clip = {clip}:")
    for part, mask in [("all", numpy.ones_like(in_tok2vec)), ("tok2vec", in_tok2vec), ("head", ~in_tok2vec)]:
        part_norms = norms[mask]
        print(f"  {part:8s} {len(part_norms):6d} parameter updates, {100 * (part_norms > clip).mean():3.0f}% clipped, "
              f"median norm {numpy.median(part_norms):.3g}")


if __name__ == "__main__":
    typer.run(main)
