"""Fitting an entity component on held-out docs: its ``temperature`` (the probabilities) and its
``entity_bias`` (the decisions).

    from spacy.training import Corpus
    nlp = spacy.load("training/crf_ner/model-best")
    dev = list(Corpus("corpus/dev.spacy", gold_preproc=True)(nlp))
    t = fit_temperature(nlp, dev)  # sets the component's temperature, and returns it
    nlp = spacy.load("training/crf_ner/model-best", config={"components": {"crf_ner": {"temperature": t}}})
    nlp.to_disk("training/crf_ner/model-calibrated")

``fit_entity_bias(nlp, dev)`` sets the score added to every entity-start tag (saved with the component:
``nlp.to_disk`` keeps it) to the value, on a grid, of the best entity F1 on the docs. A model trained on data
where some entities were left unannotated (their tokens unknown, or worse, ``O``) sees fewer entities than
there are and predicts too few: the bias raises every entity's odds by the same factor. Fit the bias first,
then the temperature.

The temperature divides every score before any probability is taken (see
:class:`~spacy_nldm.pipeline.ner.StructuredEntityRecognizer`). The fitted one is the temperature, on a
logarithmic grid, whose predicted entities have the lowest log loss: each entity's probability against whether
it is right (the gold doc has the same span with the same type). The log loss is a proper score: it is lowest
where the probabilities say how often the entities are right.
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


def entity_f1(nlp: Language, examples: Sequence[Example]) -> float:
    """Entity F1 (exact span and type) of the pipeline's predictions on the examples' tokens."""
    found = gold = right = 0
    for eg, doc in zip(examples, nlp.pipe(_inputs(nlp, examples))):
        ref = {(e.start, e.end, e.label_) for e in eg.reference.ents}
        pred = {(e.start, e.end, e.label_) for e in doc.ents}
        found, gold, right = found + len(pred), gold + len(ref), right + len(pred & ref)
    return 2 * right / (found + gold) if found + gold else 0.0


def entity_outcomes(nlp: Language, examples: Sequence[Example]) -> List[Tuple[float, bool]]:
    """(probability, right) of every entity the pipeline predicts on the examples' tokens (``Span._.nldm_prob``;
    right: the reference has the same span with the same type)."""
    out = []
    for eg, doc in zip(examples, nlp.pipe(_inputs(nlp, examples))):
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
    left at it. Examples with no entity predicted at any temperature leave it at 1."""
    examples = list(examples)
    component = nlp.get_pipe(entity_component(nlp, name))
    losses = []
    for t in temperatures:
        component.temperature = float(t)
        outcomes = entity_outcomes(nlp, examples)
        losses.append((log_loss(outcomes), abs(numpy.log(t)), float(t)) if outcomes else (float("inf"), 0.0, 1.0))
    best = min(losses)[2]
    component.temperature = best
    return best


def fit_entity_bias(nlp: Language, examples: Iterable[Example], name: Optional[str] = None,
                    biases: Sequence[float] = ENTITY_BIASES) -> float:
    """The ``entity_bias`` of the entity component ``name`` (the pipeline's only one by default) of the best
    :func:`entity_f1` on ``examples`` (their reference docs' entities), among ``biases`` (ties: the one nearest
    0); the component is left at it."""
    examples = list(examples)
    component = nlp.get_pipe(entity_component(nlp, name))
    scores = []
    for bias in biases:
        component.entity_bias = float(bias)
        scores.append((entity_f1(nlp, examples), -abs(bias), float(bias)))
    best = max(scores)[2]
    component.entity_bias = best
    return best
