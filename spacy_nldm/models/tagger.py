"""The Thinc model of the structured taggers: tok2vec (optionally beside the head's own embeddings) -> wrapped
PyTorch edge scorer, per token.

Input: a batch of Docs. Output: :class:`~.segments.TokenScores`, the factored scores of the batch's T tokens
((T, M) emissions for a token-independent scorer, else (T, X, C, M)) and the scorer's tables that the structure
reads beside them (the token-independent scorer's interaction, the tree's distance bias, the second-order
chain's trigram table). The component cuts the scores into segments (sentences, or windows of its
``max_length``: :mod:`.segments`); the loss, decoding and marginals live in :mod:`.structure`, built by
:func:`get_structure`. Backprop takes a :class:`~.segments.ScoreGradient`: the gradient of the loss with
respect to the scores and tables, and the factor on the gradient sent on to the tok2vec.
"""
from typing import Dict, List, Optional

import numpy
import torch
from spacy.tokens import Doc
from thinc.api import ArgsKwargs, Model, torch2xp, xp2torch
from thinc.types import Floats2d

from ..defaults import OWN_ATTRS, OWN_ROWS, resolve_embed_mix, resolve_head_embeddings
from .segments import ScoreGradient, TokenScores
from .shim import torch_layer
from .structure import Chain, LatentTree, Structure

#: arc lengths with a bias of their own without max_dist (longer arcs share the last one)
DISTANCE_BIAS_LENGTHS = 10
#: the model's attrs of the head's embeddings where it has none of its own
NO_EMBEDDINGS = {"embed_width": 0, "embed_depth": 0, "embed_mix": False}


def build_structured_tagger(tok2vec: Model[List[Doc], List[Floats2d]], scorer: torch.nn.Module,
                            head_layers: Optional[Model], attrs: Dict, nO: Optional[int] = None
                            ) -> Model[List[Doc], TokenScores]:
    """The model shared by both architectures: ``tok2vec``'s vectors (through ``head_layers``, the head's own
    embeddings of :func:`head_features`, where it has them) read by the torch edge ``scorer``
    (:mod:`.scorers`). ``attrs``: "structure" ("tree" or "chain") and what :func:`get_structure` reads of it
    ("max_dist" of the tree, "order" of the chain); the model's attrs add the head's embeddings as resolved
    ("embed_width", "embed_depth", "embed_mix")."""
    head = torch_layer(scorer, _scorer_inputs, _scorer_outputs)
    layers = [tok2vec] + ([head_layers] if head_layers is not None else []) + [head]
    embeddings = dict(head_layers.attrs) if head_layers is not None else NO_EMBEDDINGS
    return Model(f"nldm-{attrs['structure']}-tagger", forward, init=init, layers=layers,
                 refs={"tok2vec": tok2vec, "head": head}, dims={"nO": nO}, attrs={**attrs, **embeddings})


def head_features(tok2vec: Model, embed_width: Optional[int], embed_depth: Optional[int],
                  embed_mix: Optional[bool]) -> Optional[Model]:
    """The head's own layers between the tok2vec and the scorer, or None: Model[(docs, tok2vec vectors),
    vectors] whose backprop returns the tok2vec vectors' gradient. ``embed_width`` > 0: hash embeddings of
    the head's own (:func:`head_embeddings`) beside the tok2vec's vectors, with ``embed_depth`` > 0 layers of
    window context; ``embed_mix``: those layers read [tok2vec vectors; embeddings] (residual) instead of the
    embeddings alone. Null settings are resolved by :mod:`spacy_nldm.defaults`, by whether the
    tok2vec listens to a shared spaCy tok2vec."""

    listening = listens_to_tok2vec(tok2vec)
    width, depth = resolve_head_embeddings(embed_width, embed_depth, listening)
    mix = resolve_embed_mix(embed_mix, depth, listening)
    for name, value in (("embed_width", width), ("embed_depth", depth)):
        if value < 0:
            raise ValueError(f"{name} must be >= 0, not {value}")
    if depth and not width:
        raise ValueError(f"embed_depth = {depth} needs the head's own embeddings (embed_width > 0)")
    if mix and not depth:
        raise ValueError("embed_mix = true needs the head's own embeddings with window context (embed_width > 0 "
                         f"and embed_depth > 0), not embed_width = {width}, embed_depth = {depth}")
    if not width:
        return None
    attrs = {"embed_width": width, "embed_depth": depth, "embed_mix": mix}
    stated = _stated_width(tok2vec)
    if not mix:
        return Model("head-embeddings", _features_forward, init=_features_init, layers=[head_embeddings(width, depth)],
                     dims={"nO": stated + width if stated else None}, attrs=attrs)
    if not stated:
        raise ValueError(f"spacy-nldm: embed_mix = true needs a tok2vec whose width the config states (dim nO, as "
                         f"spacy.Tok2Vec.v2 and spacy.Tok2VecListener.v1 have); {tok2vec.name!r} has none: set "
                         "embed_mix = false")
    return Model("head-embeddings-mixed", _features_forward, init=_features_init,
                 layers=[head_embeddings(width, 0), window_encoder(stated + width, depth)], dims={"nO": stated + width},
                 attrs=attrs)


def _features_init(model: Model, X=None, Y=None) -> None:
    """Initialize the embeddings on the docs of ``X`` (docs, tok2vec vectors or None without a mixed window
    encoder), then the window encoder on what it reads."""
    if X is None:
        for layer in model.layers:
            layer.initialize()
        return
    docs, vecs = X
    embed = model.layers[0]
    embed.initialize(X=docs)
    if len(model.layers) > 1:
        xp = model.ops.xp
        model.layers[1].initialize(X=[xp.hstack((v, e)) for v, e in zip(vecs, embed.predict(docs))])


def _features_forward(model: Model, inputs, is_train: bool):
    """(docs, tok2vec vectors) -> [vectors; embeddings] per doc, through the window encoder where there is one."""
    docs, vecs = inputs
    embed = model.layers[0]
    embedded, backprop_embed = embed(docs, is_train)
    xp = model.ops.xp
    joined = [xp.hstack((v, e)) for v, e in zip(vecs, embedded)]
    width = [v.shape[1] for v in vecs]
    out, backprop_encoder = model.layers[1](joined, is_train) if len(model.layers) > 1 else (joined, None)

    def backprop(d_out: List[Floats2d]) -> List[Floats2d]:
        d_joined = backprop_encoder(d_out) if backprop_encoder is not None else d_out
        backprop_embed([model.ops.as_contig(d[:, w:]) for d, w in zip(d_joined, width)])
        return [model.ops.as_contig(d[:, :w]) for d, w in zip(d_joined, width)]

    return out, backprop


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


def _stated_width(tok2vec: Model) -> int:
    """The tok2vec's output width where the config states it (dim nO), else 0."""
    return tok2vec.get_dim("nO") if tok2vec.has_dim("nO") and tok2vec.get_dim("nO") else 0


def get_structure(model: Model, tables: Dict[str, torch.Tensor], allowed=None) -> Structure:
    """The model's structure over the scorer's ``tables`` (:attr:`TokenScores.tables` as torch tensors): with an
    "interaction" table it reads the model's scores as emissions. ``allowed``: the label transitions a sequence
    may make (:class:`~spacy_nldm.structs.Transitions`; the entity components' BIO or BILUO rules), None for any."""
    interaction = tables.get("interaction")
    if model.attrs["structure"] == "tree":
        return LatentTree(max_dist=model.attrs["max_dist"], distance_bias=tables.get("distance_bias"),
                          allowed=allowed, interaction=interaction)
    return Chain(order=model.attrs["order"], trigram=tables.get("trigram"), allowed=allowed, interaction=interaction)


def torch_scorer(model: Model) -> torch.nn.Module:
    """The model's torch edge scorer (:mod:`.scorers`), inside the head's shim: its ``nI`` is the width of the
    vectors it reads, its ``nO`` the number of labels."""
    return model.get_ref("head").shims[0]._model


def resize_labels(model: Model, n_labels: int) -> None:
    """Set the number of labels; trained values of the existing labels are kept."""
    model.set_dim("nO", n_labels, force=True)
    scorer = torch_scorer(model)
    if scorer.nI > 0 and scorer.nO != n_labels:
        scorer.resize(scorer.nI, n_labels)


NO_WIDTH = "spacy-nldm: cannot infer the tok2vec width without sample docs"


def init(model: Model, X: Optional[List[Doc]] = None, Y=None) -> None:
    tok2vec, own = model.get_ref("tok2vec"), model.layers[1] if len(model.layers) == 3 else None
    if X is not None:
        tok2vec.initialize(X=X)
        if own is not None:  # (the mixed window encoder reads the tok2vec's vectors: its width from them)
            own.initialize(X=(X, tok2vec.predict(X) if len(own.layers) > 1 else None))
    else:
        try:
            for layer in model.layers[:-1]:
                layer.initialize()
        except ValueError as err:  # a layer of the head's own could not infer its input width
            if _stated_width(tok2vec):
                raise
            raise ValueError(NO_WIDTH) from err
    nI = _stated_width(tok2vec)
    if not nI:
        if X is None:
            raise ValueError(NO_WIDTH)
        nI = tok2vec.predict(X[:1])[0].shape[1]
    if own is not None:
        nI += own.layers[0].get_dim("nO")
    nO = model.get_dim("nO") if model.has_dim("nO") else None
    if not nO:
        raise ValueError("spacy-nldm: set the number of labels (dim nO) before initializing the model")
    torch_scorer(model).resize(nI, nO, keep=False)  # initialize: fresh weights


def forward(model: Model, docs: List[Doc], is_train: bool):
    """The scorer runs on the batch's tokens (T, nI) -> scores (T, M) or (T, X, C, M) and its tables. Backprop takes a
    :class:`~.segments.ScoreGradient` and sends the tok2vec its gradient times ``tok2vec_factor``; the head's
    own layers get theirs unscaled."""
    tok2vec, head = model.layers[0], model.layers[-1]
    own = model.layers[1] if len(model.layers) == 3 else None
    ops = model.ops
    if not any(len(doc) for doc in docs):  # nothing to encode (a listener could not answer)
        (F, tables), _ = head(ops.alloc2f(0, torch_scorer(model).nI), False)
        return TokenScores(F, numpy.zeros(len(docs), dtype="int64"), tables), lambda d_scores: []
    vecs, backprop_tok2vec = tok2vec(docs, is_train)
    features, backprop_own = own((docs, vecs), is_train) if own is not None else (vecs, None)
    lengths = numpy.array([len(v) for v in features], dtype="int64")
    # an empty doc's vectors may have any width (spacy-transformers' listener gives (0, 0))
    filled = [v for v in features if len(v)]
    X = ops.xp.concatenate(filled) if filled else ops.alloc2f(0, torch_scorer(model).nI)
    (F, tables), backprop_head = head(ops.asarray2f(X), is_train)

    def backprop(d_scores: ScoreGradient):
        dX = backprop_head((d_scores.scores, d_scores.tables))
        starts = numpy.cumsum(lengths) - lengths
        d_features = [dX[start : start + n] if n else ops.alloc2f(*v.shape)
                      for start, n, v in zip(starts, lengths, features)]
        d_vecs = backprop_own(d_features) if backprop_own is not None else d_features
        factor = d_scores.tok2vec_factor
        return backprop_tok2vec([d * factor for d in d_vecs] if factor != 1.0 else d_vecs)

    return TokenScores(F, lengths, tables), backprop


def _scorer_inputs(model: Model, X, is_train: bool):
    """The scorer's input (T, nI) as torch, asking for its factored scores and tables; backprop: the input's
    gradient."""
    X_torch = xp2torch(X, requires_grad=is_train, device=model.shims[0].device)
    return ArgsKwargs(args=(X_torch,), kwargs={"factored": True}), lambda d_inputs: torch2xp(d_inputs.args[0])


def _scorer_outputs(model: Model, inputs_outputs, is_train: bool):
    """(scores, tables) from torch (the tables copied: some are the scorer's parameters); backprop: their
    gradients (d_scores, d_tables) handed to torch together."""
    _, (F, tables) = inputs_outputs
    device = model.shims[0].device

    def backprop(d_outputs):
        d_F, d_tables = d_outputs
        names = [name for name in tables if name in d_tables]
        return ArgsKwargs(args=([F] + [tables[name] for name in names],),
                          kwargs={"grad_tensors": [xp2torch(d_F, device=device)]
                                  + [xp2torch(d_tables[name], device=device) for name in names]})

    return (torch2xp(F), {name: torch2xp(table).copy() for name, table in tables.items()}), backprop
