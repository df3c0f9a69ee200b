"""The entity components ``crf_ner`` and ``nldm_ner``: gold tags read from Doc.ents (missing, misaligned, cut in
windows), decoded sequences valid under the scheme, a model that learns, round trips and spaCy's route."""
import random
import warnings

import numpy
import pytest
import spacy
import torch
from spacy.tokens import Doc, Span
from spacy.training import Example
from thinc.api import Adam

from spacy_nldm import structs
from spacy_nldm.models.segments import doc_segments
from spacy_nldm.models.tagger import torch_scorer
from spacy_nldm.pipeline.ner import tag_spans
from test_pipeline_train import TOK2VEC

SMALL = {"tok2vec": TOK2VEC, "label_dim": 16, "rank": 32}
FACTORIES = ("crf_ner", "nldm_ner")

PEOPLE = [["Zorp"], ["Mia", "Blick"], ["Ana", "Maria", "Sol"], ["Tove"]]
PLACES = [["Paris"], ["New", "Avalon"], ["Oslo"], ["Port", "Zima"]]
TEMPLATES = [
    ["I", "met", "PER", "in", "LOC", "."],
    ["PER", "flew", "to", "LOC", "yesterday"],
    ["LOC", "loves", "PER", "!"],
    ["we", "saw", "PER", "and", "PER", "at", "LOC"],
    ["nothing", "happened", "here", "."],
]


def synthetic(vocab, n: int, seed: int = 0):
    """``n`` docs from the templates, with their PER and LOC entities."""
    rng = random.Random(seed)
    docs = []
    for i in range(n):
        words, ents = [], []
        for slot in TEMPLATES[i % len(TEMPLATES)]:
            if slot in ("PER", "LOC"):
                name = rng.choice(PEOPLE if slot == "PER" else PLACES)
                ents.append((len(words), len(words) + len(name), slot))
                words.extend(name)
            else:
                words.append(slot)
        doc = Doc(vocab, words=words)
        doc.ents = [Span(doc, a, b, label=label) for a, b, label in ents]
        docs.append(doc)
    return docs


def examples_of(docs):
    return [Example(Doc(doc.vocab, words=[t.text for t in doc]), doc) for doc in docs]


def train_on(nlp, train, epochs: int):
    """Initialise on ``train``, then ``epochs`` passes of Adam(0.01) in batches of 8, shuffled (seed 0)."""
    nlp.initialize(lambda: train)
    optimizer = Adam(0.01)
    for _ in range(epochs):
        random.Random(0).shuffle(train)
        for i in range(0, len(train), 8):
            nlp.update(train[i : i + 8], sgd=optimizer)


def pipeline(factory: str, scheme: str = "BIO", **config):
    nlp = spacy.blank("en")
    nlp.add_pipe(factory, config={"model": SMALL, "scheme": scheme, **config})
    return nlp


def valid(tags, scheme):
    """Whether a tag sequence obeys the scheme (brute force, on the tag strings)."""
    allowed = structs.allowed_transitions(tags_of_scheme(scheme), scheme)
    index = {tag: i for i, tag in enumerate(tags_of_scheme(scheme))}
    ids = [index[t] for t in tags]
    if not ids:
        return True
    ok = bool(allowed.start[ids[0]]) and bool(allowed.end[ids[-1]])
    return ok and all(bool(allowed.transitions[a, c]) for a, c in zip(ids, ids[1:]))


def tags_of_scheme(scheme):
    return structs.entity_labels(["LOC", "PER"], scheme)


def gold_tags(ner, eg):
    """The gold tag of each token of ``eg.predicted`` as the loss reads it (None: unknown, every tag allowed),
    from the component's public :meth:`gold_mask`, window after window; a token allows one tag or all of them."""
    doc = eg.predicted
    mask = ner.gold_mask([eg], ner.segment_scores([doc], ner.model.predict([doc])))
    tags = []
    for row, (start, end) in zip(mask, doc_segments(doc, ner.max_length)):
        for allowed in row[: end - start]:
            if allowed.all():
                tags.append(None)
            else:
                assert allowed.sum() == 1, allowed
                tags.append(ner.outputs[int(allowed.argmax())])
    return tags


@pytest.mark.parametrize("scheme", structs.SCHEMES)
@pytest.mark.parametrize("max_length", [256, 3])
def test_gold_tags_read_back_as_the_entities_cut_at_the_windows(scheme, max_length):
    nlp = pipeline("crf_ner", scheme=scheme, max_length=max_length)
    ner = nlp.get_pipe("crf_ner")
    docs = synthetic(nlp.vocab, 12)
    ner.initialize(lambda: examples_of(docs))
    index = {tag: i for i, tag in enumerate(ner.outputs)}
    prefix = [t.partition("-")[0] for t in ner.outputs]
    kinds = [t.partition("-")[2] for t in ner.outputs]
    for eg in examples_of(docs):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # (the long sentences' warning, tested with the taggers)
            windows = doc_segments(eg.predicted, max_length)
            tags = gold_tags(ner, eg)
        ids = numpy.asarray([index[t] for t in tags])
        found, expected = [], []
        for start, end in windows:
            assert valid(tags[start:end], scheme)
            found += [(start + a, start + b) for a, b in tag_spans(ids[start:end].tolist(), prefix, kinds)]
            expected += [(max(e.start, start), min(e.end, end)) for e in eg.reference.ents
                         if e.start < end and e.end > start]
        assert found == expected


def test_missing_annotation_allows_every_tag_and_misaligned_tokens_are_aligned():
    nlp = pipeline("crf_ner")
    ner = nlp.get_pipe("crf_ner")
    ner.initialize(lambda: examples_of(synthetic(nlp.vocab, 10)))
    # ent_iob missing on "met" and "in": unknown there (every tag allowed), known elsewhere
    ref = Doc(nlp.vocab, words=["I", "met", "Zorp", "in", "Oslo"], ents=["O", "", "B-PER", "", "B-LOC"])
    eg = Example(Doc(nlp.vocab, words=[t.text for t in ref]), ref)
    assert gold_tags(ner, eg) == ["O", None, "B-PER", None, "B-LOC"]
    # the reference's one token "New Avalon" is two predicted tokens: the entity is aligned onto both
    ref = Doc(nlp.vocab, words=["to", "New Avalon", "!"], spaces=[True, False, False], ents=["O", "B-LOC", "O"])
    eg = Example(nlp.make_doc("to New Avalon!"), ref)
    assert [t.text for t in eg.predicted] == ["to", "New", "Avalon", "!"]
    assert gold_tags(ner, eg) == ["O", "B-LOC", "I-LOC", "O"]


def test_an_entity_type_the_component_does_not_know_is_an_error_naming_it():
    nlp = pipeline("crf_ner")
    ner = nlp.get_pipe("crf_ner")
    ner.initialize(lambda: examples_of(synthetic(nlp.vocab, 10)))
    ref = Doc(nlp.vocab, words=["I", "use", "Zorpix"], ents=["O", "O", "B-PRODUCT"])
    eg = Example(Doc(nlp.vocab, words=[t.text for t in ref]), ref)
    with pytest.raises(ValueError, match="'PRODUCT'.*add_label"):
        ner.update([eg])


@pytest.mark.parametrize("factory", FACTORIES)
@pytest.mark.parametrize("scheme", structs.SCHEMES)
def test_decoded_tags_are_valid_under_the_scheme_with_random_weights(factory, scheme):
    nlp = pipeline(factory, scheme=scheme, decode="posterior") if factory == "crf_ner" else pipeline(factory, scheme=scheme)
    ner = nlp.get_pipe(factory)
    docs = synthetic(nlp.vocab, 20, seed=3)
    nlp.initialize(lambda: examples_of(docs))
    torch.manual_seed(0)
    for param in torch_scorer(ner.model).parameters():  # large random scores: many tags compete
        param.data.normal_(0, 3.0)
    preds = ner.predict([Doc(nlp.vocab, words=[t.text for t in doc]) for doc in docs])
    for s, (_, start, end) in enumerate(preds.segments):
        assert valid([ner.outputs[i] for i in preds.labels[s, : end - start]], scheme)


@pytest.mark.parametrize("factory", FACTORIES)
def test_the_component_learns_entities_and_reports_spacy_scores(factory, tmp_path):
    nlp = pipeline(factory)
    train = examples_of(synthetic(nlp.vocab, 40))
    train_on(nlp, train, epochs=15)
    held_out = examples_of(synthetic(nlp.vocab, 20, seed=7))
    scores = nlp.evaluate(held_out)
    assert scores["ents_f"] == 1.0, scores
    assert set(scores["ents_per_type"]) == {"PER", "LOC"}
    # round trip through disk: the same entities
    nlp.to_disk(tmp_path / "model")
    loaded = spacy.load(tmp_path / "model")
    texts = [eg.reference.text for eg in held_out]
    assert [[(e.start, e.end, e.label_) for e in d.ents] for d in nlp.pipe(texts)] == \
           [[(e.start, e.end, e.label_) for e in d.ents] for d in loaded.pipe(texts)]


@pytest.mark.parametrize("factory", FACTORIES)
def test_the_missing_entity_bias_decides_what_unannotated_tokens_are_learnt_as(factory):
    """Every person's tokens unannotated (spaCy's missing ``ent_iob``), the rest annotated: the plain likelihood
    gives the gaps no target of their own; a positive ``missing_entity_bias`` teaches that they are inside
    entities, a negative one that they are ``O``, while the annotated ``O`` tokens stay ``O`` either way."""
    def entity_probs(bias):
        torch.manual_seed(0)
        nlp = pipeline(factory, missing_entity_bias=bias, store_probs=True)
        train = []
        for doc in synthetic(nlp.vocab, 40):
            tags = ["" if t.ent_type_ == "PER" else (f"{t.ent_iob_}-{t.ent_type_}" if t.ent_type_ else "O")
                    for t in doc]
            train.append(Example(Doc(nlp.vocab, words=[t.text for t in doc]),
                                 Doc(nlp.vocab, words=[t.text for t in doc], ents=tags)))
        nlp.get_pipe(factory).add_label("PER")
        train_on(nlp, train, epochs=5)
        people, outside = [], []
        for ref in synthetic(nlp.vocab, 20, seed=7):
            p_entity = 1.0 - nlp(Doc(nlp.vocab, words=[t.text for t in ref]))._.nldm_probs[:, 0]
            people += [p_entity[t.i] for t in ref if t.ent_type_ == "PER"]
            outside += [p_entity[t.i] for t in ref if not t.ent_type_]
        return numpy.mean(people), numpy.max(outside)

    towards_entities, towards_o = entity_probs(4.0), entity_probs(-4.0)
    assert towards_entities[0] > 0.95 and towards_o[0] < 0.05, (towards_entities, towards_o)
    assert towards_entities[1] < 0.05 and towards_o[1] < 0.05


@pytest.mark.parametrize("bias", [2.5, -1.5])
def test_the_missing_entity_bias_weighs_only_the_missing_tokens_of_real_segments(bias):
    """The loss's offsets: -bias on O (bias > 0), or the bias on every entity tag (bias < 0), on the missing
    tokens only (not on annotated tokens, not on a segment's padding); none for fully annotated docs."""
    nlp = pipeline("crf_ner", scheme="BILUO", missing_entity_bias=bias)
    ner = nlp.get_pipe("crf_ner")
    ner.initialize(lambda: examples_of(synthetic(nlp.vocab, 10)))
    full = Doc(nlp.vocab, words=["Zorp", "flew", "to", "Oslo", "today"], ents=["B-PER", "O", "O", "B-LOC", "O"])
    partial = Doc(nlp.vocab, words=["I", "met", "Ana", "Sol"], ents=["O", "O", "", ""])
    examples = [Example(Doc(nlp.vocab, words=[t.text for t in d]), d) for d in (full, partial)]
    scores = ner.segment_scores([eg.predicted for eg in examples], ner.model.predict([eg.predicted for eg in examples]))
    gold = torch.from_numpy(ner.gold_mask(examples, scores))
    lengths = torch.from_numpy(scores.lengths)
    offsets = ner.gold_offsets(gold, lengths)
    outside = torch.tensor([tag == "O" for tag in ner.outputs])
    want = torch.zeros_like(offsets)
    want[1, 2:4] = torch.where(outside, -bias, 0.0) if bias > 0 else torch.where(outside, 0.0, bias)
    assert torch.equal(offsets, want)
    assert ner.gold_offsets(gold[:1], lengths[:1]) is None


def test_missing_entity_bias_must_be_a_finite_number():
    for bad in (float("nan"), float("inf"), "4", True):
        with pytest.raises(ValueError, match="missing_entity_bias"):
            pipeline("crf_ner", missing_entity_bias=bad)


@pytest.mark.parametrize("factory", FACTORIES)
def test_empty_docs_and_stored_probabilities(factory):
    nlp = pipeline(factory, store_probs=True)
    docs = synthetic(nlp.vocab, 10)
    nlp.initialize(lambda: examples_of(docs))
    empty, doc = list(nlp.pipe(["", "I met Zorp in Oslo"]))
    assert len(empty.ents) == 0
    probs = doc._.nldm_probs
    assert probs.shape == (5, len(nlp.get_pipe(factory).outputs))
    numpy.testing.assert_allclose(probs.sum(-1), 1.0, rtol=1e-5)
    assert doc._.nldm_prob_labels[0] == "O"


def test_init_config_writes_a_pipeline_spacy_can_fill():
    from spacy.cli.init_config import init_config

    for factory in FACTORIES:
        config = init_config(lang="en", pipeline=[factory], optimize="efficiency", gpu=False)
        nlp = spacy.util.load_model_from_config(config, auto_fill=True, validate=True)
        assert nlp.pipe_names == [factory]
        assert config["training"]["score_weights"]["ents_f"] == 1.0
