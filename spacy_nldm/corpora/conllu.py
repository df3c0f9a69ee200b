"""CoNLL-U (Universal Dependencies) input: validation, and the targets of the converted DocBins.

The conversion itself is spaCy's (``python -m spacy convert FILE OUT --converter conllu --n-sents 1``):
one sentence per Doc, multiword tokens split into their syntactic words, UPOS on ``Token.pos_``, XPOS on
``Token.tag_`` (UPOS where XPOS is ``_``), gold heads and relations on ``Token.head`` / ``Token.dep_``.
Around it, two steps of ours:

* :func:`check_conllu` before: the file must be well-formed (UTF-8, 10 columns, numeric ids in order, a
  UPOS on every word, a numeric HEAD) and it gives the sentence and word counts that the DocBin must have;
* :func:`set_targets` after: copies UPOS onto ``Token.tag_`` (the label spaCy's ``tagger``, our softmax
  baseline, reads and predicts), so that every system of Table 2 learns UPOS whichever attribute it reads
  (``nldm_tagger`` / ``crf_tagger`` read ``pos`` for UD); stores the gold heads in
  ``doc.user_data["gold_heads"]`` (1-based, 0 = root); and checks the counts, so that no sentence or token
  is lost silently.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional

from .errors import ConversionError, PathLike, is_blank, read_lines

UPOS_TAGS = frozenset(
    "ADJ ADP ADV AUX CCONJ DET INTJ NOUN NUM PART PRON PROPN PUNCT SCONJ SYM VERB X".split()
)


@dataclass
class ConlluStats:
    path: str
    sentences: int = 0
    words: int = 0  # syntactic words (integer ids)
    multiword_tokens: int = 0  # "n-m" range lines
    empty_nodes: int = 0  # "n.m" lines (not tokens; skipped by the converter)
    upos: Dict[str, int] = field(default_factory=dict)
    sentence_lengths: List[int] = field(default_factory=list)


BOM = b"\xef\xbb\xbf"
#: a FEATS column other than ``_``: Name=Value pairs joined by ``|`` (a value may list several, comma-separated)
FEATS = re.compile(r"[^=|\s]+=[^=|\s]+(?:\|[^=|\s]+=[^=|\s]+)*")


def has_bom(path: PathLike) -> bool:
    """The file starts with a UTF-8 byte order mark."""
    with open(path, "rb") as f:
        return f.read(3) == BOM


def check_conllu(path: PathLike, allow_bom: bool = False) -> ConlluStats:
    """Validate a CoNLL-U file and count its sentences and syntactic words.

    Raises ConversionError naming the file, the line and the problem for: a UTF-8 byte order mark (unless
    ``allow_bom``: ``spacy convert`` reads it as part of the first line; :func:`~.ud.convert_conllu`
    removes it first), an empty file, invalid UTF-8, CR-only line endings,
    a token line without 10 TAB-separated columns, a bad or out-of-order ID, an empty FORM, a missing UPOS
    (``_`` or empty: the tag column the taggers learn), a UPOS outside the UD set, FEATS that are neither
    ``_`` nor ``Name=Value`` pairs joined by ``|`` (spaCy's converter reads them), a HEAD that is not a
    number in 0..n, and a file with no sentence.
    """
    stats = ConlluStats(path=str(path))
    if not allow_bom and Path(path).is_file() and has_bom(path):
        raise ConversionError(
            path, 1, "the file starts with a UTF-8 byte order mark, which `spacy convert` reads as part of the "
            "first line: remove it (python -m spacy_nldm convert ud does so before converting)"
        )
    expected_id = 1
    n_words = 0
    sent_line = None
    heads: List[tuple] = []

    def close_sentence() -> None:
        nonlocal expected_id, n_words, sent_line, heads
        if sent_line is None:
            return
        if n_words == 0:
            raise ConversionError(path, sent_line, "sentence without any word line")
        for line_no, head in heads:
            if head > n_words:
                raise ConversionError(path, line_no, f"HEAD {head} points past the sentence end ({n_words} words)")
        stats.sentences += 1
        stats.words += n_words
        stats.sentence_lengths.append(n_words)
        expected_id, n_words, sent_line, heads = 1, 0, None, []

    for number, line in read_lines(path):
        if is_blank(line):
            close_sentence()
            continue
        if line.startswith("#"):
            if sent_line is None:
                sent_line = number
            continue
        if sent_line is None:
            sent_line = number
        cols = line.split("\t")
        if len(cols) != 10:
            raise ConversionError(
                path, number, f"wrong column count: expected 10 TAB-separated columns, found {len(cols)}"
            )
        id_, form, _lemma, upos, _xpos, feats, head, _dep, _deps, _misc = cols
        if "-" in id_:
            start, _, end = id_.partition("-")
            if not (start.isdigit() and end.isdigit() and int(start) == expected_id and int(end) > int(start)):
                raise ConversionError(path, number, f"bad multiword token range {id_!r} (next word id is {expected_id})")
            stats.multiword_tokens += 1
            continue
        if "." in id_:
            stats.empty_nodes += 1
            continue
        if not id_.isdigit() or int(id_) != expected_id:
            raise ConversionError(path, number, f"bad word id {id_!r}: expected {expected_id}")
        if form == "":
            raise ConversionError(path, number, "empty FORM column")
        if upos in ("", "_"):
            raise ConversionError(path, number, f"tag column missing: no UPOS for word {form!r}")
        if upos not in UPOS_TAGS:
            raise ConversionError(path, number, f"unknown UPOS {upos!r}")
        if feats != "_" and not FEATS.fullmatch(feats):
            raise ConversionError(path, number, f"bad FEATS {feats!r}: expected _ or Name=Value pairs joined by |")
        if not head.lstrip("-").isdigit():
            raise ConversionError(path, number, f"HEAD {head!r} is not a number")
        if int(head) < 0:
            raise ConversionError(path, number, f"negative HEAD {head}")
        heads.append((number, int(head)))
        stats.upos[upos] = stats.upos.get(upos, 0) + 1
        expected_id += 1
        n_words += 1
    close_sentence()
    if stats.sentences == 0:
        raise ConversionError(path, None, "empty file: no sentences")
    return stats


def gold_heads(doc) -> List[int]:
    """1-based gold heads of a parsed Doc, 0 for a root (the CoNLL-U convention)."""
    return [0 if tok.head.i == tok.i else tok.head.i + 1 for tok in doc]


def set_targets(docs, source: PathLike, expected: Optional[ConlluStats] = None):
    """Copy UPOS onto ``tag_`` in each Doc, store the gold heads, and check the counts.

    docs: the Docs of one converted file (spaCy's conllu converter, one sentence per Doc).
    expected: the counts of the source CoNLL-U (from check_conllu); a mismatch is an error.
    Returns (docs, n_sentences, n_tokens).
    """
    docs = list(docs)
    n_tokens = 0
    for i, doc in enumerate(docs):
        for tok in doc:
            if not tok.pos_:
                raise ConversionError(source, None, f"sentence {i + 1}: token {tok.i + 1} ({tok.text!r}) has no UPOS")
            tok.tag_ = tok.pos_
        doc.user_data["gold_heads"] = gold_heads(doc)
        n_tokens += len(doc)
    if expected is not None:
        if len(docs) != expected.sentences:
            raise ConversionError(
                source, None,
                f"the DocBin has {len(docs)} Docs but {expected.path} has {expected.sentences} sentences "
                "(convert with one sentence per Doc: --n-sents 1)",
            )
        lengths = [len(d) for d in docs]
        if lengths != expected.sentence_lengths:
            first = next(i for i, (a, b) in enumerate(zip(lengths, expected.sentence_lengths)) if a != b)
            raise ConversionError(
                source, None,
                f"sentence {first + 1} has {lengths[first]} tokens in the DocBin but "
                f"{expected.sentence_lengths[first]} words in {expected.path}",
            )
    return docs, len(docs), n_tokens
