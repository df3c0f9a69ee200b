"""The Thinc model of the structured taggers: tok2vec (optionally with a character CNN, then a context
BiLSTM) -> wrapped PyTorch edge scorer, per token.

Input: a batch of Docs. Output: :class:`~.segments.TokenScores`, the factored scores (T, X, C, M) of
the batch's T tokens. The component cuts them into segments (sentences, or windows of its
``max_length``: :mod:`.segments`); the loss, decoding and marginals live in :mod:`.structure`,
chosen by :func:`get_structure`.
"""
from typing import List, Optional

import numpy
from spacy.tokens import Doc
from thinc.api import Maxout, Model, chain, concatenate, with_array
from thinc.types import Floats2d

from .chars import char_cnn
from .lstm import packed_lstm
from .scorers import make_scorer
from .segments import SegmentScores, TokenScores  # noqa: F401  (SegmentScores: re-exported)
from .shim import torch_layer
from .structure import Chain, LatentTree, Structure


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
    distance_bias: bool = False,
    distance_prior: float = 0.0,
    distance_labels: bool = False,
    chain_factor: bool = False,
    head_scores: bool = False,
    tie_directions: bool = False,
    dropout: float = 0.0,
    char_width: int = 0,
    embed_width: Optional[int] = None,
    embed_depth: Optional[int] = None,
    embed_mix: Optional[bool] = None,
    context_width: int = 0,
    hidden_width: int = 0,
    nO: Optional[int] = None,
) -> Model[List[Doc], TokenScores]:
    """Shared builder. ``structure`` is "tree" (NLDM, two directions) or "chain" (CRF); ``distance_bias`` (tree
    only): one learned score per arc direction and length, starting at -``distance_prior`` * (length - 1), and
    with ``distance_labels`` one per arc direction, length and label pair beside it (starting at 0);
    ``chain_factor`` (tree only): the chain's adjacent-label score beside the tree's arcs (starting at 0);
    ``head_scores`` (tree only): a score per token for where its head is, from its vector (starting at 0);
    ``tie_directions`` (tree only, bilinear): one label-pair table for both arc directions, in text order;
    ``dropout``: on the scorer's input vectors while training; ``char_width`` > 0: the head's own character CNN
    (:mod:`.chars`) of that width, whose vectors are concatenated to the tok2vec's at the scorer's input;
    ``embed_width`` > 0: the head's own hash embeddings of that width (:func:`head_embeddings`), concatenated
    likewise (after the characters), with ``embed_depth`` > 0 layers of window context of their own
    (None: ``defaults.resolve_head_embeddings`` chooses them, by whether the tok2vec listens to a spaCy
    tok2vec); ``embed_mix``: those layers of window context read the tok2vec's vectors (and the characters')
    beside the head's embeddings instead of the embeddings alone (width: the sum; None: where the tok2vec
    listens and the head has window layers, ``defaults.resolve_embed_mix``); ``context_width`` > 0: a
    bidirectional LSTM of that output width (half per direction) over each doc's vectors (the tok2vec's, with
    the head's own characters and embeddings), whose output is the scorer's input; ``hidden_width`` > 0: a
    hidden layer of that width (maxout of 3 pieces with layer normalisation, the layer of spaCy's window
    encoder) last before the scorer."""
    # (imported here: the pipeline package imports this module)
    from ..pipeline.defaults import resolve_embed_mix, resolve_head_embeddings

    listening = listens_to_tok2vec(tok2vec)
    embed_width, embed_depth = resolve_head_embeddings(embed_width, embed_depth, listening)
    embed_mix = resolve_embed_mix(embed_mix, embed_depth, listening)
    for name, value in (("char_width", char_width), ("embed_width", embed_width), ("embed_depth", embed_depth),
                        ("context_width", context_width), ("hidden_width", hidden_width)):
        if value < 0:
            raise ValueError(f"{name} must be >= 0, not {value}")
    if embed_depth and not embed_width:
        raise ValueError(f"embed_depth = {embed_depth} needs the head's own embeddings (embed_width > 0)")
    if embed_mix and not embed_depth:
        raise ValueError("embed_mix = true needs the head's own embeddings with window context (embed_width > 0 "
                         f"and embed_depth > 0), not embed_width = {embed_width}, embed_depth = {embed_depth}")
    if context_width % 2:
        raise ValueError(f"context_width must be even (half of it per direction), not {context_width}")
    n_dirs = 2 if structure == "tree" else 1
    lengths = (max_dist or DISTANCE_BIAS_LENGTHS) if distance_bias else 0
    scorer = make_scorer(edge_scorer, n_dirs=n_dirs, label_dim=label_dim, rank=rank, order=order, emission=emission,
                         distance_lengths=lengths, distance_prior=distance_prior, distance_labels=distance_labels,
                         dropout=dropout, chain_factor=chain_factor, head_scores=head_scores,
                         tie_directions=tie_directions)
    head = torch_layer(scorer)
    # layers of the head's own between the tok2vec and the scorer: the tok2vec_loss scale must reach the
    # tok2vec alone, so it is applied at the tok2vec's output (else at the features' output, the same place)
    own_layers = bool(char_width or embed_width or context_width or hidden_width)
    source = _grad_scaled(tok2vec) if own_layers else tok2vec
    # the scorer reads [tok2vec vectors; char CNN vectors; own embeddings], each where the head has it
    features = concatenate(source, char_cnn(char_width)) if char_width else source
    if embed_mix:  # (validated above: the head has embeddings with window layers)
        # one window encoder over [tok2vec vectors; (char CNN vectors;) own embeddings] (residual: keeps them)
        width_mixed = _known_width(tok2vec, "embed_mix") + char_width + embed_width
        embedded = concatenate(features, head_embeddings(embed_width, 0))
        features = chain(embedded, window_encoder(width_mixed, embed_depth))
    elif embed_width:
        features = concatenate(features, head_embeddings(embed_width, embed_depth))
    own_width = char_width + embed_width
    if context_width:
        features = chain(features, packed_lstm(nO=context_width, nI=_known_width(tok2vec, "context_width") + own_width))
    if hidden_width:
        # nI: the width before it where the config states it (else inferred from sample docs at initialize)
        stated = _stated_width(tok2vec)
        width_in = context_width or (stated + own_width if stated else None)
        features = chain(features, with_array(Maxout(nO=hidden_width, nI=width_in, nP=3, normalize=True)))
    refs = {"tok2vec": tok2vec, "head": head}
    if own_layers:
        refs[GRAD_SCALED] = source
    return Model(
        f"nldm-{structure}-tagger",
        forward,
        init=init,
        layers=[features, head],
        refs=refs,
        dims={"nO": nO},
        attrs={"structure": structure, "order": order, "max_dist": max_dist, "chain_factor": chain_factor,
               "char_width": char_width,
               "embed_width": embed_width, "embed_depth": embed_depth, "embed_mix": embed_mix,
               "context_width": context_width,
               "hidden_width": hidden_width, TOK2VEC_GRAD_SCALE: 1.0},
    )


def listens_to_tok2vec(tok2vec: Model) -> bool:
    """Whether ``tok2vec`` reads the output of a shared spaCy ``tok2vec`` component: it has a layer named
    "tok2vec-listener" (spaCy's ``Tok2VecListener``; a transformer's listener is not one)."""
    return any(node.name == "tok2vec-listener" for node in tok2vec.walk())


def head_embeddings(width: int, depth: int = 0) -> Model[List[Doc], List[Floats2d]]:
    """The head's own hash embeddings: spaCy's ``MultiHashEmbed.v2`` of ``width`` over the attributes and rows of
    the components' own encoder (``defaults.OWN_ATTRS``, ``OWN_ROWS``), no static vectors: a table
    lookup and one maxout layer per token. ``depth`` 0: no context; ``depth`` > 0: spaCy's
    ``MaxoutWindowEncoder.v2`` of that depth over them (window 1, 3 pieces: the encoder of the components'
    own tok2vec), a small tok2vec of the head's own. Next to a shared ``tok2vec`` (a listener) they give the
    head word features of its own, beside those of an encoder sized for the whole pipeline."""
    from spacy.util import registry

    from ..pipeline.defaults import OWN_ATTRS, OWN_ROWS  # (imported here: the pipeline package imports this module)

    build = registry.architectures.get("spacy.MultiHashEmbed.v2")
    embed = build(width=width, attrs=list(OWN_ATTRS), rows=list(OWN_ROWS), include_static_vectors=False)
    if not depth:
        return embed
    return registry.architectures.get("spacy.Tok2Vec.v2")(embed, window_encoder(width, depth))


def window_encoder(width: int, depth: int) -> Model[List[Floats2d], List[Floats2d]]:
    """spaCy's ``MaxoutWindowEncoder.v2`` of ``width`` (in and out) and ``depth``, window 1, 3 pieces: the
    encoder of the components' own tok2vec."""
    from spacy.util import registry

    return registry.architectures.get("spacy.MaxoutWindowEncoder.v2")(
        width=width, depth=depth, window_size=1, maxout_pieces=3)


#: model attr: the factor on the gradient that backprop sends to the tok2vec (read when backprop runs; the
#: component sets it per batch, see ``StructuredTagger.tok2vec_loss``); the head's gradients, those of its
#: own layers (characters, context LSTM, hidden layer) included, are unaffected
TOK2VEC_GRAD_SCALE = "tok2vec_grad_scale"
#: ref of the layer that scales the tok2vec's gradient, where the head has layers of its own
GRAD_SCALED = "tok2vec_grad_scaled"


def _grad_scaled(tok2vec: Model) -> Model:
    """``tok2vec`` whose backprop multiplies the incoming gradient by ``attrs[TOK2VEC_GRAD_SCALE]`` (set
    by the tagger's backprop just before it runs); the forward pass is the tok2vec's."""

    def forward(model: Model, docs: List[Doc], is_train: bool):
        vecs, backprop_vecs = tok2vec(docs, is_train)

        def backprop(d_vecs):
            scale = model.attrs[TOK2VEC_GRAD_SCALE]
            return backprop_vecs([d * scale for d in d_vecs] if scale != 1.0 else d_vecs)

        return vecs, backprop

    def init(model: Model, X=None, Y=None) -> None:
        tok2vec.initialize(X=X)
        if _stated_width(tok2vec):
            model.set_dim("nO", _stated_width(tok2vec), force=True)

    width = _stated_width(tok2vec)
    return Model("tok2vec-grad-scaled", forward, init=init, layers=[tok2vec], dims={"nO": width or None},
                 attrs={TOK2VEC_GRAD_SCALE: 1.0})


#: arc lengths with a bias of their own without max_dist (longer arcs share the last one)
DISTANCE_BIAS_LENGTHS = 10


def _stated_width(tok2vec: Model) -> int:
    """The tok2vec's output width where the config states it (dim nO), else 0."""
    return tok2vec.get_dim("nO") if tok2vec.has_dim("nO") and tok2vec.get_dim("nO") else 0


#: the settings whose layers are built with the tok2vec's stated width: what each needs, and how to turn it off
_NEEDS_WIDTH = {"context_width": ("context_width > 0", "context_width = 0"),
                "embed_mix": ("embed_mix = true", "embed_mix = false")}


def _known_width(tok2vec: Model, setting: str) -> int:
    """The tok2vec's output width where the config states it (its dim nO), which the layers of ``setting``
    (a key of :data:`_NEEDS_WIDTH`: the context LSTM, the mixed window encoder) are built with."""
    width = _stated_width(tok2vec)
    if not width:
        needs, off = _NEEDS_WIDTH[setting]
        raise ValueError(
            f"spacy-nldm: {needs} needs a tok2vec whose width the config states (dim nO, as spacy.Tok2Vec.v2 "
            f"and spacy.Tok2VecListener.v1 have); {tok2vec.name!r} has none: set {off}")
    return width


def get_structure(model: Model, tree_smoothing: str = "uniform") -> Structure:
    """The model's structure; ``tree_smoothing`` (the loss's setting, the tree only): see :class:`LatentTree`."""
    scorer = torch_scorer(model)
    if model.attrs["structure"] == "tree":
        return LatentTree(max_dist=model.attrs["max_dist"], distance_bias=scorer.distance_scores(),
                          token_independent=getattr(scorer, "token_independent", False), chain=scorer.chain_scores(),
                          tree_smoothing=tree_smoothing)
    return Chain(order=model.attrs["order"], token_independent=getattr(scorer, "token_independent", False),
                 trigram=getattr(scorer, "psi2", None))


def torch_scorer(model: Model):
    return model.get_ref("head").shims[0]._model


def resize_labels(model: Model, n_labels: int) -> None:
    """Set the number of labels; trained values of the existing labels are kept."""
    model.set_dim("nO", n_labels, force=True)
    scorer = torch_scorer(model)
    if scorer.nI > 0 and scorer.nO != n_labels:
        scorer.resize(scorer.nI, n_labels)


NO_WIDTH = "spacy-nldm: cannot infer the tok2vec width without sample docs"


def init(model: Model, X: Optional[List[Doc]] = None, Y=None) -> None:
    tok2vec, features = model.get_ref("tok2vec"), model.layers[0]
    if X is not None:
        features.initialize(X=X)
    else:
        try:
            features.initialize()
        except ValueError as err:  # a layer of the head's own could not infer its input width
            if _stated_width(tok2vec):
                raise
            raise ValueError(NO_WIDTH) from err
    nI = _stated_width(tok2vec)
    if not nI:
        if X is None:
            raise ValueError(NO_WIDTH)
        nI = tok2vec.predict(X[:1])[0].shape[1]
    nI += model.attrs.get("char_width", 0) + model.attrs.get("embed_width", 0)
    nI = model.attrs.get("context_width", 0) or nI  # the context LSTM's output is the scorer's input
    nI = model.attrs.get("hidden_width", 0) or nI  # the hidden layer's output is (last before the scorer)
    nO = model.get_dim("nO") if model.has_dim("nO") else None
    if not nO:
        raise ValueError("spacy-nldm: set the number of labels (dim nO) before initializing the model")
    torch_scorer(model).resize(nI, nO, keep=False)  # initialize: fresh weights


def forward(model: Model, docs: List[Doc], is_train: bool):
    """The scorer runs on the batch's tokens (T, nI) -> (T, X, C, M). Backprop sends the tok2vec its
    gradient times ``model.attrs[TOK2VEC_GRAD_SCALE]`` (1 unless the component sets it); the head's own
    layers get theirs unscaled."""
    features, head = model.layers
    ops = model.ops
    if not any(len(doc) for doc in docs):  # nothing to encode (a listener could not answer)
        F, _ = head(ops.alloc2f(0, torch_scorer(model).nI), False)
        return TokenScores(F, numpy.zeros(len(docs), dtype="int64")), lambda dF: []
    vecs, backprop_vecs = features(docs, is_train)
    lengths = numpy.array([len(v) for v in vecs], dtype="int64")
    # an empty doc's vectors may have any width (spacy-transformers' listener gives (0, 0))
    filled = [v for v in vecs if len(v)]
    X = ops.xp.concatenate(filled) if filled else ops.alloc2f(0, torch_scorer(model).nI)
    F, backprop_head = head(ops.asarray2f(X), is_train)

    def backprop(dF):
        dX = backprop_head(dF)
        scale = model.attrs.get(TOK2VEC_GRAD_SCALE, 1.0)
        if model.has_ref(GRAD_SCALED):  # the head's own layers first: scaled at the tok2vec's output
            model.get_ref(GRAD_SCALED).attrs[TOK2VEC_GRAD_SCALE] = scale
        elif scale != 1.0:
            dX = dX * scale
        starts = numpy.cumsum(lengths) - lengths
        return backprop_vecs(
            [dX[start : start + n] if n else ops.alloc2f(*v.shape) for start, n, v in zip(starts, lengths, vecs)]
        )

    return TokenScores(F, lengths), backprop
