"""The components' own weight averages (component setting ``average_params``, spacy_nldm.pipeline.averages):
they are the averages spaCy's optimizer keeps with ``use_averages``, the component tags and saves with them
(without changing the model that trains, so threads may tag at once), and it keeps none when the optimizer
averages or when the setting is off; listening to a shared tok2vec, it has the optimizer average the whole
pipeline."""
from concurrent.futures import ThreadPoolExecutor

import numpy
import pytest
import spacy
from spacy.tokens import Doc
from spacy.training import Example
from thinc.api import Adam, fix_random_seed

DATA = [(["the", "cat", "sat"], ["D", "N", "V"]), (["a", "dog", "ran", "fast"], ["D", "N", "V", "R"]),
        (["dogs", "bark"], ["N", "V"])]
PROBE = ["the", "dog", "sat", "fast"]


#: the paper's encoder: a torch layer (spaCy's TorchBiLSTMEncoder on packed docs) besides the torch scorer
TORCH_TOK2VEC = {"@architectures": "spacy.Tok2Vec.v2",
                 "embed": {"@architectures": "spacy.MultiHashEmbed.v2", "width": 16, "attrs": ["NORM"], "rows": [100],
                           "include_static_vectors": False},
                 "encode": {"@architectures": "spacy-nldm.TorchBiLSTMEncoder.v1", "width": 16, "depth": 1,
                            "dropout": 0.0}}


def _trained(factory, average_params, optimizer_averages, steps=15, torch_encoder=False):
    fix_random_seed(0)
    nlp = spacy.blank("en")
    config = {"average_params": average_params}
    if torch_encoder:
        config["model"] = {"tok2vec": TORCH_TOK2VEC}
    nlp.add_pipe(factory, name="tagger", config=config)
    examples = [Example.from_dict(Doc(nlp.vocab, words=w), {"tags": t}) for w, t in DATA]
    nlp.initialize(lambda: examples)
    optimizer = Adam(0.01, use_averages=optimizer_averages)
    for _ in range(steps):
        nlp.update(examples, sgd=optimizer)
    return nlp, optimizer


def _scores(nlp):
    return nlp.get_pipe("tagger").model.predict([Doc(nlp.vocab, words=PROBE)]).scores


def _marginals(nlp):
    pipe = nlp.get_pipe("tagger")
    pipe.store_probs = True
    return nlp(Doc(nlp.vocab, words=PROBE))._.nldm_probs


@pytest.mark.parametrize("factory,torch_encoder", [("nldm_tagger", False), ("crf_tagger", False), ("nldm_tagger", True)])
def test_the_components_averages_are_the_optimizers(factory, torch_encoder):
    """Trained alike, a component averaging its own weights under an optimizer that keeps no averages tags
    as the same component does under spaCy's ``use_params(optimizer.averages)`` with an averaging one."""
    reference, optimizer = _trained(factory, False, True, torch_encoder=torch_encoder)
    ours, _ = _trained(factory, True, False, torch_encoder=torch_encoder)
    with reference.use_params(optimizer.averages):
        expected = _marginals(reference)
    numpy.testing.assert_allclose(_marginals(ours), expected, atol=1e-6)
    last = _marginals(reference)  # the reference's last weights, which the averages are not
    assert numpy.abs(last - expected).max() > 1e-3


def test_saved_with_the_averages(tmp_path):
    nlp, _ = _trained("nldm_tagger", True, False)
    pipe = nlp.get_pipe("tagger")
    averaged = pipe.averages.tagging_model(pipe.model).predict([Doc(nlp.vocab, words=PROBE)]).scores
    last = _scores(nlp)
    assert numpy.abs(last - averaged).max() > 1e-3
    nlp.to_disk(tmp_path / "pipeline")
    loaded = spacy.load(tmp_path / "pipeline")
    numpy.testing.assert_array_equal(_scores(loaded), averaged)
    restored = spacy.blank("en")
    restored.add_pipe("nldm_tagger", name="tagger")
    restored.from_bytes(nlp.to_bytes())
    numpy.testing.assert_array_equal(_scores(restored), averaged)
    numpy.testing.assert_array_equal(_scores(nlp), last)  # training goes on from the last weights


@pytest.mark.parametrize("average_params,optimizer_averages", [(False, False), (True, True)])
def test_no_averages_of_its_own_when_off_or_when_the_optimizer_averages(average_params, optimizer_averages):
    nlp, _ = _trained("crf_tagger", average_params, optimizer_averages, steps=3)
    pipe = nlp.get_pipe("tagger")
    assert not pipe.averages
    assert (pipe.model.predict([Doc(nlp.vocab, words=PROBE)]).scores == _scores(nlp)).all()


def _listening(average_params):
    fix_random_seed(0)
    nlp = spacy.blank("en")
    nlp.add_pipe("tok2vec")
    nlp.add_pipe("crf_tagger", name="tagger", config={"average_params": average_params, "model": {"tok2vec": {
        "@architectures": "spacy.Tok2VecListener.v1", "width": 96, "upstream": "*"}}})
    examples = [Example.from_dict(Doc(nlp.vocab, words=w), {"tags": t}) for w, t in DATA]
    nlp.initialize(lambda: examples)
    return nlp, examples


def test_a_listener_has_the_optimizer_average_the_pipeline():
    """Listening to a shared tok2vec (another component's weights), the component keeps no averages of its
    own: it turns the optimizer's on at its first update, and the pipeline then tags under
    ``use_params(optimizer.averages)`` as with an optimizer made with ``use_averages = true``."""
    reference, examples = _listening(False)
    averaging = Adam(0.01, use_averages=True)
    ours, _ = _listening(True)
    optimizer = Adam(0.01, use_averages=False)
    for _ in range(4):
        reference.update(examples, sgd=averaging)
        ours.update(examples, sgd=optimizer)
    assert not ours.get_pipe("tagger").averages
    assert set(optimizer.averages) == set(optimizer.nr_update)  # every weight the optimizer updated
    tok2vec = {node.id for node in ours.get_pipe("tok2vec").model.walk()}
    assert any(key[0] in tok2vec for key in optimizer.averages)
    with reference.use_params(averaging.averages):
        expected = _marginals(reference)
    with ours.use_params(optimizer.averages):
        numpy.testing.assert_allclose(_marginals(ours), expected, atol=1e-6)
    assert numpy.abs(_marginals(ours) - expected).max() > 1e-3  # the last weights are not the averages


def test_a_listener_leaves_the_optimizer_alone_when_off():
    nlp, examples = _listening(False)
    optimizer = Adam(0.01, use_averages=False)
    for _ in range(2):
        nlp.update(examples, sgd=optimizer)
    assert optimizer.averages is None and not nlp.get_pipe("tagger").averages


def test_threads_tagging_at_once_with_a_pipeline_trained_in_the_process_tag_as_one_thread():
    """Tagging reads the averages without touching the model that trains: four threads tagging the same texts
    at once with a freshly trained (not reloaded) pipeline get exactly the tags, trees and probabilities of
    serial tagging, and the model's weights are the same after as before. The scorer has dropout, which no
    prediction may apply (whatever another thread's prediction does to the torch module's mode)."""
    from nldm_fixtures import TWITTER
    from spacy_nldm.corpora.ark import read_ark
    from spacy_nldm.models.tagger import torch_scorer

    tweets = [(s.words, s.tags) for s in read_ark(TWITTER / "oct27.train")][:40]
    fix_random_seed(0)
    nlp = spacy.blank("en")
    pipe = nlp.add_pipe("nldm_tagger", config={"store_probs": True, "model": {"dropout": 0.3}})
    examples = [Example.from_dict(Doc(nlp.vocab, words=w), {"tags": t}) for w, t in tweets[:24]]
    optimizer = nlp.initialize(lambda: examples)
    for _ in range(4):
        nlp.update(examples, sgd=optimizer)
    assert pipe.averages  # the component tags with its own averages
    texts = [" ".join(w) for w, _ in tweets]

    def tag():
        return [([t.tag_ for t in doc], [t._.nldm_head for t in doc], doc._.nldm_probs.tolist())
                for doc in nlp.pipe(texts, batch_size=4)]

    weights = pipe.model.to_bytes()
    serial = tag()
    with ThreadPoolExecutor(4) as pool:
        together = [job.result() for job in [pool.submit(tag) for _ in range(4)]]
    assert all(result == serial for result in together)
    assert pipe.model.to_bytes() == weights
    # a prediction leaves the scorer in eval mode (no dropout) for any prediction running beside it
    assert not torch_scorer(pipe.averages.tagging_model(pipe.model)).training
