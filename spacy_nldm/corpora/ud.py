"""UD treebanks (CoNLL-U) to DocBins: checked, converted by spaCy's conllu converter, targets set.

:func:`convert_conllu` is one file's whole path: :func:`~.conllu.check_conllu` (well-formed, counts),
spaCy's converter (what ``python -m spacy convert FILE OUT --converter conllu --n-sents 1`` runs: one
sentence per Doc, multiword tokens split into their syntactic words, UPOS on ``Token.pos_``), then
:func:`~.conllu.set_targets` (UPOS copied onto ``Token.tag_``, gold heads kept, counts checked against
the source). A UTF-8 byte order mark, which spaCy's converter reads as part of the first line, is
removed first. :func:`targets_from_docbin` is the last step alone, for a DocBin converted elsewhere.
Used by ``python -m spacy_nldm convert ud`` / ``ud-targets`` and by ``projects/paper/scripts/convert_ud.py``.
"""
from __future__ import annotations

import warnings
from typing import Optional, Tuple

from .conllu import BOM, check_conllu, set_targets
from .docbins import read_docbin
from .errors import ConversionError, ConversionWarning, PathLike


def convert_conllu(path: PathLike) -> Tuple[list, int, int]:
    """(docs, sentences, tokens) of a CoNLL-U file; ConversionError (file, line, problem) on bad input."""
    from spacy.training.converters import conllu_to_docs

    stats = check_conllu(path, allow_bom=True)
    data = open(path, "rb").read()
    if data.startswith(BOM):
        warnings.warn(ConversionWarning(path, 1, "UTF-8 byte order mark removed before spaCy's conllu converter"))
    text = (data[len(BOM):] if data.startswith(BOM) else data).decode("utf8").replace("\r\n", "\n")
    docs = list(conllu_to_docs(text, n_sents=1, no_print=True))
    return set_targets(docs, path, stats)


def targets_from_docbin(
    docbin: PathLike,
    conllu: Optional[PathLike] = None,
    expect_sentences: Optional[int] = None,
    expect_tokens: Optional[int] = None,
) -> Tuple[list, int, int]:
    """:func:`~.conllu.set_targets` on a DocBin made from ``conllu`` (whose counts it must have), or
    with the expected counts given."""
    expected = check_conllu(conllu, allow_bom=True) if conllu is not None else None
    docs, n_sents, n_toks = set_targets(read_docbin(docbin), docbin, expected)
    if expect_sentences is not None and n_sents != expect_sentences:
        raise ConversionError(docbin, None, f"{n_sents} sentences, expected {expect_sentences}")
    if expect_tokens is not None and n_toks != expect_tokens:
        raise ConversionError(docbin, None, f"{n_toks} tokens, expected {expect_tokens}")
    return docs, n_sents, n_toks
