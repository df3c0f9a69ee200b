"""Where a tagger's tagging time goes: its model, its head's decoding and its annotations, timed apart.

    OMP_NUM_THREADS=1 python -m projects.paper.scripts.head_profile ../shared/data/twitter_pos/oct27.traindev

Each system of ``bench pipeline`` (same builders, same encoder) trains a few batches (untimed: the weights only
need to be away from their start), then tags the file in batches of 256 docs, calling the component's three
steps itself: ``token_scores`` (the model: encoder and scorer), ``predict_scored`` (the head: the structure's
decoding, for ``nldm`` its label marginals, posterior arg-max and canonical tree) and ``set_annotations``.
Printed: microseconds a word of each step, the best of ``--rounds`` rounds (systems interleaved), and the
whole ``nlp.pipe`` beside them. ``--breakdown`` then splits each NLDM system's ``predict_scored`` into the
functions of ``spacy_nldm.structs`` it calls, timed by wrappers put around them for this run only: the label
marginals' kernel (``compiled_subtrees.inside_outside``), the rest of ``label_marginals`` (the inputs' checks,
packing the scores for the kernel, the padded result and its normalisation), the canonical tree
(``canonical_heads``), the segments (``segment_scores``) and what is left (the posterior arg-max, conversions).
"""
import time
from contextlib import contextmanager
from functools import wraps
from pathlib import Path
from typing import Dict

import typer


#: (label, module, attribute) of the functions --breakdown times, outermost first
TIMED = (("label marginals", "spacy_nldm.structs", "label_marginals"),
         ("kernel", "spacy_nldm.structs.compiled_subtrees", "inside_outside"),
         ("canonical tree", "spacy_nldm.structs", "canonical_heads"),
         ("segments", "spacy_nldm.pipeline.tagger", "StructuredTagger.segment_scores"))


@contextmanager
def timers(took: Dict[str, float]):
    """Wrap the functions of TIMED so that each call adds its seconds to ``took[label]``; restored on exit."""
    import importlib

    saved = []
    for label, module, attr in TIMED:
        owner = importlib.import_module(module)
        *path, name = attr.split(".")
        for part in path:
            owner = getattr(owner, part)
        original = getattr(owner, name)

        def timed(*args, _f=original, _label=label, **kwargs):
            start = time.perf_counter()
            try:
                return _f(*args, **kwargs)
            finally:
                took[_label] = took.get(_label, 0.0) + time.perf_counter() - start

        setattr(owner, name, wraps(original)(timed))
        saved.append((owner, name, original))
    try:
        yield took
    finally:
        for owner, name, original in saved:
            setattr(owner, name, original)


def breakdown(component, batches, scores, rounds: int) -> Dict[str, float]:
    """Seconds of ``predict_scored`` over the batches and of each function of TIMED in it (the best round of
    each), with "label marginals" less its kernel, and "rest" for what none of them takes."""
    best: Dict[str, float] = {}
    for _ in range(rounds):
        took: Dict[str, float] = {}
        with timers(took):
            start = time.perf_counter()
            for batch, batch_scores in zip(batches, scores):
                component.predict_scored(batch, batch_scores)
            took["predict_scored"] = time.perf_counter() - start
        took["rest"] = took["predict_scored"] - sum(took.get(label, 0.0) for label, _, _ in TIMED if label != "kernel")
        took["label marginals"] = took.get("label marginals", 0.0) - took.get("kernel", 0.0)
        for key, value in took.items():
            best[key] = min(best.get(key, float("inf")), value)
    return best


def main(data: Path = typer.Argument(..., help="ARK file (token<TAB>tag lines), e.g. oct27.traindev"),
         systems: str = typer.Option("nldm,crf order 1", help="Comma-separated systems of bench pipeline"),
         encoder_kind: str = typer.Option("bilstm", "--encoder", help="bilstm or cnn"),
         rounds: int = typer.Option(3, help="Rounds over the systems; the fastest counts"),
         seed: int = typer.Option(0, help="Seed of the weights"),
         split: bool = typer.Option(False, "--breakdown", help="Also split the NLDM systems' predict_scored into "
                                                                "the structs functions it calls")) -> None:
    import torch
    from spacy.tokens import Doc
    from thinc.api import fix_random_seed

    from spacy_nldm.cli.bench_pipeline import batches, build, encoder, examples_of, read_sentences

    torch.set_num_threads(1)
    sents = read_sentences(data, "tag")
    words = sum(len(w) for w, _ in sents)
    tok2vec = encoder(encoder_kind, 100 if encoder_kind == "bilstm" else 96)
    pipelines = {}
    for system in [s.strip() for s in systems.split(",")]:
        fix_random_seed(seed)
        nlp = build(system, tok2vec, "bilinear", 50, 400)
        examples = examples_of(nlp, sents, "tag")
        optimizer = nlp.initialize(lambda: examples)
        for batch in list(batches(examples, 1000))[:8]:
            nlp.update(batch, sgd=optimizer)
        list(nlp.pipe([Doc(nlp.vocab, words=w) for w, _ in sents[:300]], batch_size=256))  # first-call costs
        pipelines[system] = nlp
    steps = ("nlp.pipe", "token_scores", "predict_scored", "set_annotations")
    best = {system: dict.fromkeys(steps, float("inf")) for system in pipelines}
    for _ in range(rounds):
        for system, nlp in pipelines.items():
            component = nlp.get_pipe("tagger")
            took = dict.fromkeys(steps, 0.0)
            docs = [Doc(nlp.vocab, words=w) for w, _ in sents]
            start = time.perf_counter()
            list(nlp.pipe(docs, batch_size=256))
            took["nlp.pipe"] = time.perf_counter() - start
            docs = [Doc(nlp.vocab, words=w) for w, _ in sents]
            for i in range(0, len(docs), 256):
                batch = docs[i: i + 256]
                start = time.perf_counter()
                scores = component.token_scores(batch)
                took["token_scores"] += time.perf_counter() - start
                start = time.perf_counter()
                predictions = component.predict_scored(batch, scores)
                took["predict_scored"] += time.perf_counter() - start
                start = time.perf_counter()
                component.set_annotations(batch, predictions)
                took["set_annotations"] += time.perf_counter() - start
            for step in steps:
                best[system][step] = min(best[system][step], took[step])
    print(f"{data.name}: {len(sents)} sentences, {words} words; encoder {encoder_kind}; us a word, best of {rounds}")
    print("| system | " + " | ".join(steps) + " |")
    print("|---|" + "---|" * len(steps))
    for system, row in best.items():
        print(f"| {system} | " + " | ".join(f"{row[step] / words * 1e6:.2f}" for step in steps) + " |")
    nldm = [system for system, nlp in pipelines.items() if nlp.get_pipe_meta("tagger").factory == "nldm_tagger"]
    if split and nldm:
        parts = ("predict_scored", "kernel", "label marginals", "canonical tree", "segments", "rest")
        print(f"\npredict_scored split (us a word, best of {rounds}; label marginals: without the kernel)")
        print("| system | " + " | ".join(parts) + " |")
        print("|---|" + "---|" * len(parts))
        for system in nldm:
            component = pipelines[system].get_pipe("tagger")
            docs = [Doc(pipelines[system].vocab, words=w) for w, _ in sents]
            batched = [docs[i: i + 256] for i in range(0, len(docs), 256)]
            scores = [component.token_scores(batch) for batch in batched]
            row = breakdown(component, batched, scores, rounds)
            print(f"| {system} | " + " | ".join(f"{row.get(part, 0.0) / words * 1e6:.2f}" for part in parts) + " |")


if __name__ == "__main__":
    typer.run(main)
