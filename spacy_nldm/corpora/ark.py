"""ARK Twitter POS data (Gimpel et al. 2011; Owoputi et al. 2013) to spaCy Docs.

Format: one ``token<TAB>tag`` per line, a blank line between tweets. The tag goes on ``Token.tag_``.
Tokens are kept exactly as written (a token may be, or contain, a no-break space U+00A0); the Docs are
built from the given tokens, so ``gold_preproc = true`` trains and evaluates on them unchanged.
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from typing import Iterable, Iterator, List, Optional, Sequence

from .errors import ConversionError, ConversionWarning, PathLike, docs_per_file, is_blank, read_lines

#: The 25 tags of the ARK Twitter tagset (Owoputi et al. 2013, Table 1).
ARK_TAGS = frozenset("N O ^ S Z V A R ! D P & T X Y # @ ~ U E $ , G L M".split())


@dataclass
class ArkSentence:
    words: List[str] = field(default_factory=list)
    tags: List[str] = field(default_factory=list)
    path: str = ""
    line: int = 0  # line of the first token


def read_ark(path: PathLike, tagset: Optional[Iterable[str]] = None) -> Iterator[ArkSentence]:
    """Read one ARK file; yield one ArkSentence per tweet.

    tagset: if given, a tag outside it is an error (ARK_TAGS for the ARK data).
    Raises ConversionError (file, line, problem) for: an empty file, invalid UTF-8, a line without a TAB
    (tag column missing), a line with more than two columns, an empty token or an empty tag, a tag with
    spaces, a tag outside ``tagset``, and a file without any token. A token with an ASCII space is kept
    as one token, with a :class:`ConversionWarning` (spaCy's tokenizer would split it: only
    ``gold_preproc = true`` keeps it whole).
    """
    allowed = frozenset(tagset) if tagset is not None else None
    sent = ArkSentence(path=str(path))
    n_sents = 0
    for number, line in read_lines(path):
        if is_blank(line):
            if sent.words:
                n_sents += 1
                yield sent
                sent = ArkSentence(path=str(path))
            continue
        cols = line.split("\t")
        if len(cols) == 1:
            raise ConversionError(
                path, number, f"tag column missing: expected 'token<TAB>tag', found no TAB in {line!r}"
            )
        if len(cols) != 2:
            raise ConversionError(
                path, number, f"wrong column count: expected 2 TAB-separated columns (token, tag), found {len(cols)}"
            )
        word, tag = cols
        if word == "":
            raise ConversionError(path, number, "empty token (the line starts with a TAB)")
        if tag.strip() == "":
            raise ConversionError(path, number, f"tag column missing: empty tag for token {word!r}")
        if tag != tag.strip() or " " in tag:
            raise ConversionError(path, number, f"tag {tag!r} contains spaces")
        if allowed is not None and tag not in allowed:
            raise ConversionError(path, number, f"unknown tag {tag!r} (not in the tagset of {len(allowed)} tags)")
        if " " in word:
            warnings.warn(ConversionWarning(
                path, number, f"token {word!r} contains an ASCII space: kept as one token, which spaCy's "
                "tokenizer would split (train and evaluate with gold_preproc = true)"
            ))
        if not sent.words:
            sent.line = number
        sent.words.append(word)
        sent.tags.append(tag)
    if sent.words:
        n_sents += 1
        yield sent
    if n_sents == 0:
        raise ConversionError(path, None, "empty file: no sentences")


def ark_to_docs(paths: Sequence[PathLike], vocab=None, tagset: Optional[Iterable[str]] = None):
    """Read one or more ARK files (concatenated in order) into Docs with ``tag_`` set.

    Returns (docs, per_file) where per_file lists (path, n_sentences, n_tokens).
    """
    from spacy.tokens import Doc
    from spacy.vocab import Vocab

    vocab = vocab if vocab is not None else Vocab()

    def make_doc(sent: ArkSentence):
        spaces = [True] * (len(sent.words) - 1) + [False]
        doc = Doc(vocab, words=sent.words, spaces=spaces, tags=sent.tags)
        if len(doc) != len(sent.words):  # never expected: Doc keeps the given words
            raise ConversionError(sent.path, sent.line, f"tweet of {len(sent.words)} tokens became {len(doc)}")
        return doc

    return docs_per_file(paths, lambda path: read_ark(path, tagset=tagset), make_doc)
