"""Thinc architectures: edge scorers (PyTorch), the structured tagger model, the paper's encoder.

Registered names: ``spacy-nldm.NLDMTagger.v2``, ``spacy-nldm.CRFTagger.v2``,
``spacy-nldm.BiLSTMEncoder.v1``, ``spacy-nldm.TorchBiLSTMEncoder.v1``,
``spacy-nldm.WordDropoutHashEmbed.v1`` (architectures) and ``spacy-nldm.minilm_path.v1`` (misc).
"""
from .architectures import (
    build_bilstm_encoder,
    build_crf_tagger,
    build_nldm_tagger,
    build_torch_bilstm_encoder,
    build_word_dropout_hash_embed,
    minilm_path,
)
from .structure import Chain, LatentTree, Structure
from .segments import ScoreGradient, SegmentScores, TokenScores
from .tagger import get_structure, resize_labels

__all__ = [
    "build_nldm_tagger",
    "build_crf_tagger",
    "build_bilstm_encoder",
    "build_torch_bilstm_encoder",
    "build_word_dropout_hash_embed",
    "minilm_path",
    "Structure",
    "LatentTree",
    "Chain",
    "SegmentScores",
    "TokenScores",
    "ScoreGradient",
    "get_structure",
    "resize_labels",
]
