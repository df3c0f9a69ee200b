"""Reading and writing the DocBin files (.spacy) of the converters, with clear errors."""
from __future__ import annotations

from pathlib import Path
from typing import List, Sequence, Tuple

from .errors import ConversionError, PathLike

#: (source file, sentences, tokens) per converted file
Counts = Tuple[str, int, int]


def read_docbin(path: PathLike, vocab=None) -> list:
    """The Docs of a DocBin file; ConversionError for a missing, empty or unreadable file."""
    from spacy.tokens import DocBin
    from spacy.vocab import Vocab

    path = Path(path)
    if not path.exists():
        raise ConversionError(path, None, "file not found")
    if path.is_dir():
        raise ConversionError(path, None, "is a directory, expected a DocBin file (.spacy)")
    if path.stat().st_size == 0:
        raise ConversionError(path, None, "empty file: not a DocBin (.spacy)")
    try:
        docs = list(DocBin().from_disk(path).get_docs(vocab if vocab is not None else Vocab()))
    except Exception as err:  # zlib, msgpack or key errors: whatever the bytes were, they are not a DocBin
        raise ConversionError(
            path, None, f"not a spaCy DocBin (.spacy) file: it could not be read ({type(err).__name__}: {err})"
        ) from None
    if not docs:
        raise ConversionError(path, None, "empty DocBin: no sentences")
    return docs


def write_docbin(docs: Sequence, output: PathLike) -> None:
    from spacy.tokens import DocBin

    output = Path(output)
    output.parent.mkdir(parents=True, exist_ok=True)
    DocBin(docs=docs, store_user_data=True).to_disk(output)


def summary(per_file: List[Counts], output: PathLike) -> List[str]:
    """What a converter prints: one line per source file, then the total written."""
    lines = [f"  {path}: {n_sents} sentences, {n_toks} tokens" for path, n_sents, n_toks in per_file]
    total_s = sum(s for _, s, _ in per_file)
    total_t = sum(t for _, _, t in per_file)
    lines.append(f"Wrote {total_s} sentences, {total_t} tokens to {output}")
    return lines
