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


def split_dev(docs: Sequence, dev_share: float) -> Tuple[list, list]:
    """(train, dev), both in the input's order. With n documents and d = floor(n * dev_share) (at least 1), dev
    takes the documents at index floor(k * n / d) - 1 for k = 1..d: one in each stretch of n / d documents, the
    file's last document among them, so dev is spread evenly through the file and the split is the same on
    every run. ValueError unless 0 < dev_share <= 0.5 and n >= 2."""
    if not 0.0 < dev_share <= 0.5:
        raise ValueError(f"dev share must be above 0 and at most 0.5, not {dev_share}")
    n = len(docs)
    if n < 2:
        raise ValueError(f"{n} document(s) cannot be split into train and dev")
    n_dev = max(1, int(n * dev_share))
    dev_index = {(k + 1) * n // n_dev - 1 for k in range(n_dev)}
    train = [doc for i, doc in enumerate(docs) if i not in dev_index]
    dev = [doc for i, doc in enumerate(docs) if i in dev_index]
    return train, dev
