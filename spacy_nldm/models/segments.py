"""The units the structured layer scores: sentences, cut into windows if too long.

The model gives factored scores per token (:class:`TokenScores`; its backprop takes a
:class:`ScoreGradient`); the component cuts each doc into
segments with its own ``max_length`` (:func:`segment_docs`) and pads them into one
:class:`SegmentScores` batch (:func:`pad_segments`), whose :meth:`~SegmentScores.unpad` maps a
gradient back onto the tokens.
"""
import warnings
from dataclasses import dataclass, field
from typing import Dict, List, NamedTuple

import numpy
from spacy.tokens import Doc
from thinc.api import get_array_module


class Segment(NamedTuple):
    """Tokens ``start:end`` of ``docs[doc]``."""

    doc: int
    start: int
    end: int


@dataclass
class TokenScores:
    """The model's output: the factored scores of the batch's T tokens, doc after doc, the number of tokens
    of each doc (D,), and the scorer's tables that the structure reads beside them, by name. The scores are
    emissions (T, M) where the tables hold the scorer's "interaction" (X, C, M) (a token-independent scorer:
    F = emissions + interaction, never built), else F (T, X, C, M); the other tables are the tree's
    "distance_bias" (2, K) and the second-order chain's "trigram" (M+1, M+1, M)."""

    scores: numpy.ndarray
    lengths: numpy.ndarray
    tables: Dict[str, numpy.ndarray] = field(default_factory=dict)


@dataclass
class ScoreGradient:
    """What the model's backprop takes: the gradient of the loss with respect to the scores and the tables
    of :class:`TokenScores` (shaped as they are), and the factor on the gradient that backprop sends on to the tok2vec
    (the head's own layers get theirs unscaled)."""

    scores: numpy.ndarray
    tables: Dict[str, numpy.ndarray]
    tok2vec_factor: float = 1.0


@dataclass
class SegmentScores:
    """The tokens' scores laid out as S segments padded to L, (S, L, M) or (S, L, X, C, M) (zero beyond each
    segment's length), their lengths (S,), and where they come from."""

    scores: numpy.ndarray
    lengths: numpy.ndarray
    segments: List[Segment]
    rows: numpy.ndarray  # (T,) segment of each token of the TokenScores
    cols: numpy.ndarray  # (T,) its position in the segment

    def unpad(self, d_scores: numpy.ndarray) -> numpy.ndarray:
        """A gradient shaped as :attr:`scores` as the tokens', (T, ...)."""
        return d_scores[self.rows, self.cols]


def doc_segments(doc: Doc, max_length: int) -> List[Segment]:
    """(start, end) of each sentence (or of the whole doc without sentence boundaries), with any
    sentence longer than ``max_length`` cut into consecutive windows of at most ``max_length``."""
    n = len(doc)
    if n == 0:
        return []
    if doc.has_annotation("SENT_START"):
        spans = [(sent.start, sent.end) for sent in doc.sents]
    elif n <= max_length:  # (the common case, answered at once)
        return [(0, n)]
    else:
        spans = [(0, n)]
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
    """The segments of a batch, doc after doc: together they hold every token once, in order."""
    return [Segment(i, s, e) for i, doc in enumerate(docs) for s, e in doc_segments(doc, max_length)]


def pad_segments(tokens: TokenScores, segments: List[Segment]) -> SegmentScores:
    """The tokens' scores laid out per segment (``segments`` from :func:`segment_docs` on the
    same docs)."""
    lengths = numpy.array([end - start for _, start, end in segments], dtype="int64")
    if int(lengths.sum()) != tokens.scores.shape[0]:
        raise ValueError(
            f"[spacy-nldm] the segments hold {int(lengths.sum())} tokens but the scores "
            f"{tokens.scores.shape[0]}: segment the docs the scores were computed on"
        )
    rows = numpy.repeat(numpy.arange(len(segments)), lengths)  # segment of each token
    cols = numpy.arange(len(rows)) - numpy.repeat(numpy.cumsum(lengths) - lengths, lengths)  # position
    shape = (len(segments), max(1, int(lengths.max(initial=0))), *tokens.scores.shape[1:])
    F = get_array_module(tokens.scores).zeros(shape, dtype=tokens.scores.dtype)
    F[rows, cols] = tokens.scores
    return SegmentScores(F, lengths, list(segments), rows, cols)
