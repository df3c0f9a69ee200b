"""Incorrect spans (spaCy's ``incorrect_spans_key``): the loss of partial annotation with spans known not to be
entities, exact against enumeration for every structure, its gradient against finite differences, and on the
entity components against their own span probabilities."""
import itertools
import math

import pytest
import torch
from spacy.tokens import Doc, Span
from spacy.training import Example
from thinc.api import Adam

from spacy_nldm.defaults import INCORRECT_SPANS_KEY
from spacy_nldm.models.structure import Chain, ExclusionError, LatentTree
from test_models import central_difference
from test_ner import FACTORIES, examples_of, pipeline, synthetic

STRUCTURES = [(LatentTree(None), (2, 4)), (LatentTree(2), (2, 4)), (Chain(1), (1, 4)), (Chain(2), (4, 4))]


def event(n, m, tags):
    """The label mask (n, M) of the event that tokens take the given labels ({position: label})."""
    mask = torch.ones(n, m, dtype=torch.bool)
    for t, c in tags.items():
        mask[t] = False
        mask[t, c] = True
    return mask


def sequence_probs(structure, F, lengths):
    """P(y) of every labelling y of one segment, each by the one-hot loss."""
    n, m = int(lengths[0]), F.shape[-1]
    probs = {}
    for y in itertools.product(range(m), repeat=n):
        gold = torch.nn.functional.one_hot(torch.tensor(y), m).bool()[None]
        probs[y] = float(torch.exp(-structure.nll(F, lengths, gold)))
    return probs


@pytest.mark.parametrize("structure,shape", STRUCTURES)
def test_the_excluded_loss_is_the_probability_of_no_event_given_the_gold_by_enumeration(structure, shape):
    torch.manual_seed(3)
    n, m = 4, 3
    F = torch.randn(1, n, *shape, m, dtype=torch.float64)
    lengths = torch.tensor([n])
    probs = sequence_probs(structure, F, lengths)
    gold = torch.ones(1, n, m, dtype=torch.bool)
    gold[0, 0, 1] = False  # token 0: label 0 or 2
    # overlapping events (tokens 1-2 and 2), one that never holds with another (token 2 labelled 2 or 1), and one
    # elsewhere: inclusion-exclusion over the sets that can hold together
    events = [event(n, m, {1: 1, 2: 2}), event(n, m, {2: 1}), event(n, m, {3: 0}), event(n, m, {0: 2, 3: 0})]
    allowed = [y for y in probs if all(gold[0, t, c] for t, c in enumerate(y))]
    holds = lambda e, y: all(e[t, c] for t, c in enumerate(y))  # noqa: E731
    p_gold = sum(probs[y] for y in allowed)
    p_none = sum(probs[y] for y in allowed if not any(holds(e, y) for e in events))
    got = structure.excluded_nll(F, lengths, gold, [(0, e) for e in events])
    assert float(got[0]) == pytest.approx(-math.log(p_none / p_gold), rel=1e-9)
    # with the loss, the likelihood of the annotation is that of the gold labellings without the events
    total = structure.nll(F, lengths, gold) + got.sum()
    assert float(torch.exp(-total)) == pytest.approx(p_none, rel=1e-9)


@pytest.mark.parametrize("structure,shape", STRUCTURES)
def test_the_excluded_loss_gradient_matches_finite_differences(structure, shape):
    torch.manual_seed(4)
    n, m = 3, 3
    F = torch.randn(2, n, *shape, m, dtype=torch.float64, requires_grad=True)
    lengths = torch.tensor([n, 2])
    gold = torch.ones(2, n, m, dtype=torch.bool)
    events = [(0, event(n, m, {0: 1, 1: 1})), (0, event(n, m, {2: 0})), (1, event(n, m, {1: 2}))]
    loss = lambda: structure.excluded_nll(F, lengths, gold, events).sum()  # noqa: E731
    (grad,) = torch.autograd.grad(loss(), F)
    for index in [(0, 0, 0, 0, 1), (0, 2, 0, 1, 0), (1, 1, 0, 2, 2), (1, 0, 0, 0, 1)]:
        assert float(grad[index]) == pytest.approx(central_difference(loss, F, index), rel=1e-5, abs=1e-8)


def test_an_event_the_gold_annotation_implies_is_an_error_naming_the_segment():
    n, m = 3, 3
    F = torch.randn(2, n, 1, 4, m, dtype=torch.float64)
    gold = torch.ones(2, n, m, dtype=torch.bool)
    gold[1, 1] = torch.tensor([False, True, False])
    with pytest.raises(ExclusionError, match="segment 1"):
        Chain(1).excluded_nll(F, torch.tensor([n, n]), gold, [(1, event(n, m, {1: 1}))])


def trained(factory, scheme="BILUO", steps=3):
    """A few steps of an optimizer that keeps the weight averages itself, so that the component tags with its
    last weights, those its loss reads."""
    nlp = pipeline(factory, scheme=scheme, candidate_threshold=1e-9)
    train = examples_of(synthetic(nlp.vocab, 20))
    nlp.initialize(lambda: train)
    optimizer = Adam(0.001, use_averages=True)
    for _ in range(steps):
        nlp.update(train, sgd=optimizer)
    return nlp


def unannotated(nlp, words, incorrect, sent_starts=None):
    """An example with no entity annotation, its reference carrying incorrect spans (start, end, label)."""
    reference = Doc(nlp.vocab, words=words, sent_starts=sent_starts)
    reference.spans[INCORRECT_SPANS_KEY] = [Span(reference, a, b, label=label) for a, b, label in incorrect]
    return Example(Doc(nlp.vocab, words=words, sent_starts=sent_starts), reference)


def span_prob(nlp, words, span, sent_starts=None):
    """The component's probability (its span group's score) that tokens a:b form an entity of that type."""
    doc = nlp(Doc(nlp.vocab, words=words, sent_starts=sent_starts))
    group = doc.spans["sc"]
    found = [p for s, p in zip(group, group.attrs["scores"]) if (s.start, s.end, s.label_) == span]
    return float(found[0]) if found else 0.0


@pytest.mark.parametrize("factory", FACTORIES)
@pytest.mark.parametrize("scheme", ["BIO", "BILUO"])
def test_the_component_loss_of_incorrect_spans_is_their_probability_of_not_being_entities(factory, scheme):
    nlp = trained(factory, scheme)
    ner = nlp.get_pipe(factory)
    words = ["we", "saw", "Mia", "Blick", ".", "Oslo", "is", "far"]
    starts = [True, False, False, False, False, True, False, False]  # two sentences: two segments
    # without annotation the gold allows every tag sequence: the loss is -log P(no incorrect span is an entity)
    # per token; two spans over the same tokens never hold together (their probabilities add) and the segments
    # are independent given the tokens' vectors (theirs multiply)
    incorrect = [(2, 4, "PER"), (2, 4, "LOC"), (5, 6, "LOC")]
    example = unannotated(nlp, words, incorrect, starts)
    loss, _ = ner.get_loss([example], ner.model.predict([example.predicted]))
    p = [span_prob(nlp, words, span, starts) for span in incorrect]
    assert min(p) > 1e-3
    assert loss * len(words) == pytest.approx(-math.log((1 - p[0] - p[1]) * (1 - p[2])), rel=1e-4)


@pytest.mark.parametrize("factory", FACTORIES)
def test_incorrect_spans_teach_the_component_what_is_not_an_entity(factory):
    words = ["I", "met", "Zorp", "in", "Oslo", "."]
    probs = []
    for with_incorrect in (False, True):
        nlp = trained(factory, steps=2)
        optimizer = nlp.resume_training()
        # no entity annotation: the incorrect span is all there is to learn from (without it, the loss is 0)
        batch = [unannotated(nlp, words, [(2, 3, "PER")] if with_incorrect else [])] * 4
        for _ in range(10):
            nlp.update(batch, sgd=optimizer)
        probs.append(span_prob(nlp, words, (2, 3, "PER")))
    assert probs[0] > 0.05
    assert probs[1] < 0.5 * probs[0]


def test_an_incorrect_span_that_is_a_gold_entity_is_an_error_naming_the_doc():
    nlp = trained("crf_ner", steps=1)
    ner = nlp.get_pipe("crf_ner")
    reference = synthetic(nlp.vocab, 1)[0]
    ent = reference.ents[0]
    reference.spans[INCORRECT_SPANS_KEY] = [Span(reference, ent.start, ent.end, label=ent.label_)]
    example = Example(Doc(nlp.vocab, words=[t.text for t in reference]), reference)
    with pytest.raises(ValueError, match="gold entity") as error:
        ner.get_loss([example], ner.model.predict([example.predicted]))
    assert reference.text[:20] in str(error.value)


def test_incorrect_spans_are_read_on_the_predicted_tokens_and_unknown_types_left_out():
    nlp = trained("crf_ner", steps=1)
    ner = nlp.get_pipe("crf_ner")
    reference = Doc(nlp.vocab, words=["Port", "Zima", "rocks"], spaces=[True, True, False])
    reference.spans[INCORRECT_SPANS_KEY] = [Span(reference, 0, 2, label="LOC"), Span(reference, 1, 2, label="PER"),
                                            Span(reference, 2, 3, label="DATE")]  # DATE: not a type of the component
    predicted = Doc(nlp.vocab, words=["Port", "Zi", "ma", "rocks"], spaces=[True, False, True, False])
    assert ner.incorrect_spans(Example(predicted, reference)) == [(0, 3, "LOC"), (1, 3, "PER")]
    words = ["Port", "Zima", "rocks"]
    assert ner.incorrect_spans(Example(Doc(nlp.vocab, words=words), Doc(nlp.vocab, words=words))) == []  # no group


def test_incorrect_spans_under_the_max_loss_are_an_error_naming_the_setting():
    nlp = pipeline("nldm_ner", loss="max")
    nlp.initialize(lambda: examples_of(synthetic(nlp.vocab, 10)))
    ner = nlp.get_pipe("nldm_ner")
    example = unannotated(nlp, ["I", "met", "Zorp"], [(2, 3, "PER")])
    with pytest.raises(ValueError, match="loss"):
        ner.get_loss([example], ner.model.predict([example.predicted]))
