"""displaCy drawings: a Doc's decoded latent label tree, and its entities with their probabilities."""
from typing import Any, Dict, Optional

from spacy import displacy
from spacy.displacy.render import DEFAULT_LABEL_COLORS
from spacy.tokens import Doc

ROOT = "ROOT"


def tree_to_displacy(doc: Doc, attr: Optional[str] = None) -> Dict[str, Any]:
    """displaCy "manual" dependency data: a ROOT word first, then the tokens with their predicted
    labels (``attr`` "tag" or "pos"; default: tag if set, else pos) as tags, one arc per token
    from its ``Token._.nldm_head`` (None: the ROOT word). ValueError for a doc without a decoded
    latent tree (not tagged by ``nldm_tagger``)."""
    if doc._.nldm_tree_score is None:
        raise ValueError(
            f"[spacy-nldm] the doc {doc.text[:40]!r} has no latent tree to draw (Doc._.nldm_tree_score is None): "
            "tag it with a pipeline whose nldm_tagger decodes one (crf_tagger and spaCy's tagger do not)"
        )
    if attr is None:
        attr = "tag" if doc.has_annotation("TAG") else "pos"
    words = [{"text": ROOT, "tag": ""}]
    words += [{"text": t.text, "tag": getattr(t, attr + "_")} for t in doc]
    arcs = []
    for t in doc:
        head = 0 if t._.nldm_head is None else t._.nldm_head + 1
        dep = t.i + 1
        arcs.append({"start": min(head, dep), "end": max(head, dep), "label": "", "dir": "right" if head < dep else "left"})
    return {"words": words, "arcs": arcs}


def render_tree(doc: Doc, attr: Optional[str] = None, *, jupyter: Optional[bool] = None, **options) -> str:
    """displaCy markup (SVG) of the latent label tree; shown inline in Jupyter."""
    return displacy.render(tree_to_displacy(doc, attr), style="dep", manual=True, jupyter=jupyter, options=options)


def entities_to_displacy(doc: Doc, digits: int = 2) -> Dict[str, Any]:
    """displaCy "manual" entity data: the doc's text and its entities, each labelled with its type and, where
    the entity components set it, its probability (``Span._.nldm_prob``), e.g. ``person 0.93``."""
    ents = []
    for ent in doc.ents:
        prob = ent._.nldm_prob if ent.has_extension("nldm_prob") else None
        label = ent.label_ if prob is None else f"{ent.label_} {prob:.{digits}f}"
        ents.append({"start": ent.start_char, "end": ent.end_char, "label": label})
    return {"text": doc.text, "ents": ents, "title": None}


def render_entities(doc: Doc, *, digits: int = 2, jupyter: Optional[bool] = None, **options) -> str:
    """displaCy markup (HTML) of the doc's entities with their probabilities; shown inline in Jupyter. Each
    label keeps the colour displaCy gives its type."""
    data = entities_to_displacy(doc, digits)
    colors = dict(options.pop("colors", {}))
    for ent, shown in zip(doc.ents, data["ents"]):
        color = colors.get(ent.label_) or DEFAULT_LABEL_COLORS.get(ent.label_) or DEFAULT_LABEL_COLORS.get(ent.label_.upper())
        if color:
            colors.setdefault(shown["label"], color)
    return displacy.render(data, style="ent", manual=True, jupyter=jupyter, options={**options, "colors": colors})
