"""Every shipped config (configs/*.cfg), built as `spacy train` builds it and trained a few steps on
fixture tweets: what a user meets with it (the same predictions whatever the batch, empty input)."""
import pytest
from spacy.tokens import Doc
from spacy.training import Example
from spacy.util import load_config, load_model_from_config

from nldm_fixtures import ROOT, TWITTER
from spacy_nldm.corpora.ark import read_ark
from spacy_nldm.pipeline import StructuredTagger

CONFIGS = sorted((ROOT / "configs").glob("*.cfg"))
TRAIN = [(s.words, s.tags) for s in read_ark(TWITTER / "oct27.train")][:24]
TEST = [s.words for s in read_ark(TWITTER / "oct27.test")][:64]


def test_every_config_is_covered():
    assert len(CONFIGS) >= 11 and {"nldm.cfg", "softmax.cfg", "nldm_trf.cfg"} <= {p.name for p in CONFIGS}


@pytest.fixture(scope="module", params=CONFIGS, ids=[p.name for p in CONFIGS])
def shipped(request):
    """(nlp, name of its tagging component), trained 3 steps with the config's own optimizer."""
    nlp = load_model_from_config(load_config(request.param), auto_fill=True, validate=True)
    egs = [Example.from_dict(Doc(nlp.vocab, words=w), {"tags": t}) for w, t in TRAIN]
    optimizer = nlp.initialize(lambda: egs)
    for _ in range(3):
        nlp.update(egs, sgd=optimizer)
    return nlp, nlp.pipe_names[-1]


def predictions(nlp, docs, batch_size):
    out = []
    for doc in nlp.pipe(docs, batch_size=batch_size):
        score = doc._.nldm_tree_score  # None without a latent tree (CRF, softmax)
        tree = None if score is None else [t._.nldm_head for t in doc]
        out.append(([t.tag_ for t in doc], tree, score))
    return out


def test_predictions_do_not_depend_on_the_batch(shipped):
    nlp, _ = shipped
    docs = lambda: (Doc(nlp.vocab, words=w) for w in TEST)  # noqa: E731
    want = predictions(nlp, docs(), 64)
    assert len(want) == 64 and all(tags for tags, _, _ in want)
    for batch_size in (1, 7):
        got = predictions(nlp, docs(), batch_size)
        assert [(tags, tree) for tags, tree, _ in got] == [(tags, tree) for tags, tree, _ in want], batch_size
        for (_, _, score), (_, _, wanted) in zip(got, want):
            assert score == pytest.approx(wanted, rel=1e-5, abs=1e-4)


def test_empty_docs_and_examples_pass_through_every_method(shipped):
    nlp, name = shipped
    pipe = nlp.get_pipe(name)
    empty = lambda: Doc(nlp.vocab, words=[])  # noqa: E731
    assert len(nlp("")) == 0 and len(nlp(empty())) == 0
    docs = list(nlp.pipe(["", "", "I love it", "", ""], batch_size=2))  # a batch of only empty docs, and a mixed one
    assert [len(d) for d in docs] == [0, 0, 3, 0, 0] and all(t.tag_ for t in docs[2])
    for batch in ([], [empty()], [empty(), empty()]):
        pipe.set_annotations(batch, pipe.predict(batch))
    empty_egs = [Example.from_dict(empty(), {}) for _ in range(2)]
    real = Example.from_dict(Doc(nlp.vocab, words=TRAIN[0][0]), {"tags": TRAIN[0][1]})
    if isinstance(pipe, StructuredTagger):  # spaCy's tagger never runs its model without tokens (nor can
        # spacy-transformers' listener); ours answers with no scores
        loss, d_scores = pipe.get_loss(empty_egs, pipe.model.predict([eg.predicted for eg in empty_egs]))
        assert loss == 0.0 and d_scores.shape[0] == 0
    optimizer = nlp.resume_training()
    assert nlp.update(empty_egs, sgd=optimizer)[name] == 0.0
    assert nlp.update(empty_egs + [real], sgd=optimizer)[name] > 0.0
    assert nlp.evaluate(empty_egs + [real])["tag_acc"] is not None
    nlp.evaluate(empty_egs)
