"""Entity confidence on the components: span probabilities that add up as probabilities must, the threshold,
candidates, n-best entity sets, and spancat's way of storing scores."""
import itertools

import numpy
import pytest
import torch
import spacy
from spacy.tokens import Doc, DocBin
from thinc.api import fix_random_seed

from test_ner import FACTORIES, examples_of, pipeline, synthetic, tags_of_scheme, valid

TEXTS = ["I met Zorp in Oslo .", "we saw Mia Blick and Tove at Port Zima", "Paris loves Ana Maria Sol !"]


def trained(factory: str, steps: int = 4, **config):
    """A pipeline trained a few steps: far from sure of its entities, so that probabilities are spread."""
    fix_random_seed(0)
    nlp = pipeline(factory, **config)
    train = examples_of(synthetic(nlp.vocab, 20))
    optimizer = nlp.initialize(lambda: train)
    for _ in range(steps):
        nlp.update(train, sgd=optimizer)
    return nlp


@pytest.mark.parametrize("factory", FACTORIES)
@pytest.mark.parametrize("scheme", ["BIO", "BILUO"])
def test_the_span_probabilities_of_all_spans_add_up_to_the_expected_number_of_entities(factory, scheme):
    nlp = trained(factory, scheme=scheme, store_probs=True, candidate_threshold=1e-12)
    decoded = 0
    for doc in nlp.pipe(TEXTS):
        decoded += len(doc.ents)
        group = doc.spans["sc"]
        scores = group.attrs["scores"]
        assert len(scores) == len(group)
        assert len({(s.start, s.end, s.label_) for s in group}) == len(group)  # each span once
        tags = doc._.nldm_prob_labels
        begins = [i for i, tag in enumerate(tags) if tag.startswith(("B-", "U-"))]
        expected = float(doc._.nldm_probs[:, begins].sum())  # every entity has one B (or U) tag
        total = float(numpy.sum(scores, dtype="float64"))
        if factory == "nldm_ner" and scheme == "BILUO":
            # the NLDM's distribution keeps invalid sequences, where a B-X left unended begins no entity: a
            # one-token entity is exactly a U-X tag (its probability that tag's marginal), a longer one begins
            # with a B-X and ends with an L-X tag (at most one entity each)
            singles = {(s.start, s.label_): float(p) for s, p in zip(group, scores) if len(s) == 1}
            unit = {(i, tag[2:]): float(doc._.nldm_probs[i, j]) for j, tag in enumerate(tags) if tag.startswith("U-")
                    for i in range(len(doc)) if doc._.nldm_probs[i, j] >= 1e-9}
            assert unit and set(unit) <= set(singles)
            for key, p in singles.items():
                j = tags.index(f"U-{key[1]}")
                assert p == pytest.approx(float(doc._.nldm_probs[key[0], j]), rel=1e-4, abs=1e-9), key
            longer = total - sum(singles.values())
            ends = [i for i, tag in enumerate(tags) if tag.startswith("L-")]
            b_only = float(doc._.nldm_probs[:, [i for i in begins if tags[i].startswith("B-")]].sum())
            assert 0.0 <= longer <= min(b_only, float(doc._.nldm_probs[:, ends].sum())) + 1e-5
            assert longer < b_only  # a B-X left unended somewhere has probability
        else:  # and under BIO every B-X begins exactly one entity, valid sequence or not
            assert total == pytest.approx(expected, rel=1e-4, abs=1e-5)
        for i, ent in enumerate(doc.ents):  # the decoded entities lead the group, with their own probability
            assert (group[i].start, group[i].end, group[i].label_) == (ent.start, ent.end, ent.label_)
            assert float(scores[i]) == pytest.approx(ent._.nldm_prob, rel=1e-6)
    assert decoded, "the model decodes entities"


@pytest.mark.parametrize("factory", FACTORIES)
def test_threshold_keeps_the_entities_of_at_least_that_probability(factory):
    nlp = trained(factory, steps=10)
    docs = list(nlp.pipe(TEXTS))
    probs = sorted(e._.nldm_prob for d in docs for e in d.ents)
    assert probs, "the model decodes entities"
    cut = probs[len(probs) // 2]
    nlp.get_pipe(factory).threshold = cut
    kept = list(nlp.pipe(TEXTS))
    assert sorted(e._.nldm_prob for d in kept for e in d.ents) == [p for p in probs if p >= cut]
    for doc in kept:
        assert [(s.start, s.end, s.label_) for s in doc.spans["sc"]] == [(e.start, e.end, e.label_) for e in doc.ents]


def test_the_crf_best_entity_set_is_the_decoded_one_and_a_doc_combines_its_sentences():
    nlp = trained("crf_ner", steps=6, n_best=3)
    text = " ".join(TEXTS)
    doc = nlp(text)
    assert len(doc._.nldm_nbest) == 3
    probs = [p for p, _ in doc._.nldm_nbest]
    assert probs == sorted(probs, reverse=True) and sum(probs) <= 1.0 + 1e-6
    assert doc._.nldm_nbest[0][1] == [(e.start, e.end, e.label_) for e in doc.ents]
    # the doc's sentences are segments of their own (independent given the doc's token vectors): its k best sets
    # are the k best combinations of its segments' k best sequences, their probabilities multiplied
    parts = [t.split() for t in TEXTS]
    words = [w for part in parts for w in part]
    doc = Doc(nlp.vocab, words=words, sent_starts=[i == 0 for part in parts for i in range(len(part))])
    ner = nlp.get_pipe("crf_ner")
    preds = ner.predict([doc])
    ner.set_annotations([doc], preds)
    log_p = preds.nbest[1]  # (segments, k)
    combos = sorted((float(numpy.exp(sum(log_p[s, j] for s, j in enumerate(choice))))
                     for choice in itertools.product(range(3), repeat=len(parts))), reverse=True)[:3]
    assert [p for p, _ in doc._.nldm_nbest] == pytest.approx(combos, rel=1e-6)


def test_nldm_nbest_sets_are_valid_ordered_and_carry_their_exact_probabilities():
    """Each of the NLDM's k sequences carries its probability under the model (the trees summed out), as the
    loss computes it on that sequence as gold; they come in the order of those probabilities (found as the k
    largest products of tag marginals, then reordered by their exact probability)."""
    nlp = trained("nldm_ner", steps=6, n_best=4)
    ner = nlp.get_pipe("nldm_ner")
    for doc in nlp.pipe(TEXTS):
        probs = [p for p, _ in doc._.nldm_nbest]
        assert len({tuple(s) for _, s in doc._.nldm_nbest}) == len(probs) == 4  # different entity sets
        preds = ner.predict([nlp.make_doc(doc.text)])
        structure, F, lengths = preds.scored
        seqs, log_p = preds.nbest
        assert all(a >= b for a, b in zip(log_p[0], log_p[0][1:])), log_p[0]
        for seq, lp in zip(seqs[0], log_p[0]):
            gold = torch.nn.functional.one_hot(torch.as_tensor(seq), F.shape[-1]).bool()[None]
            assert lp == pytest.approx(-float(structure.nll(F, lengths, gold)), abs=1e-4)
        assert probs == pytest.approx(numpy.exp(log_p[0]).tolist(), rel=1e-6)


def test_the_scores_travel_with_the_docs_through_a_docbin():
    nlp = trained("crf_ner", steps=6, candidate_threshold=0.01)
    docs = list(nlp.pipe(TEXTS))
    restored = list(DocBin(docs=docs, store_user_data=True).get_docs(nlp.vocab))
    for a, b in zip(docs, restored):
        assert [(s.start, s.end, s.label_) for s in a.spans["sc"]] == [(s.start, s.end, s.label_) for s in b.spans["sc"]]
        numpy.testing.assert_array_equal(a.spans["sc"].attrs["scores"], b.spans["sc"].attrs["scores"])
        assert [e._.nldm_prob for e in a.ents] == [e._.nldm_prob for e in b.ents]


def test_bad_confidence_settings_are_errors_naming_them():
    for key, value in (("threshold", 1.5), ("candidate_threshold", 0.0), ("n_best", -1), ("temperature", 0.0)):
        nlp = spacy.blank("en")
        with pytest.raises(ValueError, match=key):
            nlp.add_pipe("crf_ner", config={key: value})


def test_displacy_shows_each_entity_with_its_probability():
    from spacy_nldm.pipeline import entities_to_displacy, render_entities

    nlp = trained("crf_ner", steps=10)
    doc = nlp(TEXTS[0])
    assert doc.ents
    data = entities_to_displacy(doc)
    assert [(e["start"], e["end"]) for e in data["ents"]] == [(e.start_char, e.end_char) for e in doc.ents]
    assert [e["label"] for e in data["ents"]] == [f"{e.label_} {e._.nldm_prob:.2f}" for e in doc.ents]
    html = render_entities(doc, jupyter=False)
    assert all(f"{e._.nldm_prob:.2f}" in html for e in doc.ents)



@pytest.mark.parametrize("factory", FACTORIES)
def test_a_high_temperature_flattens_the_distribution_to_uniform(factory):
    """Every score over T: as T grows the CRF's distribution tends to the uniform one over the sequences the
    scheme allows (its tag marginals: the share of the valid sequences with that tag there, by enumeration),
    the NLDM's to the uniform one over tags (its tree does not tell tags apart)."""
    nlp = trained(factory, steps=10, store_probs=True)
    ner = nlp.get_pipe(factory)
    text = "we saw Mia in Oslo"
    sharp = nlp(text)._.nldm_probs
    ner.temperature = 1e6
    flat = nlp(text)._.nldm_probs
    tags = tags_of_scheme("BIO")
    assert list(nlp(text)._.nldm_prob_labels) == list(tags)
    if factory == "crf_ner":
        seqs = [seq for seq in itertools.product(tags, repeat=len(text.split())) if valid(seq, "BIO")]
        expected = numpy.asarray([[sum(seq[i] == tag for seq in seqs) / len(seqs) for tag in tags]
                                  for i in range(len(text.split()))])
    else:
        expected = numpy.full(flat.shape, 1 / len(tags))
    numpy.testing.assert_allclose(flat, expected, atol=1e-4)
    assert numpy.abs(sharp - expected).max() > 0.1  # the trained distribution was not flat


def test_the_crf_decodes_the_same_entities_at_any_temperature_and_fitting_picks_the_lowest_log_loss():
    from spacy_nldm.pipeline import fit_temperature
    from spacy_nldm.pipeline.calibration import entity_outcomes, log_loss

    nlp = trained("crf_ner", steps=10)
    ner = nlp.get_pipe("crf_ner")
    dev = examples_of(synthetic(nlp.vocab, 12, seed=1))
    grid = (0.5, 1.0, 2.0, 4.0)
    runs = {}
    for t in grid:
        ner.temperature = t
        docs = list(nlp.pipe(TEXTS))
        runs[t] = ([(e.start, e.end, e.label_) for d in docs for e in d.ents], [e._.nldm_prob for d in docs for e in d.ents],
                   log_loss(entity_outcomes(nlp, dev)))
    assert all(runs[t][0] == runs[1.0][0] for t in grid)  # Viterbi's argmax does not move with T
    assert runs[0.5][1] != runs[4.0][1]  # the probabilities do
    best = fit_temperature(nlp, dev, temperatures=grid)
    assert ner.temperature == best
    assert runs[best][2] == min(loss for *_, loss in runs.values())


@pytest.mark.parametrize("factory", FACTORIES)
def test_the_entity_bias_multiplies_each_sequence_probability_by_exp_bias_per_entity(factory):
    """p_b(y) is proportional to p(y) exp(b x the entities of y): the ratio of two tag sequences' exact
    probabilities (from the n best) moves by exp(b x their difference in entities)."""
    from thinc.api import fix_random_seed

    fix_random_seed(0)
    nlp = trained(factory, steps=10, n_best=60)
    ner = nlp.get_pipe(factory)
    text = "we saw Mia in Oslo"
    before = {tuple(s): p for p, s in nlp(text)._.nldm_nbest}
    ner.entity_bias = 0.3
    after = {tuple(s): p for p, s in nlp(text)._.nldm_nbest}
    common = [s for s in before if s in after]
    assert len(common) >= 2 and len({len(s) for s in common}) >= 2  # sets with different numbers of entities
    ref = common[0]
    for s in common[1:]:
        expected = numpy.log(before[s] / before[ref]) + 0.3 * (len(s) - len(ref))
        assert numpy.log(after[s] / after[ref]) == pytest.approx(expected, abs=1e-4)


def test_the_crf_decodes_more_entities_as_the_bias_grows_and_fitting_picks_the_best_f1(tmp_path):
    from spacy_nldm.pipeline import fit_entity_bias
    from spacy_nldm.pipeline.calibration import entity_f1

    nlp = trained("crf_ner", steps=10)
    ner = nlp.get_pipe("crf_ner")
    dev = examples_of(synthetic(nlp.vocab, 12, seed=1))
    grid = (-20.0, -1.0, 0.0, 1.0, 3.0, 20.0)
    counts, f1 = [], {}
    for bias in grid:
        ner.entity_bias = bias
        counts.append(sum(len(d.ents) for d in nlp.pipe(TEXTS)))
        f1[bias] = entity_f1(nlp, dev)
    # Viterbi's argmax of score + b x entities: its number of entities never falls as b grows
    assert counts == sorted(counts) and counts[0] == 0 and counts[-1] > counts[2]
    best = fit_entity_bias(nlp, dev, biases=grid)
    assert ner.entity_bias == best and f1[best] == max(f1.values())
    assert abs(best) == min(abs(b) for b in grid if f1[b] == f1[best])
    nlp.to_disk(tmp_path / "fitted")  # saved with the component, read back by spacy.load
    assert spacy.load(tmp_path / "fitted").get_pipe("crf_ner").entity_bias == best


@pytest.mark.parametrize("factory", FACTORIES)
def test_the_fits_decode_the_models_scores_once_as_the_pipeline_would(factory):
    """A fit's :class:`Decoder` scores the docs once and decodes them at each setting: the entities and their
    probabilities are those of ``nlp.pipe`` at the same setting (``token_scores`` counted through the
    component's public method)."""
    from spacy_nldm.pipeline.calibration import Decoder, entity_f1

    nlp = trained(factory, steps=10)
    ner = nlp.get_pipe(factory)
    dev = examples_of(synthetic(nlp.vocab, 12, seed=1))
    calls = []
    score = ner.token_scores
    ner.token_scores = lambda docs: calls.append(len(docs)) or score(docs)
    decoder = Decoder(nlp, dev)
    assert calls == [len(dev)]
    for bias, temperature in ((0.0, 1.0), (1.5, 1.0), (0.5, 2.0)):
        ner.entity_bias, ner.temperature = bias, temperature
        before = len(calls)
        fitted = [[(e.start, e.end, e.label_, e._.nldm_prob) for e in d.ents] for d in decoder.docs()]
        assert len(calls) == before, "decoding again does not call the model"
        piped = [[(e.start, e.end, e.label_, e._.nldm_prob) for e in d.ents]
                 for d in nlp.pipe([eg.reference.text for eg in dev])]
        assert [[s[:3] for s in d] for d in fitted] == [[s[:3] for s in d] for d in piped]
        numpy.testing.assert_allclose([s[3] for d in fitted for s in d], [s[3] for d in piped for s in d], rtol=1e-6)
        assert entity_f1(nlp, dev, decoder) == entity_f1(nlp, dev)


def test_the_bias_grid_goes_on_while_its_best_is_on_its_upper_edge():
    """fit_entity_bias extends a grid whose best is its largest value, in the grid's step, up to ``largest``:
    it returns what the same rule picks from the F1 of every bias measured one by one."""
    from spacy_nldm.pipeline import fit_entity_bias
    from spacy_nldm.pipeline.calibration import entity_f1

    nlp = trained("crf_ner", steps=10)
    ner = nlp.get_pipe("crf_ner")
    dev = examples_of(synthetic(nlp.vocab, 12, seed=1))
    f1 = {}
    for bias in range(-20, 21):
        ner.entity_bias = float(bias)
        f1[bias] = entity_f1(nlp, dev)
    rising = [b for b in range(-20, 20) if f1[b + 1] > f1[b]]
    assert rising, "the F1 rises somewhere as the bias grows"
    start = rising[0]
    expected = start + 1  # the rule: go on while the best so far is the last value tried
    while expected < 20 and f1[expected + 1] > max(f1[b] for b in range(start, expected + 1)):
        expected += 1
    best = fit_entity_bias(nlp, dev, biases=(float(start), float(start + 1)), largest=20.0)
    assert best == expected and ner.entity_bias == expected
    assert fit_entity_bias(nlp, dev, biases=(float(start), float(start + 1)), largest=float(start + 1)) == start + 1


def test_a_bad_entity_bias_is_an_error_naming_it():
    ner = spacy.blank("en").add_pipe("crf_ner")
    for value in (float("nan"), float("inf"), "1", True):
        with pytest.raises(ValueError, match="entity_bias"):
            ner.entity_bias = value
