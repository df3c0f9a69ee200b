"""The Thinc model of the structured taggers: tok2vec -> segments -> wrapped PyTorch edge scorer.

Input: a batch of Docs. Output: :class:`SegmentScores`, the factored scores F (S, L, X, C, M) of
the batch's segments (sentences or windows, see :mod:`.segments`) with their lengths; the loss,
decoding and marginals live in :mod:`.structure`, chosen by :func:`get_structure`.
"""
from dataclasses import dataclass
from typing import List, Optional

import numpy
from spacy.tokens import Doc
from thinc.api import Model
from thinc.types import Floats2d

from .scorers import make_scorer
from .shim import torch_head
from .segments import Segment, segment_docs
from .structure import Chain, LatentTree, Structure


@dataclass
class SegmentScores:
    scores: numpy.ndarray  # (S, L, X, C, M) float32, zero beyond each segment's length
    lengths: numpy.ndarray  # (S,) int
    segments: List[Segment]


def build_structured_tagger(
    tok2vec: Model[List[Doc], List[Floats2d]],
    *,
    structure: str,
    edge_scorer: str,
    label_dim: int,
    rank: int,
    order: int = 1,
    max_dist: Optional[int] = None,
    emission: bool = True,
    nO: Optional[int] = None,
) -> Model[List[Doc], SegmentScores]:
    """Shared builder. ``structure`` is "tree" (NLDM, two directions) or "chain" (CRF)."""
    n_dirs = 2 if structure == "tree" else 1
    scorer = make_scorer(edge_scorer, n_dirs=n_dirs, label_dim=label_dim, rank=rank, order=order, emission=emission)
    head = torch_head(scorer)
    return Model(
        f"nldm-{structure}-tagger",
        forward,
        init=init,
        layers=[tok2vec, head],
        refs={"tok2vec": tok2vec, "head": head},
        dims={"nO": nO},
        attrs={"structure": structure, "order": order, "max_dist": max_dist, "max_length": 256},
    )


def get_structure(model: Model) -> Structure:
    if model.attrs["structure"] == "tree":
        return LatentTree(max_dist=model.attrs["max_dist"])
    return Chain(order=model.attrs["order"])


def torch_scorer(model: Model):
    return model.get_ref("head").shims[0]._model


def resize_labels(model: Model, n_labels: int) -> None:
    """Set the number of labels; trained values of the existing labels are kept."""
    model.set_dim("nO", n_labels, force=True)
    scorer = torch_scorer(model)
    if scorer.nI > 0 and scorer.nO != n_labels:
        scorer.resize(scorer.nI, n_labels)


def init(model: Model, X: Optional[List[Doc]] = None, Y=None) -> None:
    tok2vec = model.get_ref("tok2vec")
    if X is not None:
        tok2vec.initialize(X=X)
    else:
        tok2vec.initialize()
    nI = tok2vec.get_dim("nO") if tok2vec.has_dim("nO") else None
    if not nI:
        if X is None:
            raise ValueError("spacy-nldm: cannot infer the tok2vec width without sample docs")
        nI = tok2vec.predict(X[:1])[0].shape[1]
    nO = model.get_dim("nO") if model.has_dim("nO") else None
    if not nO:
        raise ValueError("spacy-nldm: set the number of labels (dim nO) before initializing the model")
    torch_scorer(model).resize(nI, nO, keep=False)  # initialize: fresh weights


def forward(model: Model, docs: List[Doc], is_train: bool):
    """The scorer runs on the real tokens only (T, nI) -> (T, X, C, M), padded per segment after."""
    tok2vec, head = model.layers
    ops = model.ops
    vecs, backprop_vecs = tok2vec(docs, is_train)
    segments = segment_docs(docs, model.attrs["max_length"])
    lengths = numpy.array([s.end - s.start for s in segments], dtype="int64")
    width = vecs[0].shape[1] if vecs else torch_scorer(model).nI
    if segments:
        X = ops.xp.concatenate([vecs[d][start:end] for d, start, end in segments])
    else:
        X = ops.alloc2f(0, width)
    F_flat, backprop_head = head(ops.asarray2f(X), is_train)
    rows = numpy.repeat(numpy.arange(len(segments)), lengths)  # segment of each token
    cols = numpy.arange(len(rows)) - numpy.repeat(numpy.cumsum(lengths) - lengths, lengths)  # position
    F = ops.alloc((len(segments), max(1, int(lengths.max(initial=0))), *F_flat.shape[1:]), dtype=F_flat.dtype)
    F[rows, cols] = F_flat

    def backprop(dF):
        dX = backprop_head(dF[rows, cols])
        d_vecs = [ops.alloc2f(*v.shape) for v in vecs]
        offset = 0
        for d, start, end in segments:
            d_vecs[d][start:end] += dX[offset : offset + end - start]
            offset += end - start
        return backprop_vecs(d_vecs)

    return SegmentScores(F, lengths, segments), backprop
