"""The spaCy components ``nldm_tagger``, ``crf_tagger``, ``nldm_ner`` and ``crf_ner``, their scorer, extensions and
display.

    nlp = spacy.blank("en")
    nlp.add_pipe("nldm_tagger", config={"attr": "tag", "model": {"edge_scorer": "trilinear", "max_dist": 5}})
    nlp.initialize(lambda: examples)  # labels collected from the examples
    doc = nlp("ikr smh he asked fir yo last name")
    [(t.tag_, t._.nldm_head) for t in doc], doc._.nldm_tree_score
    html = render_tree(doc)  # displaCy drawing of the latent label tree
"""
from .calibration import fit_entity_bias, fit_temperature
from .display import entities_to_displacy, render_entities, render_tree, tree_to_displacy
from .extensions import register_extensions
from .factories import make_crf_ner, make_crf_tagger, make_nldm_ner, make_nldm_tagger
from .ner import StructuredEntityRecognizer
from .scorers import make_tag_scorer
from .tagger import StructuredTagger

__all__ = [
    "StructuredTagger",
    "StructuredEntityRecognizer",
    "make_nldm_ner",
    "make_crf_ner",
    "make_nldm_tagger",
    "make_crf_tagger",
    "make_tag_scorer",
    "render_tree",
    "render_entities",
    "entities_to_displacy",
    "tree_to_displacy",
    "register_extensions",
    "fit_entity_bias",
    "fit_temperature",
]
