"""Every shipped config (configs/*.cfg and the study's projects/paper/configs/*.cfg), built as `spacy train` builds it and trained a few steps on
fixture tweets: what a user meets with it (the same predictions whatever the batch, empty input), and that it
learns (a tiny learnable task lifts its accuracy from below a floor to above it)."""
import pytest
from spacy.tokens import Doc
from spacy.training import Example
from spacy.util import load_config, load_model_from_config
from thinc.api import Adam, fix_random_seed

from nldm_fixtures import LEARNABLE, LEARNABLE_FLOOR, ROOT, TWITTER
from spacy_nldm.corpora.ark import read_ark
from spacy_nldm.pipeline import StructuredTagger

STUDY_CONFIGS = ROOT / "projects" / "paper" / "configs"
CONFIGS = sorted([*(ROOT / "configs").glob("*.cfg"), *STUDY_CONFIGS.glob("*.cfg")])
TRAIN = [(s.words, s.tags) for s in read_ark(TWITTER / "oct27.train")][:24]
TEST = [s.words for s in read_ark(TWITTER / "oct27.test")][:64]
FLOOR = LEARNABLE_FLOOR


def test_every_config_is_covered():
    assert len(CONFIGS) >= 11 and {"nldm.cfg", "softmax.cfg", "nldm_trf.cfg"} <= {p.name for p in CONFIGS}


def learnable(nlp):
    return [Example.from_dict(Doc(nlp.vocab, words=w), {"tags": t}) for w, t in LEARNABLE]


@pytest.fixture(scope="module", params=CONFIGS, ids=[p.name for p in CONFIGS])
def shipped(request):
    """(nlp, name of its tagging component, its tag accuracy on LEARNABLE untrained and after ten steps on
    it), then trained 3 steps on fixture tweets with the config's own optimizer.

    The ten steps use a test optimizer: the configs' own learn rates (a transformer's 5e-5) learn too little
    in ten steps, and a fine-tuned transformer needs a small rate, or the updates destroy it (they do at
    example_minilm.cfg's 0.003, hence the ten steps come first)."""
    fix_random_seed(0)
    nlp = load_model_from_config(load_config(request.param), auto_fill=True, validate=True)
    egs = [Example.from_dict(Doc(nlp.vocab, words=w), {"tags": t}) for w, t in TRAIN]
    learn = learnable(nlp)
    optimizer = nlp.initialize(lambda: egs + learn)
    untrained = nlp.evaluate(learn)["tag_acc"]
    sgd = Adam(1e-4 if "transformer" in nlp.pipe_names else 0.01)
    for _ in range(10):
        nlp.update(learn, sgd=sgd)
    learned = nlp.evaluate(learn)["tag_acc"]
    for _ in range(3):
        nlp.update(egs, sgd=optimizer)
    return nlp, nlp.pipe_names[-1], (untrained, learned)


def predictions(nlp, docs, batch_size):
    out = []
    for doc in nlp.pipe(docs, batch_size=batch_size):
        score = doc._.nldm_tree_score  # None without a latent tree (CRF, softmax)
        tree = None if score is None else [t._.nldm_head for t in doc]
        out.append(([t.tag_ for t in doc], tree, score))
    return out


def test_predictions_do_not_depend_on_the_batch(shipped):
    nlp, _, _ = shipped
    docs = lambda: (Doc(nlp.vocab, words=w) for w in TEST)  # noqa: E731
    want = predictions(nlp, docs(), 64)
    assert len(want) == 64 and all(tags for tags, _, _ in want)
    for batch_size in (1, 7):
        got = predictions(nlp, docs(), batch_size)
        assert [(tags, tree) for tags, tree, _ in got] == [(tags, tree) for tags, tree, _ in want], batch_size
        for (_, _, score), (_, _, wanted) in zip(got, want):
            assert score == pytest.approx(wanted, rel=1e-5, abs=1e-4)


def test_empty_docs_and_examples_pass_through_every_method(shipped):
    nlp, name, _ = shipped
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
    # empty examples count for nothing: the accuracy is the real example's alone
    assert nlp.evaluate(empty_egs + [real])["tag_acc"] == nlp.evaluate([real])["tag_acc"]
    nlp.evaluate(empty_egs)


def test_ten_steps_on_a_tiny_task_lift_the_accuracy_above_a_floor(shipped):
    """The untrained pipeline is below the floor on the tiny learnable task; ten steps on it lift it above."""
    _, _, (untrained, learned) = shipped
    assert untrained < FLOOR < learned, (untrained, learned)


ALL_CONFIGS = sorted([*(ROOT / "configs").rglob("*.cfg"), *STUDY_CONFIGS.rglob("*.cfg")])


def test_every_nldm_config_states_the_settings_where_the_factory_default_differs_from_the_architectures():
    """spaCy fills a component's model block from its factory's default config when both name the same
    architecture, so an NLDM config that leaves out ``distance_bias`` or ``max_dist`` runs with the factory's
    value (true, 3), not the architecture's (false, 5): a config must say what it runs."""
    from thinc.api import Config

    from spacy_nldm.pipeline.factories import DEFAULT_NLDM_MODEL

    nldm = [p for p in ALL_CONFIGS if '"spacy-nldm.NLDMTagger.v1"' in p.read_text()]
    assert len(nldm) >= 8
    for path in nldm:
        config = Config().from_disk(path, interpolate=False)
        for name, block in config["components"].items():
            model = block.get("model", {})
            if model.get("@architectures") == "spacy-nldm.NLDMTagger.v1":
                missing = {"distance_bias", "max_dist"} - set(model)
                assert not missing, f"{path.relative_to(ROOT)}: [components.{name}.model] leaves out {missing}"
    # the reason: left out, the factory's default is what a built pipeline gets
    text = (ROOT / "configs" / "nldm.cfg").read_text().replace("distance_bias = true\n", "")
    filled = load_model_from_config(Config().from_str(text), auto_fill=True).config
    assert filled["components"]["nldm"]["model"]["distance_bias"] is DEFAULT_NLDM_MODEL["distance_bias"] is True
