"""Entity corpora in CoNLL layouts (WNUT 2017, CoNLL-2003 and the like) to spaCy Docs with ``Doc.ents``.

Format: one token per line, its entity tag in the last column (columns separated by TABs, or by spaces where
the line has no TAB); a separator line between sentences: empty, or only spaces and TABs (WNUT 2017's train
file separates its sentences by a line holding one TAB); ``-DOCSTART-`` lines are skipped. Tags are ``O`` or
``PREFIX-TYPE`` with the prefix of the scheme:

- ``BIO`` (IOB2): B begins an entity, I continues one of the same type; an I after O, or after another type,
  is an error;
- ``IOB1``: I begins or continues an entity, B begins one only right after an entity of the same type;
- ``BILUO`` (IOBES, with E/S read as L/U): B begins, I continues, L ends, U is a one-token entity.

Each sentence is one Doc; its entities go on ``Doc.ents`` and also on ``Doc.spans[spans_key]`` (spaCy's
``spancat`` learns from a span group, the NER components from ``Doc.ents``: one file serves both). Errors name
the file and the line (:class:`~.errors.ConversionError`).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterator, List, Optional, Sequence, Tuple

from .errors import ConversionError, PathLike, docs_per_file, is_blank, read_lines

SCHEMES = ("BIO", "IOB1", "BILUO")
#: the span group that also holds the entities (spancat's default ``spans_key``)
SPANS_KEY = "sc"


@dataclass
class NerSentence:
    words: List[str] = field(default_factory=list)
    tags: List[str] = field(default_factory=list)
    lines: List[int] = field(default_factory=list)
    path: str = ""

    @property
    def line(self) -> int:  # line of the first token
        return self.lines[0] if self.lines else 0


def _columns(line: str) -> List[str]:
    return line.split("\t") if "\t" in line else line.split()


def read_conll_ner(path: PathLike) -> Iterator[NerSentence]:
    """Read one file; yield its sentences (token and tag per line). ConversionError for a line with one column
    (no tag), an empty token or tag, and a file without tokens."""
    sent = NerSentence(path=str(path))
    found = False
    for number, line in read_lines(path):
        if is_blank(line) or line.split()[0] == "-DOCSTART-":
            if sent.words:
                found = True
                yield sent
                sent = NerSentence(path=str(path))
            continue
        cols = _columns(line)
        if len(cols) < 2:
            raise ConversionError(path, number, f"tag column missing: expected 'token<TAB>tag', found {line!r}")
        word, tag = cols[0], cols[-1].strip()
        if word == "":
            raise ConversionError(path, number, "empty token (the line starts with a TAB)")
        if not tag:
            raise ConversionError(path, number, f"empty tag for token {word!r}")
        sent.words.append(word)
        sent.tags.append(tag)
        sent.lines.append(number)
    if sent.words:
        found = True
        yield sent
    if not found:
        raise ConversionError(path, None, "empty file: no sentences")


def split_tag(tag: str, scheme: str, path: PathLike, line: int) -> Tuple[str, str]:
    """(prefix, type) of a tag ("O", "") for O; ConversionError for a tag the scheme does not have."""
    if tag == "O":
        return "O", ""
    prefixes = {"BIO": "BI", "IOB1": "BI", "BILUO": "BILUES"}[scheme]
    prefix, sep, kind = tag.partition("-")
    if not sep or len(prefix) != 1 or prefix not in prefixes or not kind:
        raise ConversionError(path, line, f"bad tag {tag!r}: expected O or one of {', '.join(prefixes)} + '-TYPE' "
                                          f"(scheme {scheme})")
    return {"E": "L", "S": "U"}.get(prefix, prefix), kind


def entity_offsets(sent: NerSentence, scheme: str = "BIO") -> List[Tuple[int, int, str]]:
    """The sentence's entities as (start, end, type) token offsets; ConversionError (file, line) for a tag
    outside the scheme or a broken sequence (an I with no entity of its type to continue, an entity left open
    under BILUO)."""
    if scheme not in SCHEMES:
        raise ValueError(f"scheme must be one of {SCHEMES}, not {scheme!r}")
    spans: List[Tuple[int, int, str]] = []
    open_start: Optional[int] = None
    open_type = ""
    for i, (tag, line) in enumerate(zip(sent.tags, sent.lines)):
        prefix, kind = split_tag(tag, scheme, sent.path, line)
        continues = open_start is not None and kind == open_type
        if prefix in ("I", "L") and not continues:
            if scheme == "IOB1" and prefix == "I":
                prefix = "B"  # IOB1: an I begins an entity
            else:
                before = sent.tags[i - 1] if i else "the sentence start"
                raise ConversionError(sent.path, line, f"broken entity: {tag!r} after {before!r} (scheme {scheme}: "
                                                       f"{prefix}-{kind} must continue a {kind} entity)")
        if scheme == "BILUO" and prefix in ("B", "U", "O") and open_start is not None:
            raise ConversionError(sent.path, line, f"broken entity: {tag!r} while a {open_type} entity begun on line "
                                                   f"{sent.lines[open_start]} is not ended by L-{open_type}")
        if prefix in ("B", "U", "O") and open_start is not None:
            spans.append((open_start, i, open_type))
            open_start = None
        if prefix in ("B", "U"):
            open_start, open_type = i, kind
        if prefix in ("U", "L"):
            spans.append((open_start, i + 1, open_type))
            open_start = None
    if open_start is not None:
        if scheme == "BILUO":
            raise ConversionError(sent.path, sent.lines[-1], f"broken entity: the sentence ends inside a {open_type} "
                                                             "entity (scheme BILUO: it must end with L- or U-)")
        spans.append((open_start, len(sent.tags), open_type))
    return spans


def conll_ner_to_docs(paths: Sequence[PathLike], scheme: str = "BIO", vocab=None, spans_key: str = SPANS_KEY):
    """Read one or more files (concatenated in order) into Docs, one a sentence, with ``Doc.ents`` and
    ``Doc.spans[spans_key]`` set; returns (docs, per_file) where per_file lists (path, n_sentences, n_tokens)."""
    from spacy.tokens import Doc, Span
    from spacy.vocab import Vocab

    vocab = vocab if vocab is not None else Vocab()

    def make_doc(sent: NerSentence):
        doc = Doc(vocab, words=sent.words, spaces=[True] * (len(sent.words) - 1) + [False])
        ents = [Span(doc, start, end, label=kind) for start, end, kind in entity_offsets(sent, scheme)]
        doc.set_ents(ents, default="outside")
        doc.spans[spans_key] = list(ents)
        return doc

    return docs_per_file(paths, read_conll_ner, make_doc)
