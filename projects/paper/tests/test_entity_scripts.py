"""The entity study's scripts: the partial-annotation corpora (projects/paper/scripts/partial_entities.py) and the
calibration measures (projects/paper/scripts/entity_calibration.py)."""
import random

import numpy
import pytest
from spacy.tokens import Doc, DocBin, Span
from spacy.vocab import Vocab

from projects.paper.scripts.entity_calibration import BINS, calibration, ece_if_calibrated, expected_calibration_error, mean_sd
from projects.paper.scripts.partial_entities import kept_docs, partial, removed_entities, with_an_incorrect_type
from spacy_nldm.defaults import INCORRECT_SPANS_KEY


def entity_docs(n: int, seed: int = 0):
    """n docs of 12 tokens, each with up to three one- or two-token entities of types A / B, apart."""
    rng, vocab, docs = random.Random(seed), Vocab(), []
    for _ in range(n):
        doc = Doc(vocab, words=[f"w{i}" for i in range(12)])
        spans = [Span(doc, s, s + rng.choice((1, 2)), label=rng.choice("AB")) for s in (0, 4, 8) if rng.random() < 0.7]
        doc.set_ents(spans, default="outside")
        docs.append(doc)
    return docs


def test_partial_corpora_remove_the_same_entities_as_unknown_or_outside():
    docs = entity_docs(200)
    removed = removed_entities(docs, 0.5, seed=0)
    n_ents = sum(len(d.ents) for d in docs)
    n_removed = sum(len(r) for r in removed)
    assert 0.4 < n_removed / n_ents < 0.6  # each entity with probability 0.5
    assert removed == removed_entities(docs, 0.5, seed=0)  # one seeded draw
    for doc, gone in zip(docs, removed):
        unknown, outside = partial(doc, gone, unknown=True), partial(doc, gone, unknown=False)
        kept = [(e.start, e.end, e.label_) for i, e in enumerate(doc.ents) if i not in gone]
        dropped = {t for i, e in enumerate(doc.ents) if i in gone for t in range(e.start, e.end)}
        for out in (unknown, outside):
            assert [(e.start, e.end, e.label_) for e in out.ents] == kept
            assert [(s.start, s.end, s.label_) for s in out.spans["sc"]] == kept
        for i in range(len(doc)):  # unknown: ent_iob 0 exactly on the dropped tokens; outside: O there
            assert (unknown[i].ent_iob == 0) == (i in dropped)
            assert outside[i].ent_iob != 0
            if i in dropped:
                assert outside[i].ent_iob_ == "O"
        # a round trip through a DocBin keeps the unknown tokens unknown
        back = next(DocBin(docs=[unknown]).get_docs(Vocab()))
        assert [t.ent_iob for t in back] == [t.ent_iob for t in unknown]


def test_fewer_docs_keeps_a_share_of_the_docs_as_annotated():
    docs = entity_docs(400)
    kept = kept_docs(docs, 0.5, seed=0)
    assert 0.4 < len(kept) / len(docs) < 0.6  # each doc removed with probability 0.5
    assert [id(d) for d in kept] == [id(d) for d in kept_docs(docs, 0.5, seed=0)]  # one seeded draw
    position = {id(d): i for i, d in enumerate(docs)}
    assert [position[id(d)] for d in kept] == sorted(position[id(d)] for d in kept)  # in order, no doc twice
    assert all(d.has_annotation("ENT_IOB") and all(t.ent_iob != 0 for t in d) for d in kept)  # fully annotated
    assert kept_docs(docs, 0.0, seed=0) == docs and kept_docs(docs, 1.0, seed=0) == []


def test_the_incorrect_reading_lists_each_removed_entity_under_another_type():
    docs = entity_docs(100)
    removed = removed_entities(docs, 0.5, seed=0)
    rng = random.Random(0)
    for doc, gone in zip(docs, removed):
        out = with_an_incorrect_type(doc, gone, ["A", "B", "C"], rng)
        unknown = partial(doc, gone, unknown=True)
        assert [t.ent_iob for t in out] == [t.ent_iob for t in unknown]  # the unknown reading
        removed_spans = [(e.start, e.end, e.label_) for i, e in enumerate(doc.ents) if i in gone]
        incorrect = [(s.start, s.end, s.label_) for s in out.spans[INCORRECT_SPANS_KEY]]
        assert [(a, b) for a, b, _ in incorrect] == [(a, b) for a, b, _ in removed_spans]  # one per removed entity
        assert all(wrong != right and wrong in "ABC" for (*_, wrong), (*_, right) in zip(incorrect, removed_spans))
        back = next(DocBin(docs=[out]).get_docs(Vocab()))  # the span group survives a DocBin
        assert [(s.start, s.end, s.label_) for s in back.spans[INCORRECT_SPANS_KEY]] == incorrect


def test_calibration_ece_and_average_precision_by_their_definitions():
    rng = numpy.random.default_rng(0)
    gold = {(0, i, i + 1, "A") for i in range(40)}
    found = []
    for i in range(60):  # 60 predicted entities: the first 40 are gold
        found.append((0, i, i + 1, "A", float(rng.uniform(0.0, 1.0))))
    got = calibration(found, gold)
    conf = numpy.array([f[-1] for f in found])
    right = numpy.array([i < 40 for i in range(60)], dtype=float)
    ece = 0.0
    for b in range(BINS):
        inside = (numpy.floor(conf * BINS).clip(0, BINS - 1)) == b
        if inside.any():
            ece += inside.sum() / 60 * abs(right[inside].mean() - conf[inside].mean())
    assert got["ece"] == pytest.approx(ece)
    # average precision: sum over the right entities, best first, of the precision there / the gold count
    order = numpy.argsort(-conf)
    hits, ap = 0, 0.0
    for rank, j in enumerate(order, start=1):
        if right[j]:
            hits += 1
            ap += hits / rank / len(gold)
    assert got["ap"] == pytest.approx(ap)
    assert got["precision"] == pytest.approx(40 / 60) and got["recall"] == pytest.approx(1.0)


def test_calibration_of_confidences_that_are_right():
    """Entities whose confidence is their bin's share of right ones: ECE 0; ranked right-first: AP = recall."""
    gold = {(0, i, i + 1, "A") for i in range(100)}
    found = [(0, i, i + 1, "A", 0.75) for i in range(4)]  # 3 of 4 right at 0.75
    found[3] = (0, 500, 501, "A", 0.75)
    found += [(0, 10 + i, 11 + i, "A", 1.0) for i in range(5)]  # 5 of 5 right at 1.0
    got = calibration(found, gold)
    assert got["ece"] == pytest.approx(0.0)
    assert got["ap"] == pytest.approx(8 / 100)


def test_ece_if_calibrated_is_what_calibrated_outcomes_give():
    """Outcomes drawn right with their confidence are calibrated: their ECE falls within the floor's range, the
    floor shrinks as the entities grow (about 1 / sqrt(n)), and it is 0 for confidences of 0 and 1 only."""
    rng = numpy.random.default_rng(1)
    small, large = rng.uniform(size=100), rng.uniform(size=10000)
    mean_small, p95_small = ece_if_calibrated(small)
    mean_large, _ = ece_if_calibrated(large, draws=200)
    assert 0 < mean_large < mean_small < p95_small
    assert 5 < mean_small / mean_large < 20  # sqrt(100) = 10
    drawn = (rng.uniform(size=(200, 100)) < small).astype(float)
    eces = expected_calibration_error(small, drawn)
    assert numpy.mean(eces <= p95_small) > 0.85
    assert ece_if_calibrated(numpy.array([0.0, 1.0, 1.0, 0.0])) == (0.0, 0.0)


def test_mean_sd_over_seeds():
    assert mean_sd([0.5], 3) == "0.500"
    assert mean_sd([1.0, 2.0, 3.0], 2) == "2.00 ± 1.00"
