"""The partial-annotation corpora of the entity study: a share of the gold entities removed at random, their
tokens either marked unknown (spaCy's missing ``ent_iob``: the components marginalise them) or read as ``O``.

    python -m projects.paper.scripts.partial_entities corpus/ner/wnut17/train.spacy \\
        --share 0.5 --seed 0 --unknown corpus/ner/wnut17_half_unknown/train.spacy --outside corpus/ner/wnut17_half_o/train.spacy \\
        --fewer-docs corpus/ner/wnut17_half_docs/train.spacy --incorrect corpus/ner/wnut17_half_incorrect/train.spacy

The same entities are removed in all outputs (one draw: each entity is removed with probability ``share``).
``--fewer-docs`` also writes the control: a share of the docs removed at random (each with probability ``share``,
its own draw of the same seed), the rest fully annotated, so that half the entities go with their docs and the
entity rate stays as annotated. ``--incorrect`` writes the unknown reading with, for each removed entity, its span
under one other type of the corpus (drawn at random, its own draw of the same seed) in the span group
``incorrect_spans``: what an annotator leaves who rejected a wrong type a model suggested there.
``Doc.spans["sc"]`` keeps the entities that stay (spancat cannot mark tokens unknown). The input's dev.spacy and
test.spacy, where they lie beside it, are copied unchanged beside each output, so that each output folder is a
dataset of ``python -m projects.paper spacy-train``. Prints the counts.
"""
import random
import shutil
from pathlib import Path
from typing import Optional

import typer
from spacy.tokens import Doc, DocBin, Span
from spacy.vocab import Vocab

from spacy_nldm.corpora.conll_ner import SPANS_KEY
from spacy_nldm.defaults import INCORRECT_SPANS_KEY


def removed_entities(docs, share: float, seed: int):
    """For each doc, the indices of its entities to remove (each with probability ``share``; one draw)."""
    rng = random.Random(seed)
    return [{i for i in range(len(doc.ents)) if rng.random() < share} for doc in docs]


def kept_docs(docs, share: float, seed: int):
    """The docs that stay when each is removed with probability ``share`` (one draw), unchanged."""
    rng = random.Random(seed)
    return [doc for doc in docs if rng.random() >= share]


def partial(doc: Doc, removed, unknown: bool) -> Doc:
    """A copy of ``doc`` whose entities at the ``removed`` indices are gone: their tokens unknown or ``O``."""
    out = doc.copy()
    ents = list(out.ents)
    kept = [ent for i, ent in enumerate(ents) if i not in removed]
    gone = [ent for i, ent in enumerate(ents) if i in removed]
    out.set_ents(kept, **({"missing": gone} if unknown else {"outside": gone}), default="outside")
    out.spans[SPANS_KEY] = list(kept)
    return out


def with_an_incorrect_type(doc: Doc, removed, types, rng: random.Random) -> Doc:
    """The unknown reading of ``doc`` (:func:`partial`) with each removed entity's span under one other of
    ``types`` (drawn by ``rng``) in ``doc.spans[INCORRECT_SPANS_KEY]``."""
    out = partial(doc, removed, True)
    gone = [ent for i, ent in enumerate(doc.ents) if i in removed]
    out.spans[INCORRECT_SPANS_KEY] = [Span(out, ent.start, ent.end, label=rng.choice([t for t in types if t != ent.label_]))
                                      for ent in gone]
    return out


def main(
    input: Path = typer.Argument(..., help="DocBin with gold entities (the train split)"),
    share: float = typer.Option(0.5, help="Share of the entities removed"),
    seed: int = typer.Option(0, help="Seed of the draw"),
    unknown: Path = typer.Option(..., help="Output: the removed entities' tokens unknown"),
    outside: Path = typer.Option(..., help="Output: the removed entities' tokens O"),
    fewer_docs: Optional[Path] = typer.Option(None, help="Output: a share of the docs removed, the rest as annotated"),
    incorrect: Optional[Path] = typer.Option(None, help="Output: the unknown reading, each removed entity under "
                                                        "another type as an incorrect span"),
) -> None:
    vocab = Vocab()
    docs = list(DocBin().from_disk(input).get_docs(vocab))
    removed = removed_entities(docs, share, seed)
    outputs = [(unknown, [partial(doc, r, True) for doc, r in zip(docs, removed)]),
               (outside, [partial(doc, r, False) for doc, r in zip(docs, removed)])]
    if fewer_docs is not None:
        outputs.append((fewer_docs, kept_docs(docs, share, seed)))
    if incorrect is not None:
        types = sorted({ent.label_ for doc in docs for ent in doc.ents})
        rng = random.Random(seed)
        outputs.append((incorrect, [with_an_incorrect_type(doc, r, types, rng) for doc, r in zip(docs, removed)]))
    for path, out in outputs:
        path.parent.mkdir(parents=True, exist_ok=True)
        DocBin(docs=out, store_user_data=True).to_disk(path)
        for split in ("dev", "test"):
            if (input.parent / f"{split}.spacy").exists():
                shutil.copyfile(input.parent / f"{split}.spacy", path.parent / f"{split}.spacy")
        negatives = sum(len(doc.spans.get(INCORRECT_SPANS_KEY, [])) for doc in out)
        typer.echo(f"wrote {path}: {len(out)} docs, {sum(len(doc.ents) for doc in out)} entities"
                   + (f", {negatives} incorrect spans" if negatives else ""))
    n_ents = sum(len(doc.ents) for doc in docs)
    n_removed = sum(len(r) for r in removed)
    typer.echo(f"{input}: {len(docs)} docs, {n_ents} entities, {n_removed} removed ({n_removed / max(1, n_ents):.1%}); "
               f"wrote {unknown} and {outside}")


if __name__ == "__main__":
    typer.run(main)
