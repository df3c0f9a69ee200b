"""``StructuredEntityRecognizer``: the trainable component behind ``crf_ner`` and ``nldm_ner``.

It learns from and writes ``Doc.ents``. Its labels are the entity types (``"person"``, ...), collected at
``initialize``; the model scores one tag per token in the ``scheme`` built from them
(:func:`~spacy_nldm.structs.entity_labels`: ``O``, then ``B-``/``I-`` per type, with ``L-``/``U-`` for
BILUO). The scheme's rules (:func:`~spacy_nldm.structs.allowed_transitions`: ``I-X`` only after ``B-X`` or
``I-X``, ...) hold in every computation of the CRF, so an invalid tag sequence has probability 0 and is
never decoded; the NLDM's latent tree does not order neighbours, so its distribution is left as it is and
its decoder returns the valid sequence with the most correct tags expected under its exact marginals.

Each entity gets its probability under the model (``Span._.nldm_prob``; for the CRF and the NLDM alike the exact
probability that its tokens form exactly that entity, :meth:`~spacy_nldm.models.structure.Structure.span_log_probs`),
and the entities go, with those probabilities as ``attrs["scores"]``, to the span group ``spans_key`` as spaCy's
``spancat`` stores its spans. With ``n_best`` the doc's k most probable entity sets are kept too.

Gold annotation is read from the reference doc's entities; tokens whose annotation is missing (spaCy's
``ent_iob == 0``, or predicted tokens that do not align to whole gold entities) have every tag allowed in
the loss (marginalised), as the taggers do for missing tags. Spans of the gold doc's span group
``incorrect_spans`` (:data:`~spacy_nldm.defaults.INCORRECT_SPANS_KEY`, as spaCy's ``ner`` reads its
``incorrect_spans_key``) are known not to be entities of their type: the loss sums over the tag sequences the
annotation allows in which none of them is an entity (exactly, for the CRF and the NLDM alike). A sentence longer
than ``max_length`` is labelled in windows: an entity across a window's edge is cut there (in training and in
prediction).
"""
import math
import warnings
from typing import Callable, Dict, Iterable, List, NamedTuple, Optional, Tuple

import numpy
import torch
from spacy.attrs import ENT_IOB, ENT_TYPE
from spacy.tokens import Doc, Span, SpanGroup
from spacy.training import Example
from spacy.vocab import Vocab
from thinc.api import Model

from .. import structs
from ..defaults import CRF_NER, INCORRECT_SPANS_KEY, NER_TRAINING, NLDM_NER
from ..models.segments import doc_segments
from ..models.structure import ExclusionError, real_tokens
from ..models.tagger import get_structure
from .tagger import Predictions, StructuredTagger, same_tokens

#: spaCy's ENT_IOB codes
_MISSING, _INSIDE, _OUTSIDE, _BEGIN = 0, 1, 2, 3
#: the longest span ``candidate_threshold`` considers (tokens)
CANDIDATE_WIDTH = 32


class StructuredEntityRecognizer(StructuredTagger):
    """Predicts ``Doc.ents`` with a structured output layer (a CRF, or the NLDM).

    scheme: "BIO" or "BILUO", the tags the entities are learnt in.
    decode: (CRF) "viterbi" (the best valid tag sequence) or "posterior" (the valid sequence with the largest
        sum of tag marginals); the NLDM always decodes the latter.
    spans_key: the span group that gets the kept entities (and the candidates) with their probabilities in
        ``attrs["scores"]``, as spaCy's ``spancat`` stores its spans; None: no span group.
    threshold: entities of a lower probability are left out of ``Doc.ents`` (and of the span group).
    candidate_threshold: also put in the span group every span that was not decoded and has at least this
        probability (spans that overlap the entities included: for recall-oriented uses); None: none.
    missing_entity_bias: in training, a score added to every entity tag (``B-``, ``I-``, ...) of each token whose
        annotation is missing, in the loss's sum over the labellings the annotation allows: each such labelling
        is weighted by exp(bias) per missing token it puts inside an entity. 0: the plain likelihood of what is
        annotated (the model's own belief fills the gaps, which for a model that mostly predicts ``O`` reads them
        as ``O``); > 0: unannotated tokens are read as likelier inside an entity than the model thinks, for
        data where entities were left out (fit it on a fully annotated dev set); < 0: likelier ``O``.
        Prediction ignores it.
    temperature: at predict time every score (emissions, transitions, arcs) is divided by it, before
        decoding and before any probability: T > 1 flattens the model's distribution, T < 1 sharpens it; 1:
        the distribution as trained. Training ignores it. :func:`~spacy_nldm.pipeline.fit_temperature` fits it
        on held-out docs. The CRF's Viterbi entities do not change with it, only their probabilities.
    n_best: keep the doc's k most probable entity sets in ``Doc._.nldm_nbest`` (0: none). The CRF's are
        exact; the NLDM's are the k valid tag sequences of the largest products of tag marginals, ordered
        by their exact probabilities (:func:`~spacy_nldm.structs.label_nbest`).
    The other settings are the taggers' (:class:`~spacy_nldm.pipeline.tagger.StructuredTagger`); defaults in
    :mod:`spacy_nldm.defaults` (``CRF_NER``, ``NLDM_NER``; ``NER_TRAINING``: the loss's, not settings).

    Saved with the component beside its labels (``cfg``), because it is fitted on data rather than set:
    :attr:`entity_bias`, a score added at predict time to every token's entity-start tag (``B-``, and ``U-`` in
    BILUO), before the temperature: each entity of a tag sequence gets it once, so the model's distribution
    is multiplied by exp(bias) per entity and renormalised. 0 (the default): the model as trained.
    :func:`~spacy_nldm.pipeline.fit_entity_bias` fits it for entity F1 on held-out docs.
    """

    attrs = ("ents",)
    #: the gold docs' span group of incorrect spans (:meth:`incorrect_spans`)
    incorrect_spans_key: str = INCORRECT_SPANS_KEY

    def __init__(
        self,
        vocab: Vocab,
        model: Model,
        name: str = "crf_ner",
        *,
        scheme: str = CRF_NER["scheme"],
        decode: str = CRF_NER["decode"],
        loss: str = NLDM_NER["loss"],
        max_length: int = CRF_NER["max_length"],
        store_probs: bool = CRF_NER["store_probs"],
        spans_key: Optional[str] = CRF_NER["spans_key"],
        threshold: float = CRF_NER["threshold"],
        candidate_threshold: Optional[float] = CRF_NER["candidate_threshold"],
        n_best: int = CRF_NER["n_best"],
        temperature: float = CRF_NER["temperature"],
        missing_entity_bias: float = CRF_NER["missing_entity_bias"],
        scorer: Optional[Callable] = None,
    ):
        if scheme not in structs.SCHEMES:
            raise ValueError(f"[spacy-nldm] {name}: scheme must be one of {structs.SCHEMES}, not {scheme!r}")
        if not 0.0 <= threshold <= 1.0:
            raise ValueError(f"[spacy-nldm] {name}: threshold must be in [0, 1], not {threshold}")
        if candidate_threshold is not None and not 0.0 < candidate_threshold <= 1.0:
            raise ValueError(f"[spacy-nldm] {name}: candidate_threshold must be in (0, 1] or null, not {candidate_threshold}")
        if isinstance(n_best, bool) or not isinstance(n_best, int) or n_best < 0:
            raise ValueError(f"[spacy-nldm] {name}: n_best must be an integer >= 0, not {n_best!r}")
        if not _is_number(temperature) or not 0.0 < temperature < float("inf"):
            raise ValueError(f"[spacy-nldm] {name}: temperature must be a positive number, not {temperature!r}")
        if not _is_number(missing_entity_bias) or not math.isfinite(missing_entity_bias):
            raise ValueError(f"[spacy-nldm] {name}: missing_entity_bias must be a finite number, "
                             f"not {missing_entity_bias!r}")
        super().__init__(
            vocab, model, name, attr="ents", decode=decode, loss=loss, max_length=max_length,
            store_probs=store_probs, store_tree=False, scorer=scorer, **NER_TRAINING,
        )
        self.scheme = scheme
        self.spans_key = spans_key
        self.threshold = threshold
        self.candidate_threshold = candidate_threshold
        self.n_best = n_best
        self.temperature = float(temperature)
        self.missing_entity_bias = float(missing_entity_bias)
        self._scheme: Optional[SchemeParts] = None

    # ------------------------------------------------------------------ tags
    @property
    def outputs(self) -> Tuple[str, ...]:
        """The tags the model scores: :func:`~spacy_nldm.structs.entity_labels` of the entity types."""
        return self._parts().tags

    @property
    def allowed(self) -> structs.Transitions:
        """The scheme's rules over :attr:`outputs`."""
        return self._parts().allowed

    def _parts(self) -> "SchemeParts":
        """What the tags are made of, derived from :attr:`labels` and ``scheme`` once per set of labels."""
        if self._scheme is None or self._scheme.labels != self.labels:
            self._scheme = SchemeParts.of(self.labels, self.scheme)
        return self._scheme

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
        if same_tokens(example):
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

    def incorrect_spans(self, example: Example) -> List[Tuple[int, int, str]]:
        """(start, end, type) in the predicted tokens of each span of the reference doc's span group
        :attr:`incorrect_spans_key`: a span known not to be an entity of that type, as spaCy's ``ner`` reads its
        ``incorrect_spans_key``. A span that does not align to whole predicted tokens, or of a type the component
        does not know (the model cannot predict it), rules nothing out and is left out."""
        y = example.reference
        if self.incorrect_spans_key not in y.spans or not len(y.spans[self.incorrect_spans_key]):
            return []
        group = y.spans[self.incorrect_spans_key]
        if not same_tokens(example):
            group = example.get_aligned_spans_y2x(group, allow_overlap=True)
        known = set(self.labels)
        return [(span.start, span.end, span.label_) for span in group if span.label_ in known]

    def gold_offsets(self, gold: torch.Tensor, lengths: torch.Tensor) -> Optional[torch.Tensor]:
        """On the real tokens (``lengths`` (S,)) of unknown annotation (more than one tag allowed in the gold mask
        (S, L, M)), -bias on ``O`` for a positive ``missing_entity_bias``, the bias on every entity tag for a
        negative one; 0 elsewhere. The loss's log S then weights each labelling the annotation allows by exp(bias) per such
        token it puts inside an entity, up to a constant factor (so that its gradient is the same, and the loss,
        every offset <= 0, stays >= 0). None at bias 0 (the plain marginal likelihood) and where every token is
        annotated."""
        bias = self.missing_entity_bias
        if not bias:
            return None
        unknown = ((gold.sum(-1) > 1) & real_tokens(gold, lengths))[..., None]
        if not bool(unknown.any()):
            return None
        outside = torch.tensor([prefix == "O" for prefix in self._parts().prefixes], device=gold.device)
        against = outside if bias > 0 else ~outside  # the reading the bias argues against
        return (unknown & against).to(torch.float32) * -abs(bias)

    def exclusion_loss(self, examples: List[Example], scores, structure, F: torch.Tensor, lengths: torch.Tensor,
                       gold: torch.Tensor) -> torch.Tensor:
        """-sum over segments of log P(none of its incorrect spans is an entity | its gold annotation)
        (:meth:`incorrect_spans`; exact, :meth:`~spacy_nldm.models.structure.Structure.excluded_nll`): 0
        without any. A span across a segment's edge is never one entity (entities are cut there) and rules
        nothing out."""
        parts = self._parts()
        types = {label: j for j, label in enumerate(parts.labels)}
        segments_of: Dict[int, List[int]] = {}
        for s, segment in enumerate(scores.segments):
            segments_of.setdefault(segment.doc, []).append(s)
        rows = []  # (segment, start, end, type) of each incorrect span within one segment
        for d, segments in segments_of.items():
            for a, b, label in self.incorrect_spans(examples[d]):
                rows += [(s, a - scores.segments[s].start, b - scores.segments[s].start, types[label])
                         for s in segments if scores.segments[s].start <= a and b <= scores.segments[s].end]
        if not rows:
            return F.new_zeros(())
        if self.loss != "exact":
            raise ValueError(f"[spacy-nldm] {self.name}: incorrect spans (doc.spans[{self.incorrect_spans_key!r}]) "
                             f"need loss = \"exact\", not {self.loss!r}")
        spans = torch.tensor(rows, dtype=torch.long)
        masks = structs.span_mask(spans, parts.entity_tags, lengths.cpu(), gold.shape[1], gold.shape[2])
        try:
            added = structure.excluded_nll(F, lengths, gold, list(zip(spans[:, 0].tolist(), masks)))
        except ExclusionError as error:
            d, start, end = scores.segments[error.segment]
            raise ValueError(
                f"[spacy-nldm] {self.name}: the incorrect spans (doc.spans[{self.incorrect_spans_key!r}]) of the doc "
                f"{examples[d].reference.text[:60]!r}, tokens {start}-{end}: {error.problem}"
            ) from None
        return added.sum().to(F.dtype)

    # ------------------------------------------------------------ prediction
    def predict_scored(self, docs: List[Doc], token_scores) -> Predictions:
        """The decoded tags (:meth:`StructuredTagger.predict_scored`), and per segment its entities, the
        candidates and the n best tag sequences: ``preds.entities[s]`` and ``preds.candidates[s]`` lists of
        (start, end, type, probability) in the segment's tokens (type: the index in :attr:`labels`);
        ``preds.nbest`` None or (labels (S, k, L), log probabilities (S, k))."""
        preds = super().predict_scored(docs, token_scores)
        preds.entities = [[] for _ in preds.segments]
        preds.candidates = [[] for _ in preds.segments]
        preds.nbest = None
        if preds.scored is None:
            return preds
        structure, F, lengths = preds.scored
        parts = self._parts()
        tags, prefixes, kinds = parts.entity_tags, parts.prefixes, parts.kinds
        rows = []  # (segment, start, end, type) of the decoded entities, then of the candidates
        for s, (_, start, end) in enumerate(preds.segments):
            labels = preds.labels[s, : end - start].tolist()
            rows += [(s, a, b, kinds[labels[a]]) for a, b in tag_spans(labels, prefixes, kinds)]
        decoded = set(rows)
        if self.candidate_threshold is not None:
            probs = preds.probs if preds.probs is not None else structure.label_marginals(F, lengths).cpu().numpy()
            rows += [row for row in self._candidates(probs, preds.segments, tags) if row not in decoded]
        if rows:
            spans = torch.tensor(rows, dtype=torch.long, device=F.device)
            probs_of_spans = structure.span_log_probs(F, lengths, spans, tags).exp().cpu().numpy().tolist()
            for (s, a, b, kind), p in zip(rows, probs_of_spans):
                keep = (preds.entities if (s, a, b, kind) in decoded else preds.candidates)[s]
                keep.append((a, b, kind, float(p)))
        if self.n_best:
            found = structure.nbest(F, lengths, self.n_best)
            preds.nbest = (found.labels.cpu().numpy(), found.scores.double().cpu().numpy())
        return preds

    def _candidates(self, probs: numpy.ndarray, segments, tags: structs.EntityTags) -> List[Tuple[int, int, int, int]]:
        """(segment, start, end, type) of the spans whose every tag has a marginal of at least
        ``candidate_threshold`` (a span's probability is at most its least probable tag's marginal, so these
        hold every span of at least that probability), up to :data:`CANDIDATE_WIDTH` tokens. ``tags.types`` are
        :attr:`labels`, in their order: type j is label j."""
        low = self.candidate_threshold
        out = []
        for s, (_, start, end) in enumerate(segments):
            p = probs[s, : end - start]
            for j in range(len(tags.types)):
                b, i = int(tags.begin[j]), int(tags.inside[j])
                last, unit = int(tags.last[j]), int(tags.unit[j])
                for a in numpy.flatnonzero(p[:, unit if unit >= 0 else b] >= low):  # one token: B-X (BIO), U-X
                    out.append((s, int(a), int(a) + 1, j))
                for a in numpy.flatnonzero(p[:, b] >= low):  # longer: B-X, I-X ..., then I-X (BIO) or L-X
                    for e in range(int(a) + 1, min(len(p), int(a) + CANDIDATE_WIDTH)):
                        if p[e, last if last >= 0 else i] >= low:
                            out.append((s, int(a), e + 1, j))
                        if p[e, i] < low:
                            break
        return out

    # ------------------------------------------------------------ annotation
    def set_annotations(self, docs: Iterable[Doc], preds: Predictions) -> None:
        """``Doc.ents`` from the decoded entities of at least ``threshold`` probability (the doc's other tokens
        become outside any entity) with ``Span._.nldm_prob``; the span group ``spans_key`` with the same entities
        and the candidates, their probabilities in ``attrs["scores"]``; ``Doc._.nldm_nbest`` (``n_best``); with
        ``store_probs`` the tag marginals in ``Doc._.nldm_probs`` (labels in ``Doc._.nldm_prob_labels``)."""
        docs = list(docs)
        tags = self.outputs
        labels = [self.vocab.strings.add(label) for label in self.labels]
        ents: Dict[int, List[Tuple[int, int, int, float]]] = {d: [] for d in range(len(docs))}
        others: Dict[int, List[Tuple[int, int, int, float]]] = {d: [] for d in range(len(docs))}
        if self.store_probs:
            for doc in docs:
                doc._.nldm_probs = numpy.zeros((len(doc), len(tags)), dtype="float32")
                doc._.nldm_prob_labels = list(tags)
        low = self.candidate_threshold
        for s, (d, start, end) in enumerate(preds.segments):
            for a, b, k, p in preds.entities[s]:  # a decoded entity below threshold may still be a candidate
                if p >= self.threshold:
                    ents[d].append((start + a, start + b, k, p))
                elif low is not None and p >= low:
                    others[d].append((start + a, start + b, k, p))
            others[d] += [(start + a, start + b, k, p) for a, b, k, p in preds.candidates[s] if p >= low]
            if preds.probs is not None:
                docs[d]._.nldm_probs[start:end] = preds.probs[s, : end - start]
        for d, doc in enumerate(docs):
            kept = [Span(doc, a, b, label=labels[k]) for a, b, k, _ in ents[d]]
            doc.set_ents(kept, default="outside")
            for span, (_, _, _, p) in zip(doc.ents, ents[d]):
                span._.nldm_prob = p
            if self.spans_key is not None:
                group = kept + [Span(doc, a, b, label=labels[k]) for a, b, k, _ in others[d]]
                scores = [p for *_, p in ents[d]] + [p for *_, p in others[d]]
                doc.spans[self.spans_key] = SpanGroup(doc, name=self.spans_key, spans=group,
                                                      attrs={"scores": numpy.asarray(scores, dtype="float32")})
        if preds.nbest is not None:
            self._set_nbest(docs, preds, labels)

    def _set_nbest(self, docs: List[Doc], preds: Predictions, labels: List[int]) -> None:
        """Each doc's k most probable entity sets: its segments' k best sequences combined (the segments are
        independent, so a set's probability is the product of its segments')."""
        k = self.n_best
        seqs, log_p = preds.nbest
        parts = self._parts()
        prefixes, kinds = parts.prefixes, parts.kinds
        best: Dict[int, List[Tuple[float, List[Tuple[int, int, int]]]]] = {d: [(0.0, [])] for d in range(len(docs))}
        for s, (d, start, end) in enumerate(preds.segments):
            options = []
            for j in range(k):
                if not numpy.isfinite(log_p[s, j]):
                    continue
                tags = seqs[s, j, : end - start].tolist()
                options.append((float(log_p[s, j]), [(start + a, start + b, kinds[tags[a]])
                                                     for a, b in tag_spans(tags, prefixes, kinds)]))
            pairs = [(p + q, e + f) for p, e in best[d] for q, f in options]
            best[d] = sorted(pairs, key=lambda pair: -pair[0])[:k]
        for d, doc in enumerate(docs):
            doc._.nldm_nbest = [(float(numpy.exp(p)), [(a, b, self.vocab.strings[labels[j]]) for a, b, j in sets])
                                for p, sets in best[d]] if len(doc) else []

    @property
    def entity_bias(self) -> float:
        """The score added to every entity-start tag at predict time (saved with the component; 0: none)."""
        return float(self.cfg.get("entity_bias", 0.0))

    @entity_bias.setter
    def entity_bias(self, value: float) -> None:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not numpy.isfinite(value):
            raise ValueError(f"[spacy-nldm] {self.name}: entity_bias must be a finite number, not {value!r}")
        self.cfg["entity_bias"] = float(value)

    def score_offsets(self) -> Optional[numpy.ndarray]:
        """:attr:`entity_bias` on the entity-start tags of :attr:`outputs` (None when it is 0)."""
        if not self.entity_bias:
            return None
        prefixes = self._parts().prefixes
        return numpy.asarray([self.entity_bias if p in ("B", "U") else 0.0 for p in prefixes], dtype="float32")

    def score(self, examples: Iterable[Example], **kwargs):
        """The scorer's figures (by default spaCy's ``ents_p``, ``ents_r``, ``ents_f``, ``ents_per_type``); none
        with ``scorer = null``, as for spaCy's components."""
        return {} if self.scorer is None else self.scorer(examples, **kwargs)


class SchemeParts(NamedTuple):
    """The tags of entity ``labels`` (types) under a scheme: ``tags`` (:func:`~spacy_nldm.structs.entity_labels`),
    their ``allowed`` transitions, their :class:`~spacy_nldm.structs.EntityTags` (types in the labels' order), and
    each tag's prefix ("O", "B", ...) and type index in ``labels`` (-1 for O)."""

    labels: Tuple[str, ...]
    tags: Tuple[str, ...]
    allowed: structs.Transitions
    entity_tags: structs.EntityTags
    prefixes: List[str]
    kinds: List[int]

    @classmethod
    def of(cls, labels: Tuple[str, ...], scheme: str) -> "SchemeParts":
        tags = tuple(structs.entity_labels(labels, scheme))
        index = {label: i for i, label in enumerate(labels)}
        return cls(labels, tags, structs.allowed_transitions(tags, scheme), structs.entity_tags(tags, scheme),
                   [tag.partition("-")[0] for tag in tags],
                   [index[tag.partition("-")[2]] if tag != "O" else -1 for tag in tags])


def _is_number(value) -> bool:
    """An int or a float, not a bool (which Python counts as an int)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


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
