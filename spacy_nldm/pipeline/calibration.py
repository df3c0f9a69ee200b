"""Fitting an entity component on held-out docs: its ``temperature`` (the probabilities) and its
``entity_bias`` (the decisions).

    from spacy.training import Corpus
    nlp = spacy.load("training/crf_ner/model-best")
    dev = list(Corpus("corpus/dev.spacy", gold_preproc=True)(nlp))
    t = fit_temperature(nlp, dev)  # sets the component's temperature, and returns it
    nlp = spacy.load("training/crf_ner/model-best", config={"components": {"crf_ner": {"temperature": t}}})
    nlp.to_disk("training/crf_ner/model-calibrated")

``fit_entity_bias(nlp, dev)`` sets the score added to every entity-start tag (saved with the component:
``nlp.to_disk`` keeps it) to the value, on a grid (-1 to 6 in steps of 1/4, extended
while its best is on the upper edge), of the best entity F1 on the docs. A model trained on data
where some entities were left unannotated (their tokens unknown, or worse, ``O``) sees fewer entities than
there are and predicts too few: the bias raises every entity's odds by the same factor. Fit the bias first,
then the temperature.

The temperature divides every score before any probability is taken (see
:class:`~spacy_nldm.pipeline.ner.StructuredEntityRecognizer`). The fitted one is the temperature, on a
logarithmic grid, whose predicted entities have the lowest log loss: each entity's probability against whether
it is right (the gold doc has the same span with the same type). The log loss is a proper score: it is lowest
where the probabilities say how often the entities are right.

Either fit runs the model on the docs once and decodes its scores at each point of the grid (:class:`Decoder`).
"""
from typing import Iterable, List, Optional, Sequence, Tuple

import numpy
from spacy.language import Language
from spacy.tokens import Doc
from spacy.training import Example

#: the temperatures :func:`fit_temperature` tries: 1/4 to 16, four steps to each doubling
TEMPERATURES: Tuple[float, ...] = tuple(2.0 ** (k / 4) for k in range(-8, 17))
ENTITY_FACTORIES = ("crf_ner", "nldm_ner")
#: the entity biases :func:`fit_entity_bias` tries: -1 to 6, in steps of 1/4
ENTITY_BIASES: Tuple[float, ...] = tuple(k / 4 for k in range(-4, 25))
#: how far :func:`fit_entity_bias` extends its grid while the best bias is on its upper edge
LARGEST_BIAS = 16.0
#: docs the model scores at a time in a fit
BATCH_SIZE = 256
#: probabilities are clipped to [EPS, 1 - EPS] in the log loss
EPS = 1e-6


def entity_component(nlp: Language, name: Optional[str] = None) -> str:
    """The name of the pipeline's entity component (``name`` checked, or the only one there is)."""
    names = [n for n, _ in nlp.pipeline if nlp.get_pipe_meta(n).factory in ENTITY_FACTORIES]
    if name is not None:
        if name not in names:
            raise ValueError(f"[spacy-nldm] {name!r} is not an entity component of this pipeline "
                             f"(crf_ner or nldm_ner); it has {names or 'none'}")
        return name
    if len(names) != 1:
        raise ValueError(f"[spacy-nldm] name the entity component to fit: the pipeline has {names or 'none'}")
    return names[0]


def _inputs(nlp: Language, examples: Sequence[Example]) -> List[Doc]:
    """Fresh docs of the examples' reference tokens (no annotation)."""
    return [Doc(nlp.vocab, words=[t.text for t in eg.reference], spaces=[bool(t.whitespace_) for t in eg.reference])
            for eg in examples]


class Decoder:
    """The entity component ``name`` on the examples' tokens, run once: the components before it annotate the
    docs and the model scores them once (:meth:`~.StructuredTagger.token_scores`); each call of :meth:`docs`
    then decodes those scores with the component's settings of the moment (``entity_bias``, ``temperature``,
    ``threshold``) and returns the docs, their entities set anew. A fit tries many settings at the cost of
    one pass of the model."""

    def __init__(self, nlp: Language, examples: Sequence[Example], name: Optional[str] = None,
                 batch_size: int = BATCH_SIZE):
        self.name = entity_component(nlp, name)
        self.component = nlp.get_pipe(self.name)
        before = nlp.pipe_names[: nlp.pipe_names.index(self.name)]
        docs = _inputs(nlp, examples)
        with nlp.select_pipes(enable=before):
            docs = list(nlp.pipe(docs, batch_size=batch_size))
        self.batches = [docs[i: i + batch_size] for i in range(0, len(docs), batch_size)]
        self.scores = [self.component.token_scores(batch) for batch in self.batches]

    def docs(self) -> List[Doc]:
        out = []
        for batch, scores in zip(self.batches, self.scores):
            self.component.set_annotations(batch, self.component.predict_scored(batch, scores))
            out += batch
        return out


def _decoded(nlp: Language, examples: Sequence[Example], decoder: Optional[Decoder]) -> List[Doc]:
    return decoder.docs() if decoder is not None else list(nlp.pipe(_inputs(nlp, examples)))


def entity_f1(nlp: Language, examples: Sequence[Example], decoder: Optional[Decoder] = None) -> float:
    """Entity F1 (exact span and type) of the pipeline's predictions on the examples' tokens (``decoder``: the
    same pipeline's scores, decoded again)."""
    found = gold = right = 0
    for eg, doc in zip(examples, _decoded(nlp, examples, decoder)):
        ref = {(e.start, e.end, e.label_) for e in eg.reference.ents}
        pred = {(e.start, e.end, e.label_) for e in doc.ents}
        found, gold, right = found + len(pred), gold + len(ref), right + len(pred & ref)
    return 2 * right / (found + gold) if found + gold else 0.0


def entity_outcomes(nlp: Language, examples: Sequence[Example], decoder: Optional[Decoder] = None
                    ) -> List[Tuple[float, bool]]:
    """(probability, right) of every entity the pipeline predicts on the examples' tokens (``Span._.nldm_prob``;
    right: the reference has the same span with the same type; ``decoder`` as in :func:`entity_f1`)."""
    out = []
    for eg, doc in zip(examples, _decoded(nlp, examples, decoder)):
        gold = {(e.start, e.end, e.label_) for e in eg.reference.ents}
        out += [(float(e._.nldm_prob), (e.start, e.end, e.label_) in gold) for e in doc.ents if e._.nldm_prob is not None]
    return out


def log_loss(outcomes: Iterable[Tuple[float, bool]]) -> float:
    """Mean binary log loss of (probability, right) pairs (0 for none)."""
    pairs = list(outcomes)
    if not pairs:
        return 0.0
    p = numpy.clip(numpy.asarray([q for q, _ in pairs], dtype="float64"), EPS, 1 - EPS)
    right = numpy.asarray([r for _, r in pairs], dtype="float64")
    return float(-(right * numpy.log(p) + (1 - right) * numpy.log(1 - p)).mean())


def fit_temperature(nlp: Language, examples: Iterable[Example], name: Optional[str] = None,
                    temperatures: Sequence[float] = TEMPERATURES) -> float:
    """The temperature of the entity component ``name`` (the pipeline's only one by default) of the lowest
    :func:`log_loss` on ``examples`` (their reference docs' entities), among ``temperatures``; the component is
    left at it. Examples with no entity predicted at any temperature leave it at 1. The model scores the
    examples once (:class:`Decoder`)."""
    examples = list(examples)
    decoder = Decoder(nlp, examples, name)
    component = decoder.component
    losses = []
    for t in temperatures:
        component.temperature = float(t)
        outcomes = entity_outcomes(nlp, examples, decoder)
        losses.append((log_loss(outcomes), abs(numpy.log(t)), float(t)) if outcomes else (float("inf"), 0.0, 1.0))
    best = min(losses)[2]
    component.temperature = best
    return best


def fit_entity_bias(nlp: Language, examples: Iterable[Example], name: Optional[str] = None,
                    biases: Sequence[float] = ENTITY_BIASES, largest: float = LARGEST_BIAS) -> float:
    """The ``entity_bias`` of the entity component ``name`` (the pipeline's only one by default) of the best
    :func:`entity_f1` on ``examples`` (their reference docs' entities), among ``biases`` (ties: the one nearest
    0); the component is left at it. While the best is the grid's largest value, the grid goes on in the same
    steps, up to ``largest`` (a model trained where many entities were left out can need more than the grid
    holds). The model scores the examples once (:class:`Decoder`)."""
    examples = list(examples)
    decoder = Decoder(nlp, examples, name)
    component = decoder.component

    def scored(bias: float) -> Tuple[float, float, float]:
        component.entity_bias = bias
        return entity_f1(nlp, examples, decoder), -abs(bias), bias

    grid = sorted(float(b) for b in biases)
    step = grid[-1] - grid[-2] if len(grid) > 1 else 1.0
    scores = [scored(bias) for bias in grid]
    while max(scores)[2] == grid[-1] and grid[-1] + step <= largest + 1e-9:  # the best is on the upper edge
        grid.append(grid[-1] + step)
        scores.append(scored(grid[-1]))
    best = max(scores)[2]
    component.entity_bias = best
    return best
