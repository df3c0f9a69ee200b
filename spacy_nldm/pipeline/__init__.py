"""The spaCy components ``nldm_tagger`` and ``crf_tagger``, their scorer, extensions and display."""
from .display import render_tree, tree_to_displacy
from .extensions import register_extensions
from .factories import make_crf_tagger, make_nldm_tagger
from .scorers import make_tag_scorer
from .tagger import StructuredTagger

__all__ = [
    "StructuredTagger",
    "make_nldm_tagger",
    "make_crf_tagger",
    "make_tag_scorer",
    "render_tree",
    "tree_to_displacy",
    "register_extensions",
]
