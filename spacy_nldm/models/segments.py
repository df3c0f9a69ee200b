"""Split docs into the units the structured layer scores: sentences, cut into windows if too long."""
import warnings
from typing import List, NamedTuple

from spacy.tokens import Doc


class Segment(NamedTuple):
    """Tokens ``start:end`` of ``docs[doc]``."""

    doc: int
    start: int
    end: int


def doc_segments(doc: Doc, max_length: int) -> List[Segment]:
    """(start, end) of each sentence (or of the whole doc without sentence boundaries), with any
    sentence longer than ``max_length`` cut into consecutive windows of at most ``max_length``."""
    if len(doc) == 0:
        return []
    if doc.has_annotation("SENT_START"):
        spans = [(sent.start, sent.end) for sent in doc.sents]
    else:
        spans = [(0, len(doc))]
    out = []
    for start, end in spans:
        if end - start > max_length:
            warnings.warn(
                f"[spacy-nldm] a sentence of {end - start} tokens (doc starting {doc.text[:40]!r}) is longer "
                f"than max_length={max_length}: it is scored in windows of {max_length} tokens",
                stacklevel=3,
            )
        out.extend((s, min(s + max_length, end)) for s in range(start, end, max_length))
    return out


def segment_docs(docs: List[Doc], max_length: int) -> List[Segment]:
    return [Segment(i, s, e) for i, doc in enumerate(docs) for s, e in doc_segments(doc, max_length)]
