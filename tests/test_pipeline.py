"""The nldm_tagger / crf_tagger components: API, labels, partial labels, decoding, serialisation."""
import subprocess
import sys
import warnings

import numpy
import pytest
import torch
import spacy
import srsly
from spacy.tokens import Doc
from spacy.training import Example
from thinc.api import fix_random_seed

from brute import assert_heads_form_a_tree
from nldm_fixtures import LEARNABLE, LEARNABLE_FLOOR, TWITTER
from spacy_nldm.corpora.ark import read_ark
from spacy_nldm.models.tagger import torch_scorer
from spacy_nldm.pipeline import render_tree, tree_to_displacy

ARK_TRAIN = TWITTER / "oct27.train"
SMALL_TOK2VEC = {
    "@architectures": "spacy.HashEmbedCNN.v2",
    "pretrained_vectors": None,
    "width": 32,
    "depth": 1,
    "embed_size": 500,
    "window_size": 1,
    "maxout_pieces": 2,
    "subword_features": True,
}


def small_model(factory, **overrides):
    model = {"edge_scorer": "trilinear", "label_dim": 8, "rank": 16, "tok2vec": SMALL_TOK2VEC}
    model.update(overrides)
    return model


@pytest.fixture(scope="module")
def ark():
    return [(s.words, s.tags) for s in read_ark(ARK_TRAIN)][:20]


def examples(nlp, sents):
    return [Example.from_dict(Doc(nlp.vocab, words=w), {"tags": t}) for w, t in sents]


def trained(factory, sents, steps=3, component=None, **model):
    nlp = spacy.blank("en")
    pipe = nlp.add_pipe(factory, config={"model": small_model(factory, **model), **(component or {})})
    egs = examples(nlp, sents)
    optimizer = nlp.initialize(lambda: egs)
    for _ in range(steps):
        nlp.update(egs, sgd=optimizer)
    return nlp, pipe


def test_factories_found_through_entry_points_in_a_fresh_interpreter():
    code = (
        "import spacy, sys\n"
        "nlp = spacy.blank('en')\n"
        "nlp.add_pipe('nldm_tagger'); nlp.add_pipe('crf_tagger', config={'model': {'order': 2}})\n"
        "assert 'spacy_nldm' not in nlp.config['nlp']['pipeline']\n"
        "print(nlp.pipe_names, nlp.get_pipe('crf_tagger').model.attrs['order'])\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd="/")
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "['nldm_tagger', 'crf_tagger'] 2"


def test_pipe_with_worker_processes_tags_like_one_process():
    """nlp.pipe(n_process=2) forks workers after torch has run in the parent (it used to hang there)."""
    code = (
        "import spacy\n"
        "from spacy.tokens import Doc\n"
        "from spacy.training import Example\n"
        "nlp = spacy.blank('en')\n"
        "nlp.add_pipe('nldm_tagger', config={'model': {'max_dist': 3}})\n"
        "sents = [(['a', 'b', 'c', 'd'], ['X', 'Y', 'X', 'Y']), (['e', 'f'], ['Y', 'X'])] * 4\n"
        "egs = [Example.from_dict(Doc(nlp.vocab, words=w), {'tags': t}) for w, t in sents]\n"
        "optimizer = nlp.initialize(lambda: egs)\n"
        "for _ in range(3): nlp.update(egs, sgd=optimizer)\n"
        "docs = lambda: (Doc(nlp.vocab, words=w) for w, _ in sents * 20)\n"
        "one = [[t.tag_ for t in d] for d in nlp.pipe(docs(), batch_size=10)]\n"
        "two = [[t.tag_ for t in d] for d in nlp.pipe(docs(), batch_size=10, n_process=2)]\n"
        "assert one == two and len(two) == 160, (one[:3], two[:3])\n"
        "print('ok')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd="/", timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"


def test_importing_registers_no_fork_hook_and_the_first_component_registers_one():
    """The fork hook (one torch thread in nlp.pipe's forked workers) is registered by the first component
    made in a process, once; importing the package registers nothing."""
    code = (
        "import os\n"
        "calls = []\n"
        "register = os.register_at_fork\n"
        "def recorded(**hooks):\n"
        "    mine = [(when, getattr(f, '__module__', None) or '') for when, f in hooks.items()]\n"
        "    calls.extend((when, module) for when, module in mine if module.startswith('spacy_nldm'))\n"
        "    register(**hooks)\n"
        "os.register_at_fork = recorded\n"
        "import spacy, spacy_nldm, spacy_nldm.pipeline.tagger\n"
        "assert calls == [], calls\n"
        "nlp = spacy.blank('en')\n"
        "nlp.add_pipe('nldm_tagger'); nlp.add_pipe('crf_tagger', name='crf')\n"
        "spacy.blank('en').add_pipe('nldm_tagger')\n"
        "print(calls)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd="/")
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[('after_in_child', 'spacy_nldm.pipeline.tagger')]"


def test_labels_collected_bang_is_a_plain_label_and_tags_set(ark):
    nlp, pipe = trained("nldm_tagger", ark, steps=1)
    want = sorted({t for _, tags in ark for t in tags})
    assert list(pipe.labels) == want and "!" in pipe.labels
    docs = [Doc(nlp.vocab, words=w) for w, _ in ark[:3]]
    scores = pipe.segment_scores(docs, pipe.model.predict(docs))
    assert scores.scores.dtype == numpy.float32  # the float32 path, thinc to torch and back
    gold = pipe.gold_mask(examples(nlp, ark[:3]), scores)
    for s, n in enumerate(scores.lengths):  # fully labelled: one allowed label per token, "!" included
        assert gold[s, :n].sum(-1).tolist() == [1] * n
        assert [pipe.labels[i] for i in gold[s, :n].argmax(-1)] == ark[s][1]
    doc = nlp(" ".join(ark[0][0]))
    assert_heads_form_a_tree([t._.nldm_head for t in doc])  # the stored heads


FLOOR = LEARNABLE_FLOOR


@pytest.mark.parametrize("factory", ["nldm_tagger", "crf_tagger"])
def test_the_scorer_reports_the_accuracy_that_training_lifts_above_a_floor(factory):
    """pipe.score on the component's own predictions: an untrained component is below the floor, a few
    training steps on the tiny learnable task lift it above, and nlp.evaluate reports the same figure."""
    fix_random_seed(0)
    nlp = spacy.blank("en")
    pipe = nlp.add_pipe(factory, config={"model": small_model(factory)})
    egs = examples(nlp, LEARNABLE)
    optimizer = nlp.initialize(lambda: egs)

    def accuracy():
        tagged = [Example(nlp(Doc(nlp.vocab, words=w)), eg.reference) for (w, _), eg in zip(LEARNABLE, egs)]
        acc = pipe.score(tagged)["tag_acc"]
        assert nlp.evaluate(egs)["tag_acc"] == pytest.approx(acc)
        return acc

    untrained = accuracy()
    assert untrained < FLOOR
    for _ in range(15):
        nlp.update(egs, sgd=optimizer)
    assert accuracy() > FLOOR


def test_add_label_after_initialize_keeps_the_trained_scores(ark):
    nlp, pipe = trained("nldm_tagger", ark[:10], steps=1)
    docs = [Doc(nlp.vocab, words=w) for w, _ in ark[:2]]
    before = pipe.model.predict(docs).scores
    assert pipe.add_label("NEWTAG") == 1 and pipe.add_label("NEWTAG") == 0
    after = pipe.model.predict(docs).scores
    M = before.shape[-1]
    assert after.shape[-1] == M + 1
    numpy.testing.assert_allclose(after[..., : M + 1, :M], before, rtol=1e-5, atol=1e-5)


def test_partial_labels_are_unknown_not_errors(ark):
    nlp, pipe = trained("nldm_tagger", ark[:4], steps=1)
    words, tags = ark[0]

    def loss_with(tag_list):
        eg = Example.from_dict(Doc(nlp.vocab, words=words), {"tags": tag_list})
        return pipe.get_loss([eg], pipe.model.predict([eg.predicted]))[0]

    full = loss_with(tags)
    partial = loss_with([t if i % 2 else "" for i, t in enumerate(tags)])
    none = loss_with([""] * len(tags))
    assert abs(none) < 1e-3 and 0 <= partial < full
    eg = Example.from_dict(Doc(nlp.vocab, words=words), {"tags": [""] + tags[1:]})
    losses = nlp.update([eg], sgd=nlp.resume_training())
    assert numpy.isfinite(losses["nldm_tagger"])


def test_unseen_gold_label_is_a_clear_error(ark):
    nlp, pipe = trained("crf_tagger", ark[:5], steps=1)
    eg = Example.from_dict(Doc(nlp.vocab, words=["hello", "world"]), {"tags": ["N", "NOT_A_TAG"]})
    with pytest.raises(ValueError, match=r"'NOT_A_TAG'.*'hello world"):
        nlp.update([eg])


def test_empty_one_token_and_long_docs(ark):
    nlp, pipe = trained("nldm_tagger", ark[:5], steps=1, component={"max_length": 8})
    docs = list(nlp.pipe(["", "hi", " ".join(["lol"] * 19)]))
    assert len(docs[0]) == 0 and docs[0]._.nldm_tree_score == 0.0
    assert docs[1][0].tag_ in pipe.labels and docs[1][0]._.nldm_head is None
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        long = nlp(" ".join(["lol"] * 19))
    assert any("max_length=8" in str(w.message) for w in caught)
    assert all(t.tag_ for t in long)
    for t in long:  # each window is its own tree
        if t._.nldm_head is not None:
            assert t._.nldm_head // 8 == t.i // 8
    losses = nlp.update(examples(nlp, [(["hi"], ["!"]), (["a"] * 19, ["D"] * 19)]), sgd=nlp.resume_training())
    assert numpy.isfinite(losses["nldm_tagger"])


@pytest.mark.parametrize("factory", ["nldm_tagger", "crf_tagger"])
def test_batches_without_tokens_never_reach_the_model(ark, factory, monkeypatch):
    from thinc.api import Model

    nlp, pipe = trained(factory, ark[:4], steps=1)

    def fail(model, docs, is_train):
        raise AssertionError("the model was called on a batch without tokens")

    monkeypatch.setattr(pipe, "model", Model("unreachable", fail, attrs=dict(pipe.model.attrs)))
    empty = [Doc(nlp.vocab, words=[]) for _ in range(3)]
    preds = pipe.predict(empty)
    pipe.set_annotations(empty, preds)
    assert all(doc._.nldm_tree_score == (0.0 if factory == "nldm_tagger" else None) for doc in empty)
    assert pipe.update([Example.from_dict(doc, {}) for doc in empty]) == {factory: 0.0}


@pytest.mark.parametrize("factory", ["nldm_tagger", "crf_tagger"])
def test_nan_scores_are_a_clear_error(ark, factory):
    """As spaCy's tagger (E940), in update and in predict."""
    from spacy_nldm.models.tagger import torch_scorer

    # the last weights tag (with average_params the averages, which the NaN written below does not reach)
    nlp, pipe = trained(factory, ark[:4], steps=1, component={"average_params": False})
    with torch.no_grad():
        next(torch_scorer(pipe.model).parameters()).fill_(float("nan"))
    with pytest.raises(ValueError, match=f"{factory}: found NaN or infinite values in the edge scores"):
        nlp.update(examples(nlp, ark[:2]))
    with pytest.raises(ValueError, match="E940"):
        nlp(" ".join(ark[0][0]))


def test_a_loss_that_is_not_finite_is_a_clear_error(ark, monkeypatch):
    """The structured core clamps impossible arcs, so finite scores give a finite loss; the check
    behind it (spaCy's E910) is tested with a structure that returns NaN."""
    from spacy_nldm.pipeline import tagger as module

    nlp, pipe = trained("nldm_tagger", ark[:4], steps=1)
    eg = examples(nlp, ark[:1])[0]
    structure = module.get_structure(pipe.model, {})
    monkeypatch.setattr(structure, "nll", lambda F, *args, **kwargs: (F * float("nan")).sum())
    monkeypatch.setattr(module, "get_structure", lambda model, tables: structure)
    with pytest.raises(ValueError, match="nldm_tagger: the loss is nan .*E910"):
        pipe.get_loss([eg], pipe.model.predict([eg.predicted]))


def test_sentences_are_scored_separately(ark):
    nlp, pipe = trained("nldm_tagger", ark[:5], steps=1)
    (w1, _), (w2, _) = ark[5], ark[6]
    n1, n2 = len(w1), len(w2)
    joined = Doc(nlp.vocab, words=w1 + w2, sent_starts=[True] + [False] * (n1 - 1) + [True] + [False] * (n2 - 1))
    scores = pipe.segment_scores([joined], pipe.model.predict([joined]))
    assert scores.segments == [(0, 0, n1), (0, n1, n1 + n2)] and scores.lengths.tolist() == [n1, n2]
    doc = nlp(joined)
    for t in doc:  # one tree per sentence
        assert t._.nldm_head is None or (t._.nldm_head < n1) == (t.i < n1)
    assert sum(t._.nldm_head is None for t in doc) >= 2
    unsplit = nlp(Doc(nlp.vocab, words=w1 + w2))
    assert pipe.segment_scores([unsplit], pipe.model.predict([unsplit])).lengths.tolist() == [n1 + n2]


@pytest.mark.parametrize("factory", ["nldm_tagger", "crf_tagger"])
def test_posterior_decoding_and_stored_probs(ark, factory):
    nlp, pipe = trained(factory, ark[:5], steps=2, component={"decode": "posterior", "store_probs": True})
    doc = nlp(" ".join(ark[9][0]))
    probs = doc._.nldm_probs
    assert probs.shape == (len(doc), len(pipe.labels))
    numpy.testing.assert_allclose(probs.sum(1), 1.0, rtol=1e-4)
    assert [t.tag_ for t in doc] == [pipe.labels[i] for i in probs.argmax(1)]
    assert doc[0]._.nldm_probs[doc[0].tag_] == pytest.approx(float(probs[0].max()))


def test_without_the_tree_the_labels_are_the_same(ark):
    nlp, pipe = trained("nldm_tagger", ark[:6], steps=3)
    texts = [" ".join(w) for w, _ in ark[10:16]]
    for decode in ("posterior", "viterbi"):
        pipe.decode, pipe.store_tree = decode, True
        with_tree = list(nlp.pipe(texts))
        assert all(doc._.nldm_tree_score is not None for doc in with_tree)  # (a head None: a root child)
        pipe.store_tree = False
        without = list(nlp.pipe(texts))
        assert [[t.tag_ for t in d] for d in without] == [[t.tag_ for t in d] for d in with_tree]
        assert all(t._.nldm_head is None for doc in without for t in doc)
        assert all(doc._.nldm_tree_score is None for doc in without)


@pytest.mark.parametrize(
    "factory,model,component",
    [
        ("nldm_tagger", {"max_dist": None, "edge_scorer": "bilinear"}, {"store_probs": True}),
        ("nldm_tagger", {"max_dist": 3, "edge_scorer": "emission_transition"}, {"loss": "max"}),
        ("crf_tagger", {"order": 2}, {"store_probs": True}),
        ("nldm_tagger", {"embed_width": 8}, {"store_probs": True}),
        ("crf_tagger", {"embed_width": 8, "embed_depth": 2}, {"store_probs": True}),
        ("nldm_tagger", {"embed_width": 8, "embed_depth": 1, "embed_mix": True}, {"store_probs": True}),
    ],
)
def test_serialisation_round_trips_give_identical_predictions(ark, tmp_path, factory, model, component):
    nlp, _ = trained(factory, ark[:6], steps=2, component=component, **model)
    texts = [" ".join(w[:12]) for w, _ in ark[10:13]]

    def predict(pipeline):
        out = []
        for doc in pipeline.pipe(texts):
            out.append(([t.tag_ for t in doc], [t._.nldm_head for t in doc], doc._.nldm_tree_score))
            if doc._.nldm_probs is not None:
                out.append(doc._.nldm_probs.tolist())
        return out

    want = predict(nlp)
    nlp.to_disk(tmp_path / "pipe")
    assert predict(spacy.load(tmp_path / "pipe")) == want
    fresh = spacy.blank("en")
    config = {k: v for k, v in nlp.get_pipe_config(factory).items() if k != "factory"}
    fresh.add_pipe(factory, config=config)
    fresh.from_bytes(nlp.to_bytes())
    assert predict(fresh) == want


@pytest.mark.parametrize("factory", ["nldm_tagger", "crf_tagger"])
def test_settings_given_at_load_time_take_effect_and_are_saved_once(ark, tmp_path, factory):
    """The config is the one source of the settings; the saved component holds only what it learned."""
    nlp, pipe = trained(factory, ark[:6], steps=2)
    nlp.to_disk(tmp_path / "saved")
    settings = {"store_probs": True, "decode": "posterior", "max_length": 8}
    loaded = spacy.load(tmp_path / "saved", config={"components": {factory: settings}})
    tagger = loaded.get_pipe(factory)
    text = " ".join(["lol"] * 19)
    with pytest.warns(UserWarning, match="max_length=8"):
        doc = loaded(text)
    assert doc._.nldm_probs is not None and doc._.nldm_probs.shape == (19, len(tagger.labels))
    assert [t.tag_ for t in doc] == [tagger.labels[i] for i in doc._.nldm_probs.argmax(1)]  # posterior decoding
    assert {key: getattr(tagger, key) for key in settings} == settings
    assert tagger.labels == pipe.labels and "max_length" not in tagger.model.attrs
    loaded.to_disk(tmp_path / "again")
    assert {key: loaded.config["components"][factory][key] for key in settings} == settings
    assert srsly.read_json(tmp_path / "again" / factory / "cfg") == {"labels": list(pipe.labels)}
    reloaded = spacy.load(tmp_path / "again")
    assert {key: getattr(reloaded.get_pipe(factory), key) for key in settings} == settings
    assert reloaded(text)._.nldm_probs.tolist() == doc._.nldm_probs.tolist()


def test_pos_attribute_and_scorer_key():
    nlp = spacy.blank("en")
    pipe = nlp.add_pipe("crf_tagger", config={"attr": "pos", "model": small_model("crf_tagger")})
    words = ["I", "saw", "the", "cat", "."]
    egs = [Example.from_dict(Doc(nlp.vocab, words=words), {"pos": ["PRON", "VERB", "DET", "NOUN", "PUNCT"]})] * 4
    optimizer = nlp.initialize(lambda: egs)
    for _ in range(15):
        nlp.update(egs, sgd=optimizer)
    assert set(pipe.labels) == {"PRON", "VERB", "DET", "NOUN", "PUNCT"}
    assert [t.pos_ for t in nlp(" ".join(words))] == ["PRON", "VERB", "DET", "NOUN", "PUNCT"]
    assert nlp.evaluate(egs)["pos_acc"] == 1.0
    with pytest.raises(ValueError, match="Universal POS"):
        pipe.add_label("NN")


@pytest.mark.parametrize("factory, theirs, key", [("crf_tagger", "spacy.tagger_scorer.v1", "tag_acc"),
                                                   ("crf_ner", "spacy.ner_scorer.v1", "ents_f")])
def test_spacys_own_scorer_scores_as_the_default_and_a_null_scorer_scores_nothing(factory, theirs, key):
    words = ["Big", "Name", "is", "here"]
    gold = Doc(spacy.blank("en").vocab, words=words, tags=["NNP", "NNP", "VBZ", "RB"], ents=["B-P", "I-P", "O", "O"])
    scores = {}
    for scorer in ("default", theirs, None):
        fix_random_seed(0)
        nlp = spacy.blank("en")
        config = {"model": small_model(factory)}
        if scorer != "default":
            config["scorer"] = None if scorer is None else {"@scorers": scorer}
        nlp.add_pipe(factory, config=config)
        egs = [Example(Doc(nlp.vocab, words=words), Doc(nlp.vocab).from_bytes(gold.to_bytes()))] * 2
        optimizer = nlp.initialize(lambda: egs)
        for _ in range(3):
            nlp.update(egs, sgd=optimizer)
        scores[scorer] = nlp.evaluate(egs)
    assert scores[theirs][key] == scores["default"][key]
    assert key not in scores[None]


def test_invalid_settings_are_errors():
    nlp = spacy.blank("en")
    with pytest.raises(ValueError, match="decode"):
        nlp.add_pipe("nldm_tagger", config={"decode": "beam"})
    with pytest.raises(ValueError, match="loss"):
        nlp.add_pipe("crf_tagger", name="crf", config={"model": {"order": 1}}).__class__(
            nlp.vocab, nlp.get_pipe("crf").model, "x", loss="max"
        )


def test_listener_shares_a_tok2vec_component(ark):
    """A listener to a shared tok2vec, beside the head's own embeddings."""
    nlp = spacy.blank("en")
    nlp.add_pipe("tok2vec", config={"model": SMALL_TOK2VEC})
    listener = {"@architectures": "spacy.Tok2VecListener.v1", "width": 32, "upstream": "*"}
    nlp.add_pipe("nldm_tagger", config={"model": small_model("nldm_tagger", tok2vec=listener, embed_width=8)})
    tok2vec = nlp.get_pipe("tok2vec")
    egs = examples(nlp, ark[:10])
    optimizer = nlp.initialize(lambda: egs)
    assert tok2vec.listening_components == ["nldm_tagger"]
    weights = tok2vec.model.to_bytes()
    for _ in range(2):
        losses = nlp.update(egs, sgd=optimizer)
    assert losses["nldm_tagger"] > 0
    assert tok2vec.model.to_bytes() != weights  # the tagger's gradient reached the shared tok2vec
    doc = nlp(" ".join(ark[11][0]))
    assert all(t.tag_ for t in doc) and doc.tensor.shape == (len(doc), 32)


@pytest.mark.parametrize("factory,layers,width", [
    ("nldm_tagger", {"embed_width": 8}, 40),
    ("crf_tagger", {"embed_width": 8, "embed_depth": 1}, 40),
    ("nldm_tagger", {"embed_width": 8, "embed_depth": 1, "embed_mix": True}, 40),
])
def test_head_layers_on_a_listener_learn_and_tag_each_doc_as_alone(ark, factory, layers, width):
    """embed_width (the head's own hash embeddings, beside the listener's vectors; with embed_depth, window
    context over them, or with embed_mix over them and the listener's vectors together) reads a listener's vectors;
    training fits the training sentences (an untrained head does not:
    the tiny learnable task), the scorer reads the last layer's width, and a doc's tags and probabilities do not depend on its batch."""
    nlp = spacy.blank("en")
    nlp.add_pipe("tok2vec", config={"model": SMALL_TOK2VEC})
    listener = {"@architectures": "spacy.Tok2VecListener.v1", "width": 32, "upstream": "*"}
    pipe = nlp.add_pipe(factory, config={"model": small_model(factory, tok2vec=listener, **layers),
                                         "store_probs": True})
    fix_random_seed(0)
    egs = examples(nlp, LEARNABLE)
    optimizer = nlp.initialize(lambda: egs)
    assert nlp.evaluate(egs)["tag_acc"] < FLOOR
    for _ in range(15):
        nlp.update(egs, sgd=optimizer)
    assert nlp.evaluate(egs)["tag_acc"] > FLOOR
    assert torch_scorer(pipe.model).nI == width
    texts = [" ".join(w) for w, _ in ark[8:12]]
    together = list(nlp.pipe(texts, batch_size=4))
    for text, doc in zip(texts, together):
        alone = nlp(text)
        assert [t.tag_ for t in alone] == [t.tag_ for t in doc]
        numpy.testing.assert_allclose(alone._.nldm_probs, doc._.nldm_probs, atol=1e-5)


@pytest.mark.parametrize("layers", [{"embed_width": 8, "embed_depth": 1},
                                    {"embed_width": 8, "embed_depth": 1, "embed_mix": True}])
def test_tok2vec_loss_scales_the_tok2vecs_gradient_and_not_the_heads_own_layers(ark, layers):
    """tok2vec_loss "sum" against "mean" (the head's loss per token either way): the tok2vec's gradient is
    the number of tokens times larger; the head's own layers (its embeddings and window layers) get the same
    gradient."""
    from spacy_nldm.models.tagger import torch_scorer

    grads = {}
    for tok2vec_loss in ("mean", "sum"):
        fix_random_seed(0)
        nlp = spacy.blank("en")
        pipe = nlp.add_pipe("crf_tagger", config={"model": small_model("crf_tagger", **layers),
                                                  "tok2vec_loss": tok2vec_loss})
        egs = examples(nlp, ark[:4])
        nlp.initialize(lambda: egs)
        with torch.no_grad():  # the emission starts at zero, which would send no gradient below the scorer
            torch.manual_seed(0)
            torch_scorer(pipe.model).W.normal_()
        pipe.update(egs, sgd=None)  # gradients kept, no step
        tok2vec = pipe.model.get_ref("tok2vec")
        in_tok2vec = {node.id for node in tok2vec.walk()}
        grads[tok2vec_loss] = {
            (node.id in in_tok2vec, i, name): numpy.array(node.get_grad(name))
            for i, node in enumerate(pipe.model.walk()) for name in node.param_names if node.has_grad(name)}
    n_tokens = sum(len(w) for w, _ in ark[:4])
    # both kinds of parameter have gradients
    assert {k[0] for k, g in grads["mean"].items() if numpy.abs(g).sum() > 0} == {True, False}
    for key, mean in grads["mean"].items():
        summed = grads["sum"][key]
        want = n_tokens * mean if key[0] else mean  # the tok2vec's, else the head's own layers'
        numpy.testing.assert_allclose(summed, want, rtol=1e-4, atol=1e-5 * numpy.abs(want).max())


def architecture(factory, tok2vec, **overrides):
    """The factory's registered architecture called with its default settings (``overrides`` changed)."""
    from spacy.util import registry

    from spacy_nldm import defaults

    block = defaults.NLDM_MODEL if factory == "nldm_tagger" else defaults.CRF_MODEL
    settings = {k: v for k, v in block.items() if k not in ("@architectures", "tok2vec")}
    return registry.architectures.get(block["@architectures"])(tok2vec, **{**settings, **overrides})


def test_head_embeddings_on_a_tok2vec_of_unknown_width_need_sample_docs():
    """Without sample docs and a stated tok2vec width, initialize says what is missing (not a thinc dim error)."""
    from spacy.ml.models.tok2vec import MultiHashEmbed
    from thinc.api import Maxout, chain, with_array

    unstated = chain(MultiHashEmbed(width=16, attrs=["NORM"], rows=[100], include_static_vectors=False),
                     with_array(Maxout(nO=None, nP=2)))
    with pytest.raises(ValueError, match="cannot infer the tok2vec width without sample docs"):
        architecture("crf_tagger", unstated, embed_width=8, nO=3).initialize()


def test_render_tree_draws_the_latent_tree(ark):
    nlp, pipe = trained("nldm_tagger", ark[:5], steps=1)
    doc = nlp(" ".join(ark[6][0]))
    data = tree_to_displacy(doc)
    assert [w["text"] for w in data["words"]] == ["ROOT"] + [t.text for t in doc]
    assert [w["tag"] for w in data["words"][1:]] == [t.tag_ for t in doc]
    assert len(data["arcs"]) == len(doc)
    for arc, t in zip(data["arcs"], doc):
        head = 0 if t._.nldm_head is None else t._.nldm_head + 1
        assert {arc["start"], arc["end"]} == {head, t.i + 1}
    html = render_tree(doc, jupyter=False)
    assert "<svg" in html and doc[0].tag_ in html


def test_render_tree_refuses_a_doc_without_a_latent_tree(ark):
    nlp, _ = trained("crf_tagger", ark[:4], steps=1)
    for doc in (nlp(" ".join(ark[6][0])), Doc(nlp.vocab, words=["no", "tags"])):
        with pytest.raises(ValueError, match="has no latent tree to draw"):
            render_tree(doc, jupyter=False)


@pytest.mark.parametrize("factory", ["nldm_tagger", "crf_tagger"])
def test_normalized_loss_is_the_summed_loss_per_token(ark, factory):
    """normalize_loss: the loss and every gradient entry are the summed ones divided by the batch's tokens
    (windows included: max_length 5 splits the sentences, the count is still the batch's tokens)."""
    nlp, pipe = trained(factory, ark[:6], steps=1, component={"max_length": 5})
    egs = examples(nlp, ark[:6])
    scores = pipe.model.predict([eg.predicted for eg in egs])
    assert pipe.normalize_loss  # the factory default
    mean, d_mean = pipe.get_loss(egs, scores)
    pipe.normalize_loss = False
    total, d_total = pipe.get_loss(egs, scores)
    tokens = sum(len(eg.predicted) for eg in egs)
    assert total > 0 and mean == pytest.approx(total / tokens, rel=1e-5)
    numpy.testing.assert_allclose(d_mean.scores, d_total.scores / tokens, rtol=1e-4, atol=1e-8)
    assert d_mean.tables.keys() == d_total.tables.keys() == scores.tables.keys()
    for name, d_table in d_mean.tables.items():  # (sums of cancelling float32 terms: an error of the largest's)
        expected = d_total.tables[name] / tokens
        numpy.testing.assert_allclose(d_table, expected, rtol=1e-4, atol=1e-3 * float(numpy.abs(expected).max()))


def _gradients_of_one_update(pipe, egs):
    """{("tok2vec", node index, name) or ("head", name): gradient} after one ``update`` without an
    optimizer, then cleared, so the next call starts from zero."""
    from spacy_nldm.models.tagger import torch_scorer

    pipe.update(egs)
    grads = {}
    for i, node in enumerate(pipe.model.get_ref("tok2vec").walk()):
        for name in node.param_names:
            if node.has_grad(name):
                grads[("tok2vec", i, name)] = node.get_grad(name).copy()
                node.set_grad(name, node.ops.alloc(node.get_grad(name).shape))
    for name, param in torch_scorer(pipe.model).named_parameters():
        grads[("head", name)] = param.grad.detach().numpy().copy()
        param.grad = None
    return grads


@pytest.mark.parametrize("factory", ["nldm_tagger", "crf_tagger"])
def test_tok2vec_loss_scales_only_the_encoders_gradient(ark, factory):
    """tok2vec_loss: the tok2vec's gradient is of the summed loss ("sum") or of the mean per token
    ("mean") whatever normalize_loss says, or of the head's loss (None); the head's follows
    normalize_loss. Checked on every parameter against the per-token setting, on a model trained a few
    steps (nonzero emission weights)."""
    fix_random_seed(0)
    nlp, pipe = trained(factory, ark[:6], steps=3)
    assert pipe.normalize_loss and pipe.tok2vec_loss == "sum"  # the factory defaults
    egs = examples(nlp, ark[:6])
    tokens = sum(len(eg.predicted) for eg in egs)
    pipe.tok2vec_loss = "mean"
    reference = _gradients_of_one_update(pipe, egs)
    assert any(numpy.abs(g).max() > 0 for k, g in reference.items() if k[0] == "tok2vec")
    settings = [(True, "sum"), (False, "sum"), (False, "mean"), (True, "mean"), (True, None), (False, None)]
    for normalize_loss, tok2vec_loss in settings:
        pipe.normalize_loss, pipe.tok2vec_loss = normalize_loss, tok2vec_loss
        grads = _gradients_of_one_update(pipe, egs)
        assert grads.keys() == reference.keys()
        summed_for_tok2vec = tok2vec_loss == "sum" or (tok2vec_loss is None and not normalize_loss)
        for key, g in grads.items():
            factor = tokens if (summed_for_tok2vec if key[0] == "tok2vec" else not normalize_loss) else 1
            expected = reference[key] * factor
            # float32 sums of another order (cancelling terms: a few 1e-3 of the largest); the factor is ~100
            atol = 5e-3 * float(numpy.abs(expected).max())
            numpy.testing.assert_allclose(g, expected, rtol=1e-3, atol=atol, err_msg=str(key))


def test_tok2vec_loss_is_checked():
    nlp = spacy.blank("en")
    with pytest.raises(ValueError, match="tok2vec_loss must be one of"):
        nlp.add_pipe("crf_tagger", config={"tok2vec_loss": "total"})


def test_distance_bias_learns_and_round_trips(ark):
    """The NLDM's default distance bias gets its gradient from the loss (it leaves zero), is saved with
    the model, and a reloaded pipeline predicts the same tags, trees and scores."""
    from spacy_nldm.models.tagger import torch_scorer
    from spacy_nldm import defaults

    nlp, pipe = trained("nldm_tagger", ark[:6], steps=4)
    bias = torch_scorer(pipe.model).distance_bias
    assert tuple(bias.shape) == (2, defaults.NLDM_MODEL["max_dist"]) and bool((bias != 0).any())
    nlp2 = spacy.blank("en")
    nlp2.add_pipe("nldm_tagger", config={"model": small_model("nldm_tagger")})
    nlp2.from_bytes(nlp.to_bytes())
    # what the component tags and saves with (average_params)
    saved = torch_scorer(pipe.averages.tagging_model(pipe.model)).distance_bias.detach().clone()
    torch.testing.assert_close(torch_scorer(nlp2.get_pipe("nldm_tagger").model).distance_bias, saved)
    text = " ".join(ark[7][0])
    a, b = nlp(text), nlp2(text)
    assert [t.tag_ for t in a] == [t.tag_ for t in b]
    assert [t._.nldm_head for t in a] == [t._.nldm_head for t in b]
    assert a._.nldm_tree_score == pytest.approx(b._.nldm_tree_score)


def test_head_embeddings_are_trained_by_the_heads_gradient(ark):
    """The head's own embeddings (embed_width) next to a listener get the head's gradient: training moves
    them, and their width must not be negative."""
    nlp = spacy.blank("en")
    nlp.add_pipe("tok2vec", config={"model": SMALL_TOK2VEC})
    listener = {"@architectures": "spacy.Tok2VecListener.v1", "width": 32, "upstream": "*"}
    pipe = nlp.add_pipe("crf_tagger", config={"model": small_model("crf_tagger", tok2vec=listener, embed_width=8)})
    egs = examples(nlp, ark[:6])
    optimizer = nlp.initialize(lambda: egs)
    in_tok2vec = {node.id for node in pipe.model.get_ref("tok2vec").walk()}
    embeddings = [node for node in pipe.model.walk() if node.name == "hashembed" and node.id not in in_tok2vec]
    assert len(embeddings) == 4  # NORM, PREFIX, SUFFIX, SHAPE
    before = [node.get_param("E").copy() for node in embeddings]
    nlp.update(egs, sgd=optimizer)
    assert all((node.get_param("E") != old).any() for node, old in zip(embeddings, before))
    for bad in ({"embed_width": -1}, {"embed_width": 0, "embed_depth": 2}, {"embed_width": 8, "embed_depth": -1},
                {"embed_width": 8, "embed_mix": True}):
        with pytest.raises(ValueError, match="embed_width|embed_depth|embed_mix"):
            spacy.blank("en").add_pipe("crf_tagger", config={"model": small_model("crf_tagger", **bad)})


@pytest.mark.parametrize("mix,window_inputs", [(False, {3 * 8}), (True, {3 * (32 + 8)})])
def test_embed_mix_gives_the_heads_window_encoder_the_tok2vecs_vectors_too(ark, mix, window_inputs):
    """The head's window layers (embed_depth) read its embeddings alone (width 8, a window of 3 tokens), or
    with embed_mix the tok2vec's 32 features beside them; the scorer reads 32 + 8 either way."""
    nlp = spacy.blank("en")
    pipe = nlp.add_pipe("crf_tagger", config={"model": small_model("crf_tagger", embed_width=8, embed_depth=2,
                                                                    embed_mix=mix)})
    nlp.initialize(lambda: examples(nlp, ark[:4]))
    in_tok2vec = {node.id for node in pipe.model.get_ref("tok2vec").walk()}
    # the head's maxout layers outside the tok2vec, less the hash embeddings' own (over 4 attributes of width 8)
    window_layers = [node for node in pipe.model.walk()
                     if node.name == "maxout" and node.id not in in_tok2vec and node.get_dim("nI") != 8 * 4]
    assert len(window_layers) == 2 and {node.get_dim("nI") for node in window_layers} == window_inputs
    assert torch_scorer(pipe.model).nI == 32 + 8


def test_embed_mix_on_a_tok2vec_of_unknown_width_names_the_setting():
    """A tok2vec without a stated width (here an unsized layer): the error says which setting needs it."""
    from thinc.api import Model

    unsized = Model("unsized", lambda model, X, is_train: (X, lambda dX: dX))
    with pytest.raises(ValueError, match="embed_mix.*needs a tok2vec whose width.*set embed_mix = "):
        architecture("crf_tagger", unsized, embed_width=8, embed_depth=1, embed_mix=True)


def test_null_head_embeddings_depend_on_whether_the_tok2vec_listens():
    """Left at null, a head listening to a spaCy tok2vec gets defaults.LISTENER_EMBED_WIDTH / _DEPTH
    embeddings of its own (the scorer reads them beside the listener's vectors) and window layers over both
    (embed_mix where it has window layers); one with its own encoder, or with a stated width, gets what is
    stated."""
    from spacy_nldm import defaults

    listener = {"@architectures": "spacy.Tok2VecListener.v1", "width": 32, "upstream": "*"}
    cases = [(dict(tok2vec=listener), (defaults.LISTENER_EMBED_WIDTH, defaults.LISTENER_EMBED_DEPTH, True)),
             (dict(tok2vec=listener, embed_width=8), (8, 0, False)),
             (dict(tok2vec=listener, embed_width=8, embed_depth=1), (8, 1, True)),
             (dict(tok2vec=listener, embed_mix=False), (defaults.LISTENER_EMBED_WIDTH,
                                                        defaults.LISTENER_EMBED_DEPTH, False)),
             (dict(tok2vec=listener, embed_width=0), (0, 0, False)),
             (dict(embed_depth=1, embed_width=8), (8, 1, False)),
             ({}, (0, 0, False))]
    for model, (width, depth, mix) in cases:
        nlp = spacy.blank("en")
        nlp.add_pipe("tok2vec", config={"model": SMALL_TOK2VEC})
        config = small_model("nldm_tagger", **model)
        for key in ("embed_width", "embed_depth", "embed_mix"):
            config.setdefault(key, None)
        pipe = nlp.add_pipe("nldm_tagger", config={"model": config})
        nlp.initialize(lambda: examples(nlp, LEARNABLE))
        attrs = pipe.model.attrs
        assert (attrs["embed_width"], attrs["embed_depth"], attrs["embed_mix"]) == (width, depth, mix), model
        listened = 32 if "tok2vec" in model else None
        if listened:
            assert torch_scorer(pipe.model).nI == listened + width


def test_distance_bias_is_the_nldms_only():
    nlp = spacy.blank("en")
    with pytest.raises(ValueError, match="distance_bias"):
        nlp.add_pipe("crf_tagger", config={"model": {"distance_bias": True}})


def lookup_tok2vec(width: int = 6, rows: int = 64):
    """A tok2vec of one table: each token's vector is row ``orth % rows`` of the parameter E (rows, width)."""
    from thinc.api import Model

    def ids(docs):
        return [numpy.array([t.orth % rows for t in doc], dtype="int64") for doc in docs]

    def forward(model, docs, is_train):
        E = model.get_param("E")
        rows_of = ids(docs)

        def backprop(d_vecs):
            dE = numpy.zeros_like(E)
            for i, d in zip(rows_of, d_vecs):
                numpy.add.at(dE, i, d)
            model.inc_grad("E", dE)
            return []

        return [E[i] for i in rows_of], backprop

    def init(model, X=None, Y=None):
        model.set_param("E", numpy.random.default_rng(0).normal(size=(rows, width)).astype("float32"))

    return Model("lookup", forward, init=init, dims={"nO": width}, params={"E": None})


@pytest.mark.parametrize("factory", ["nldm_tagger", "crf_tagger"])
@pytest.mark.parametrize("tok2vec_loss", ["sum", "mean"])
def test_the_tok2vecs_gradient_is_that_of_the_intended_loss(ark, factory, tok2vec_loss):
    """The gradient that one update sends the tok2vec (its table E) is the autograd gradient, in float64, of
    the component's loss summed over the batch's tokens ("sum") or its mean per token ("mean"): the scorer run
    on E's rows, the structure's negative log-likelihood with the component's label smoothing."""
    import copy

    from spacy_nldm.models.smoothing import mixture_weight
    from spacy_nldm.models.tagger import get_structure, torch_scorer
    from spacy_nldm.pipeline import StructuredTagger

    nlp = spacy.blank("en")
    tok2vec = lookup_tok2vec()
    model = architecture(factory, tok2vec, **({"order": 2} if factory == "crf_tagger" else {}))
    decode = "posterior" if factory == "nldm_tagger" else "viterbi"
    pipe = StructuredTagger(nlp.vocab, model, factory, decode=decode, tok2vec_loss=tok2vec_loss,
                            average_params=False)
    egs = examples(nlp, [(w[:9], t[:9]) for w, t in ark[:4]])
    pipe.initialize(lambda: egs)
    scorer = torch_scorer(model)
    with torch.no_grad():  # every score at work (at their start the interactions and the emission are zero)
        torch.manual_seed(0)
        for param in scorer.parameters():
            param.normal_()
    pipe.update(egs)
    got = tok2vec.get_grad("E")

    E = torch.tensor(tok2vec.get_param("E"), dtype=torch.float64, requires_grad=True)
    double = copy.deepcopy(scorer).double()
    docs = [eg.predicted for eg in egs]
    lengths = torch.tensor([len(doc) for doc in docs])
    rows = [torch.tensor([t.orth % E.shape[0] for t in doc]) for doc in docs]
    per_doc = [double(E[r], factored=True) for r in rows]
    F = torch.nn.utils.rnn.pad_sequence([f for f, _ in per_doc], batch_first=True)
    labels = torch.nn.utils.rnn.pad_sequence(
        [torch.tensor([pipe.labels.index(t.tag_) for t in eg.reference]) for eg in egs], batch_first=True)
    gold = torch.nn.functional.one_hot(labels, len(pipe.labels)).bool()
    structure = get_structure(model, per_doc[0][1])
    loss = structure.nll(F, lengths, gold, approx=pipe.loss,
                         smoothing=mixture_weight(pipe.label_smoothing, len(pipe.labels)))
    if tok2vec_loss == "mean":
        loss = loss / float(lengths.sum())
    (want,) = torch.autograd.grad(loss, E)
    want = want.numpy()
    assert numpy.abs(want).max() > 0
    numpy.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-4 * float(numpy.abs(want).max()))
