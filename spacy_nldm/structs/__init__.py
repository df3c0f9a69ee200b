"""The structured core: PyTorch, and for the NLDM on the CPU a compiled lane (numba); no spaCy import.

Latent projective trees over labels (NLDM), :mod:`.tree`: :func:`log_partition`, :func:`viterbi`,
:func:`marginals` (:func:`label_marginals`: their label part only), :func:`canonical_heads` (the
canonical tree of given labels); :func:`tree_lane` says which lane computes them, ``lane=`` forces one.
Linear-chain CRFs of order 1 and 2, :mod:`.chain`: :func:`crf_log_partition`, :func:`crf_viterbi`,
:func:`crf_marginals`. They take (B, N, M, M[, M]) potentials, or for order 1 a :class:`ChainScores` (emissions,
one transition matrix, start and end scores, as pytorch-crf holds them) and for order 2 a
:class:`SecondOrderScores` (emissions and one trigram table), which skip building the potentials;
:func:`crf_lane` says which lane computes them (``lane=`` forces one; :func:`crf_viterbi` has its own,
compiled for ChainScores on the CPU). Decoders return :class:`Decoded` (labels, heads, score).
Allowed-transition constraints (BIO, BILUO), :mod:`.constraints`: :func:`entity_labels`,
:func:`allowed_transitions`, :func:`constrain` (-inf on every forbidden transition's scores) and
:func:`valid_decode` (the best valid sequence under summed token scores).
Entity spans, :mod:`.spans`: :func:`entity_tags`, :func:`crf_span_log_probs` (chains) and
:func:`span_log_probs` (NLDM), the exact log probability that given tokens form one entity of a type, and
:func:`span_mask`, the label mask of that event.
The k best label sequences, :mod:`.nbest`: :func:`crf_nbest` (chains, exact) and :func:`label_nbest` (NLDM:
the k best by its label marginals, with exact probabilities); both return :class:`NBest`.
Score layouts are documented in :mod:`.tree` and :mod:`.chain`; semirings in :mod:`.semiring`.
"""
from .chain_second import SecondOrderScores
from .chain import ChainScores, chain_potentials, crf_lane, crf_log_partition, crf_marginals, crf_score, crf_viterbi
from .checks import Decoded
from .constraints import SCHEMES, Transitions, allowed_transitions, constrain, entity_labels, valid_decode
from .spans import EntityTags, crf_span_log_probs, entity_tags, span_log_probs, span_mask
from .nbest import NBest, crf_nbest, label_nbest
from .semiring import LogSemiring, MaxSemiring, Semiring
from .tree import (
    DirectionalScores,
    Marginals,
    canonical_heads,
    count_trees,
    distance_bias_matrix,
    label_marginals,
    log_partition,
    marginals,
    sentence_by_sentence,
    tree_lane,
    viterbi,
)

__all__ = [
    "log_partition",
    "viterbi",
    "marginals",
    "label_marginals",
    "canonical_heads",
    "count_trees",
    "tree_lane",
    "sentence_by_sentence",
    "DirectionalScores",
    "distance_bias_matrix",
    "Marginals",
    "Decoded",
    "SecondOrderScores",
    "crf_log_partition",
    "crf_viterbi",
    "crf_marginals",
    "crf_score",
    "crf_lane",
    "chain_potentials",
    "ChainScores",
    "Semiring",
    "LogSemiring",
    "MaxSemiring",
    "SCHEMES",
    "Transitions",
    "entity_labels",
    "allowed_transitions",
    "constrain",
    "valid_decode",
    "EntityTags",
    "entity_tags",
    "crf_span_log_probs",
    "span_log_probs",
    "span_mask",
    "NBest",
    "crf_nbest",
    "label_nbest",
]
