"""Entity corpora in CoNLL layouts (WNUT 2017, CoNLL-2003 and the like) to spaCy Docs with ``Doc.ents``.

Format: one token per line, by default the token in the first column and its entity tag in the last (columns
separated by TABs, or by spaces where the line has no TAB: CoNLL-2003's ``word POS chunk tag``; other columns
can be named, for Universal NER's ``id token tag ...``); a separator line between sentences: empty, or only
spaces and TABs (WNUT 2017's train file separates its sentences by a line holding one TAB); ``-DOCSTART-``
lines are skipped, and so are ``#`` comment lines before a sentence when asked for. Tags are ``O`` or ``PREFIX-TYPE`` with the prefix of the scheme:

- ``BIO`` (IOB2): B begins an entity, I continues one of the same type; an I after O, or after another type,
  is a broken sequence;
- ``IOB1``: I begins or continues an entity, B begins one (needed only right after an entity of the same
  type): CoNLL-2003's original files;
- ``BILUO`` (IOBES, with E/S read as L/U): B begins, I continues, L ends, U is a one-token entity; an I or L
  with no entity of its type open, or an entity not ended by L, is a broken sequence.

A broken sequence is an error (:class:`~.errors.ConversionError`, file and line) unless ``repair`` is set: then a
stray I-X begins an X entity (BIO reads as IOB1 does; under BILUO a stray L-X is U-X, and an entity left open
ends where the next begins), with one :class:`~.errors.ConversionWarning` per repaired line.

Each sentence is one Doc; its entities go on ``Doc.ents`` (every other token O) and also on
``Doc.spans[spans_key]`` (spaCy's ``spancat`` learns from a span group, the NER components from ``Doc.ents``:
one file serves both).
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from functools import partial
from typing import Iterator, List, Optional, Sequence, Tuple

from ..defaults import NER_COMMON
from .errors import ConversionError, ConversionWarning, PathLike, docs_per_file, is_blank, read_lines

SCHEMES = ("BIO", "IOB1", "BILUO")
PREFIXES = {"BIO": "BI", "IOB1": "BI", "BILUO": "BILUES"}
#: the span group that also holds the entities (the entity components' ``spans_key``, spancat's default)
SPANS_KEY = NER_COMMON["spans_key"]


@dataclass
class NerSentence:
    """One sentence: its tokens, their tags as written, the line of each token (from 1) and the file."""

    words: List[str] = field(default_factory=list)
    tags: List[str] = field(default_factory=list)
    lines: List[int] = field(default_factory=list)
    path: str = ""

    @property
    def line(self) -> int:  # line of the first token
        return self.lines[0] if self.lines else 0


def _columns(line: str) -> List[str]:
    return line.split("\t") if "\t" in line else line.split()


def read_conll_ner(path: PathLike, token_column: int = 1, tag_column: int = -1, comments: bool = False
                   ) -> Iterator[NerSentence]:
    """Read one file; yield its sentences. The token and the tag are in columns ``token_column`` and
    ``tag_column``, counted from 1 (a negative number counts from the end: -1 is the last column). With
    ``comments``, a line starting with ``#`` before a sentence's first token is skipped (CoNLL-U's rule).
    ConversionError for a line without those two columns, an empty token or tag, and a file without tokens; a
    ConversionWarning for a token with an ASCII space (TAB-separated files only; it is kept)."""
    if 0 in (token_column, tag_column):
        raise ValueError("columns are counted from 1 (or from -1, the last)")
    sent = NerSentence(path=str(path))
    found = False
    for number, line in read_lines(path):
        if is_blank(line) or line.split()[:1] == ["-DOCSTART-"]:
            if sent.words:
                found = True
                yield sent
                sent = NerSentence(path=str(path))
            continue
        if comments and not sent.words and line.startswith("#"):
            continue
        cols = _columns(line)
        token_at, tag_at = (c - 1 if c > 0 else len(cols) + c for c in (token_column, tag_column))
        if token_at == tag_at or not (0 <= token_at < len(cols) and 0 <= tag_at < len(cols)):
            raise ConversionError(path, number, f"tag column missing: expected the token in column {token_column} "
                                                f"and the tag in column {tag_column}, found {line!r}")
        word, tag = cols[token_at], cols[tag_at].strip()
        if word == "":
            raise ConversionError(path, number, "empty token" + (" (the line starts with a TAB)" if token_at == 0 else ""))
        if not tag:
            raise ConversionError(path, number, f"empty tag for token {word!r}")
        if " " in word:
            warnings.warn(ConversionWarning(
                path, number, f"token {word!r} contains an ASCII space: kept as one token, which spaCy's "
                "tokenizer would split (train and evaluate with gold_preproc = true)"))
        sent.words.append(word)
        sent.tags.append(tag)
        sent.lines.append(number)
    if sent.words:
        found = True
        yield sent
    if not found:
        raise ConversionError(path, None, "empty file: no sentences")


def split_tag(tag: str, scheme: str, path: PathLike, line: int) -> Tuple[str, str]:
    """(prefix, type) of a tag, ("O", "") for O, E/S read as L/U; ConversionError for a tag the scheme lacks."""
    if tag == "O":
        return "O", ""
    prefixes = PREFIXES[scheme]
    prefix, sep, kind = tag.partition("-")
    if not sep or len(prefix) != 1 or prefix not in prefixes or not kind:
        hint = " (an IOBES/BILUO file? use scheme BILUO)" if scheme != "BILUO" and prefix in tuple("ELSU") and sep else ""
        raise ConversionError(path, line, f"bad tag {tag!r}: expected O or one of {', '.join(prefixes)} + '-TYPE' "
                                          f"(scheme {scheme}){hint}")
    return {"E": "L", "S": "U"}.get(prefix, prefix), kind


def entity_offsets(sent: NerSentence, scheme: str = "BIO", repair: bool = False) -> List[Tuple[int, int, str]]:
    """The sentence's entities as (start, end, type) token offsets, end exclusive; ConversionError (file, line)
    for a tag outside the scheme and, unless ``repair``, for a broken sequence (see the module's docstring)."""
    if scheme not in SCHEMES:
        raise ValueError(f"scheme must be one of {SCHEMES}, not {scheme!r}")
    spans: List[Tuple[int, int, str]] = []
    open_start: Optional[int] = None
    open_type = ""

    def broken(line: int, problem: str, repaired: str) -> None:
        if not repair:
            raise ConversionError(sent.path, line, f"broken entity: {problem} (--repair: {repaired})")
        warnings.warn(ConversionWarning(sent.path, line, f"broken entity: {problem}: {repaired}"))

    for i, (tag, line) in enumerate(zip(sent.tags, sent.lines)):
        prefix, kind = split_tag(tag, scheme, sent.path, line)
        if prefix in ("I", "L") and not (open_start is not None and kind == open_type):
            begin = "B" if prefix == "I" else "U"
            if scheme != "IOB1":
                before = repr(sent.tags[i - 1]) if i else "the sentence start"
                broken(line, f"{tag!r} after {before} continues no {kind} entity",
                       f"read as {begin}-{kind}")
            prefix = begin
        if scheme == "BILUO" and prefix in ("B", "U", "O") and open_start is not None:
            broken(line, f"{tag!r} while the {open_type} entity begun on line {sent.lines[open_start]} is not "
                         f"ended by L-{open_type}", f"that entity ends before {tag!r}")
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
            broken(sent.lines[-1], f"the sentence ends inside the {open_type} entity begun on line "
                                   f"{sent.lines[open_start]} (no L-{open_type})", "that entity ends with the sentence")
        spans.append((open_start, len(sent.tags), open_type))
    return spans


def conll_ner_to_docs(paths: Sequence[PathLike], scheme: str = "BIO", vocab=None, spans_key: str = SPANS_KEY,
                      repair: bool = False, token_column: int = 1, tag_column: int = -1, comments: bool = False):
    """Read one or more files (concatenated in order) into Docs, one a sentence, with ``Doc.ents`` and
    ``Doc.spans[spans_key]`` set; the columns and ``comments`` as for :func:`read_conll_ner`. Returns (docs,
    per_file) where per_file lists (path, n_sentences, n_tokens)."""
    from spacy.tokens import Doc, Span
    from spacy.vocab import Vocab

    vocab = vocab if vocab is not None else Vocab()

    def make_doc(sent: NerSentence):
        doc = Doc(vocab, words=sent.words, spaces=[True] * (len(sent.words) - 1) + [False])
        ents = [Span(doc, start, end, label=kind) for start, end, kind in entity_offsets(sent, scheme, repair)]
        doc.set_ents(ents, default="outside")
        doc.spans[spans_key] = list(ents)
        return doc

    read = partial(read_conll_ner, token_column=token_column, tag_column=tag_column, comments=comments)
    return docs_per_file(paths, read, make_doc)
