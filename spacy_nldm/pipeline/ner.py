"""``StructuredEntityRecognizer``: the trainable component behind ``crf_ner`` and ``nldm_ner``.

It learns from and writes ``Doc.ents``. Its labels are the entity types (``"person"``, ...), collected at
``initialize``; the model scores one tag per token in the ``scheme`` built from them
(:func:`~spacy_nldm.structs.entity_labels`: ``O``, then ``B-``/``I-`` per type, with ``L-``/``U-`` for
BILUO). The scheme's rules (:func:`~spacy_nldm.structs.allowed_transitions`: ``I-X`` only after ``B-X`` or
``I-X``, ...) hold in every computation of the CRF, so an invalid tag sequence has probability 0 and is
never decoded; the NLDM's latent tree does not order neighbours, so its distribution is left as it is and
its decoder returns the valid sequence with the most correct tags expected under its exact marginals.

Gold annotation is read from the reference doc's entities; tokens whose annotation is missing (spaCy's
``ent_iob == 0``, or predicted tokens that do not align to whole gold entities) have every tag allowed in
the loss (marginalised), as the taggers do for missing tags. A sentence longer than ``max_length`` is
labelled in windows: an entity across a window's edge is cut there (in training and in prediction).
"""
import warnings
from typing import Callable, Dict, Iterable, List, Optional, Tuple

import numpy
import torch
from spacy.attrs import ENT_IOB, ENT_TYPE, ORTH
from spacy.tokens import Doc, Span
from spacy.training import Example
from spacy.vocab import Vocab
from thinc.api import Model

from .. import structs
from ..defaults import CRF_NER
from ..models.segments import doc_segments
from ..models.tagger import get_structure
from .tagger import Predictions, StructuredTagger

#: spaCy's ENT_IOB codes
_MISSING, _INSIDE, _OUTSIDE, _BEGIN = 0, 1, 2, 3


class StructuredEntityRecognizer(StructuredTagger):
    """Predicts ``Doc.ents`` with a structured output layer (a CRF, or the NLDM).

    scheme: "BIO" or "BILUO", the tags the entities are learnt in.
    decode: (CRF) "viterbi" (the best valid tag sequence) or "posterior" (the valid sequence with the largest
        sum of tag marginals); the NLDM always decodes the latter.
    The other settings are the taggers' (:class:`~spacy_nldm.pipeline.tagger.StructuredTagger`); defaults in
    :mod:`spacy_nldm.defaults` (``CRF_NER``, ``NLDM_NER``).
    """

    attrs = ("ents",)

    def __init__(
        self,
        vocab: Vocab,
        model: Model,
        name: str = "crf_ner",
        *,
        scheme: str = CRF_NER["scheme"],
        decode: str = CRF_NER["decode"],
        loss: str = "exact",
        max_length: int = CRF_NER["max_length"],
        store_probs: bool = CRF_NER["store_probs"],
        normalize_loss: bool = CRF_NER["normalize_loss"],
        tok2vec_loss: Optional[str] = CRF_NER["tok2vec_loss"],
        label_smoothing: float = CRF_NER["label_smoothing"],
        average_params: bool = CRF_NER["average_params"],
        scorer: Optional[Callable] = None,
    ):
        if scheme not in structs.SCHEMES:
            raise ValueError(f"[spacy-nldm] {name}: scheme must be one of {structs.SCHEMES}, not {scheme!r}")
        super().__init__(
            vocab, model, name, attr="ents", decode=decode, loss=loss, max_length=max_length,
            store_probs=store_probs, store_tree=False, normalize_loss=normalize_loss, tok2vec_loss=tok2vec_loss,
            label_smoothing=label_smoothing, average_params=average_params, scorer=scorer,
        )
        self.scheme = scheme
        self._rules: Tuple[Tuple[str, ...], Tuple[str, ...], Optional[structs.Transitions]] = ((), (), None)

    # ------------------------------------------------------------------ tags
    @property
    def outputs(self) -> Tuple[str, ...]:
        """The tags the model scores: :func:`~spacy_nldm.structs.entity_labels` of the entity types."""
        return self._tags_and_rules()[0]

    @property
    def allowed(self) -> structs.Transitions:
        """The scheme's rules over :attr:`outputs`."""
        return self._tags_and_rules()[1]

    def _tags_and_rules(self) -> Tuple[Tuple[str, ...], structs.Transitions]:
        labels, tags, allowed = self._rules
        if labels != self.labels or allowed is None:
            tags = tuple(structs.entity_labels(self.labels, self.scheme))
            allowed = structs.allowed_transitions(tags, self.scheme)
            self._rules = (self.labels, tags, allowed)
        return tags, allowed

    def structure(self, model: Model, tables: Dict[str, torch.Tensor]):
        return get_structure(model, tables, allowed=self.allowed)

    def labels_in(self, examples: Iterable[Example]) -> List[str]:
        """The entity types of the examples' gold docs, sorted."""
        return sorted({ent.label_ for eg in examples for ent in eg.reference.ents})

    def _weight_own_score(self, nlp) -> None:
        """The factory's score weights (ents_f) are the ones to use."""

    # ------------------------------------------------------------------ gold
    def _gold_ids(self, example: Example, index: Dict[str, int]) -> numpy.ndarray:
        """The gold tag id of each predicted token (-1: unknown), entities cut at the edges of the windows
        the component labels (:func:`~spacy_nldm.models.segments.doc_segments`)."""
        x, y = example.predicted, example.reference
        if not len(x):
            return numpy.zeros(0, dtype="int64")
        if not y.has_annotation("ENT_IOB"):
            return numpy.full(len(x), -1, dtype="int64")
        if len(x) == len(y) and numpy.array_equal(x.to_array(ORTH), y.to_array(ORTH)):
            iob = y.to_array(ENT_IOB).astype("int64")
            types = [y.vocab.strings[int(v)] if v else "" for v in y.to_array(ENT_TYPE)]
        else:  # spaCy's alignment: BILUO tags of the predicted tokens, None where unknown
            iob, types = _codes(example.get_aligned_ner())
        with warnings.catch_warnings():  # (the component warns once, when it cuts the scores)
            warnings.simplefilter("ignore")
            windows = doc_segments(x, self.max_length)
        return self._tag_ids(iob, types, windows, index, y)

    def _tag_ids(self, iob: numpy.ndarray, types: List[str], windows, index: Dict[str, int], doc: Doc
                 ) -> numpy.ndarray:
        n = len(iob)
        first = numpy.zeros(n, dtype=bool)
        first[[start for start, _ in windows]] = True
        inside = iob == _INSIDE
        begins = (iob == _BEGIN) | (inside & first)
        continued = numpy.zeros(n, dtype=bool)  # the next token continues the entity
        continued[:-1] = inside[1:] & ~first[1:]
        ids = numpy.full(n, -1, dtype="int64")
        ids[iob == _OUTSIDE] = index["O"]
        for i in numpy.flatnonzero(begins | inside):
            if self.scheme == "BILUO":
                prefix = ("B" if continued[i] else "U") if begins[i] else ("I" if continued[i] else "L")
            else:
                prefix = "B" if begins[i] else "I"
            tag = f"{prefix}-{types[i]}"
            if tag not in index:
                raise ValueError(
                    f"[spacy-nldm] {self.name}: the gold entity type {types[i]!r} of token {i} in the doc "
                    f"{doc.text[:60]!r} is not one of the {len(self.labels)} entity types of the component "
                    f"({', '.join(self.labels)}); initialize on data that has it or call add_label() first"
                )
            ids[i] = index[tag]
        return ids

    # ------------------------------------------------------------ annotation
    def set_annotations(self, docs: Iterable[Doc], preds: Predictions) -> None:
        """``Doc.ents`` from the decoded tags (the doc's other tokens become outside any entity), and with
        ``store_probs`` the tag marginals in ``Doc._.nldm_probs`` (labels in ``Doc._.nldm_prob_labels``)."""
        docs = list(docs)
        tags = self.outputs
        prefix = [tag.partition("-")[0] for tag in tags]
        kinds = [self.vocab.strings.add(tag.partition("-")[2]) if tag != "O" else 0 for tag in tags]
        found: Dict[int, List[Tuple[int, int, int]]] = {d: [] for d in range(len(docs))}
        if self.store_probs:
            for doc in docs:
                doc._.nldm_probs = numpy.zeros((len(doc), len(tags)), dtype="float32")
                doc._.nldm_prob_labels = list(tags)
        for s, (d, start, end) in enumerate(preds.segments):
            labels = preds.labels[s, : end - start].tolist()
            found[d].extend((start + a, start + b, kinds[labels[a]]) for a, b in tag_spans(labels, prefix, kinds))
            if preds.probs is not None:
                docs[d]._.nldm_probs[start:end] = preds.probs[s, : end - start]
        for d, doc in enumerate(docs):
            doc.set_ents([Span(doc, a, b, label=kind) for a, b, kind in found[d]], default="outside")

    def score(self, examples: Iterable[Example], **kwargs):
        """spaCy's entity scores (``ents_p``, ``ents_r``, ``ents_f``, ``ents_per_type``)."""
        return self.scorer(examples, **kwargs)


def tag_spans(labels: List[int], prefix: List[str], kinds: List[int]) -> List[Tuple[int, int]]:
    """(start, end) of the entities of a tag sequence (tag ids; ``prefix`` and ``kinds``: each tag's prefix
    and entity type). Valid sequences read as the scheme says; elsewhere (an entity cut at a window's edge)
    an I or L tag that continues nothing begins an entity, and a B not followed by I or L is one token."""
    spans: List[Tuple[int, int]] = []
    start = None
    for t, label in enumerate(labels):
        p = prefix[label]
        if start is not None and (p in ("O", "B", "U") or kinds[label] != kinds[labels[start]]):
            spans.append((start, t))
            start = None
        if p == "O":
            continue
        if start is None:
            start = t
        if p in ("L", "U"):
            spans.append((start, t + 1))
            start = None
    if start is not None:
        spans.append((start, len(labels)))
    return spans


def _codes(tags: List[Optional[str]]) -> Tuple[numpy.ndarray, List[str]]:
    """spaCy's ENT_IOB codes and the entity types of BILUO tags (None or "-": unknown)."""
    iob = numpy.full(len(tags), _MISSING, dtype="int64")
    types = [""] * len(tags)
    for i, tag in enumerate(tags):
        if tag in (None, "-", ""):
            continue
        if tag == "O":
            iob[i] = _OUTSIDE
            continue
        prefix, _, kind = tag.partition("-")
        iob[i] = _BEGIN if prefix in ("B", "U") else _INSIDE
        types[i] = kind
    return iob, types
