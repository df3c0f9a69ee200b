"""Errors and warnings of the corpus converters, and the line reader they share.

Every converter reports malformed input as a :class:`ConversionError` that names the file, the line (1-based)
and the problem; the CLI prints that message and exits with status 1, without a traceback. Input that is
kept but looks wrong is a :class:`ConversionWarning` (file, line, problem), printed by the CLI as
``warning: FILE:LINE: problem``.
"""
from __future__ import annotations

from pathlib import Path
from typing import Iterator, Optional, Tuple, Union

PathLike = Union[str, Path]


class ConversionError(ValueError):
    """Malformed input for a converter: ``path:line: problem``."""

    def __init__(self, path: PathLike, line: Optional[int], problem: str) -> None:
        self.path = str(path)
        self.line = line
        self.problem = problem
        where = f"{self.path}:{line}" if line is not None else self.path
        super().__init__(f"{where}: {problem}")


class ConversionWarning(UserWarning):
    """Input kept as it is, but worth a look: ``path:line: problem``."""

    def __init__(self, path: PathLike, line: Optional[int], problem: str) -> None:
        self.path = str(path)
        self.line = line
        self.problem = problem
        where = f"{self.path}:{line}" if line is not None else self.path
        super().__init__(f"{where}: {problem}")


def read_lines(path: PathLike) -> Iterator[Tuple[int, str]]:
    """Yield ``(line_number, text)`` for each line of a UTF-8 file, the line ending removed.

    Raises ConversionError for a missing file, an empty file (no bytes, or only whitespace) and for
    invalid UTF-8, naming the line and the byte offset in it, and for a carriage return that does not end a
    line (CR-only line endings). A UTF-8 byte order mark is skipped; "\\r\\n" line endings are accepted.
    Nothing else is stripped: a no-break space (U+00A0) is text.
    """
    path = Path(path)
    if not path.exists():
        raise ConversionError(path, None, "file not found")
    if path.is_dir():
        raise ConversionError(path, None, "is a directory, expected a file")
    data = path.read_bytes()
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    if not data.strip(b" \t\r\n"):
        raise ConversionError(path, None, "empty file: no sentences")
    raw_lines = data.split(b"\n")
    if raw_lines and raw_lines[-1] == b"":
        raw_lines.pop()  # the final newline does not start a line
    for number, raw in enumerate(raw_lines, start=1):
        if raw.endswith(b"\r"):
            raw = raw[:-1]
        if b"\r" in raw:
            raise ConversionError(
                path, number, "line endings: a carriage return (\\r) inside the line; the file seems to use CR-only "
                "line endings (classic Mac OS): convert them to LF (e.g. tr '\\r' '\\n')"
            )
        try:
            text = raw.decode("utf8")
        except UnicodeDecodeError as err:
            bad = raw[err.start : err.start + 4]
            raise ConversionError(
                path, number, f"invalid UTF-8 at byte {err.start} of the line ({bad!r}): {err.reason}"
            ) from None
        yield number, text


def is_blank(line: str) -> bool:
    """A separator line: empty or ASCII spaces and tabs only (a no-break space is not blank)."""
    return line.strip(" \t") == ""


def docs_per_file(paths, read, make_doc):
    """Docs from the sentences that ``read(path)`` yields (each with a ``line``), ``make_doc(sentence)``
    each, tagged with their ``user_data["source"]`` (file:line); returns (docs, [(path, n_sentences, n_tokens)])."""
    docs = []
    per_file = []
    for path in paths:
        n_sents = n_toks = 0
        for sent in read(path):
            doc = make_doc(sent)
            doc.user_data["source"] = f"{Path(path).name}:{sent.line}"
            docs.append(doc)
            n_sents += 1
            n_toks += len(doc)
        per_file.append((str(path), n_sents, n_toks))
    return docs, per_file
