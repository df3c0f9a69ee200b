"""Tweebank v1 (Kong et al. 2014; TweeboParser's ``Tweebank/Train_Test_Splited``) to spaCy Docs.

Format: 14 TAB-separated columns, a blank line between tweets. Column 1 ID, 2 FORM, 4 coarse ARK POS (the tag
we keep, on ``Token.tag_``), 5 ARK POS, 7 HEAD (0 = a root of the tweet; -1 or -3 = the token is left out of
the tree: hashtags, URLs, emoticons, ...), 8 relation (``_`` for a plain arc, or MWE / CONJ / COORD),
14 token-selection flag (0 exactly for the tokens left out of the tree).

The gold tree is kept twice:
* ``doc.user_data["gold_heads"]``: the HEAD column as written (1-based, 0 = root, negative = left out); this
  is the reference for the tree analysis, identical in form for Tweebank v2 (``conllu.set_targets``);
* ``Token.head`` / ``Token.dep_`` for spaCy and displaCy: a root and a left-out token are their own head,
  with relation ``ROOT`` and ``excluded``; a plain arc has relation ``dep``.

Tweebank v2 is CoNLL-U (UPOS); it goes through spaCy's conllu converter and :mod:`spacy_nldm.corpora.conllu`.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterator, List, Sequence

from .ark import ARK_TAGS
from .errors import ConversionError, PathLike, docs_per_file, is_blank, read_lines

N_COLUMNS = 14


@dataclass
class TweebankTweet:
    words: List[str] = field(default_factory=list)
    tags: List[str] = field(default_factory=list)
    heads: List[int] = field(default_factory=list)
    rels: List[str] = field(default_factory=list)
    line: int = 0
    head_lines: List[int] = field(default_factory=list)


def read_tweebank_v1(path: PathLike) -> Iterator[TweebankTweet]:
    """Yield one TweebankTweet per tweet; ConversionError (file, line, problem) on malformed input."""
    tweet = TweebankTweet()
    n = 0

    def finish(t: TweebankTweet) -> TweebankTweet:
        for line_no, head in zip(t.head_lines, t.heads):
            if head > len(t.words):
                raise ConversionError(path, line_no, f"HEAD {head} points past the tweet end ({len(t.words)} tokens)")
            if head > 0 and t.heads[head - 1] < 0:
                raise ConversionError(path, line_no, f"HEAD {head} points at a token left out of the tree")
        return t

    for number, line in read_lines(path):
        if is_blank(line):
            if tweet.words:
                n += 1
                yield finish(tweet)
                tweet = TweebankTweet()
            continue
        cols = line.split("\t")
        if len(cols) != N_COLUMNS:
            raise ConversionError(
                path, number, f"wrong column count: expected {N_COLUMNS} TAB-separated columns, found {len(cols)}"
            )
        id_, form, tag, head, rel = cols[0], cols[1], cols[3], cols[6], cols[7]
        if not id_.isdigit() or int(id_) != len(tweet.words) + 1:
            raise ConversionError(path, number, f"bad token id {id_!r}: expected {len(tweet.words) + 1}")
        if form == "":
            raise ConversionError(path, number, "empty FORM column")
        if tag in ("", "_"):
            raise ConversionError(path, number, f"tag column missing: no POS in column 4 for {form!r}")
        if tag not in ARK_TAGS:
            raise ConversionError(path, number, f"unknown ARK tag {tag!r} in column 4")
        try:
            head_i = int(head)
        except ValueError:
            raise ConversionError(path, number, f"HEAD {head!r} in column 7 is not a number") from None
        if head_i < 0 and head_i not in (-1, -3):
            raise ConversionError(path, number, f"HEAD {head_i}: the only negative heads are -1 and -3")
        if not tweet.words:
            tweet.line = number
        tweet.words.append(form)
        tweet.tags.append(tag)
        tweet.heads.append(head_i)
        tweet.rels.append(rel)
        tweet.head_lines.append(number)
    if tweet.words:
        n += 1
        yield finish(tweet)
    if n == 0:
        raise ConversionError(path, None, "empty file: no sentences")


def tweebank_v1_to_docs(paths: Sequence[PathLike], vocab=None):
    """Docs with ARK tags on ``tag_``, gold heads in user_data and on the tokens; (docs, per_file counts)."""

    from spacy.tokens import Doc
    from spacy.vocab import Vocab

    vocab = vocab if vocab is not None else Vocab()

    def make_doc(t):
        heads = [i if h <= 0 else h - 1 for i, h in enumerate(t.heads)]
        deps = [
            "ROOT" if h == 0 else "excluded" if h < 0 else ("dep" if r == "_" else r)
            for h, r in zip(t.heads, t.rels)
        ]
        spaces = [True] * (len(t.words) - 1) + [False]
        doc = Doc(vocab, words=t.words, spaces=spaces, tags=t.tags, heads=heads, deps=deps)
        doc.user_data["gold_heads"] = list(t.heads)
        return doc

    return docs_per_file(paths, read_tweebank_v1, make_doc)
