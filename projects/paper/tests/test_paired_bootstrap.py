"""projects/paper/scripts/paired_bootstrap.py: the difference of two groups' accuracies, resampled over test sentences."""
import subprocess
import sys

import numpy

from nldm_fixtures import ROOT  # noqa: E402
from projects.paper.scripts.paired_bootstrap import paired_bootstrap


def test_identical_predictions_have_no_difference():
    lengths = numpy.full(50, 10.0)
    correct = numpy.random.default_rng(1).integers(5, 11, size=50).astype(float)
    diff, low, high, flipped = paired_bootstrap(correct, correct, lengths, samples=500)
    assert diff == low == high == 0.0
    assert flipped == 1.0  # no resample is above zero: nothing supports A > B


def test_interval_matches_the_normal_approximation():
    """Equal-length sentences: the accuracy difference is a mean of per-sentence differences, whose standard
    error is sd / sqrt(n); the bootstrap's 95% interval must be about observed ± 1.96 standard errors."""
    rng = numpy.random.default_rng(0)
    n, length = 2000, 10.0
    lengths = numpy.full(n, length)
    correct_b = rng.integers(6, 11, size=n).astype(float)
    correct_a = numpy.clip(correct_b + rng.choice([-1.0, 0.0, 0.0, 1.0, 1.0], size=n), 0, length)
    diff, low, high, flipped = paired_bootstrap(correct_a, correct_b, lengths, samples=4000, seed=3)
    per_sentence = 100 * (correct_a - correct_b) / length
    assert abs(diff - per_sentence.mean()) < 1e-9
    standard_error = per_sentence.std(ddof=1) / numpy.sqrt(n)
    assert abs((high - low) / 2 - 1.96 * standard_error) < 0.1 * 1.96 * standard_error
    assert low < diff < high
    assert (flipped < 0.025) == (low > 0)


def test_a_small_difference_on_few_sentences_is_not_significant():
    """One extra correct token in 20 sentences of 10: 0.5 points, but most of the sign rests on one sentence."""
    lengths = numpy.full(20, 10.0)
    correct_b = numpy.full(20, 9.0)
    correct_a = correct_b.copy()
    correct_a[0] += 1
    diff, low, high, flipped = paired_bootstrap(correct_a, correct_b, lengths, samples=4000)
    assert diff == 0.5
    assert low == 0.0  # about a third of the resamples miss sentence 0
    assert 0.3 < flipped < 0.4  # (19/20)^20 = 0.358


def test_missing_model_is_a_clear_error(tmp_path):
    done = subprocess.run([sys.executable, "-m", "projects.paper.scripts.paired_bootstrap", "--a", str(tmp_path / "no"),
                           "--b", str(tmp_path / "no"), "--test", str(tmp_path / "test.spacy")],
                          capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 2
    assert "does not exist" in done.stderr


def test_correct_tokens_per_sentence_from_saved_pipelines(tmp_path):
    """Two rule-based pipelines saved to disk (every token tagged N; every token V) on a gold test file."""
    import spacy
    from spacy.tokens import Doc, DocBin

    from projects.paper.scripts.paired_bootstrap import correct_per_sentence

    models = []
    for tag in ("N", "V"):
        nlp = spacy.blank("en")
        nlp.add_pipe("attribute_ruler").add([[{}]], {"TAG": tag})
        nlp.to_disk(tmp_path / tag)
        models.append(tmp_path / tag)
    vocab = spacy.blank("en").vocab
    gold = [Doc(vocab, words=["dogs", "bark", "loudly"], tags=["N", "V", "R"]),
            Doc(vocab, words=["cats", "purr"], tags=["N", "N"])]
    DocBin(docs=gold).to_disk(tmp_path / "test.spacy")
    only_n, lengths = correct_per_sentence(models[:1], tmp_path / "test.spacy", "tag_")
    assert only_n.tolist() == [1.0, 2.0] and lengths.tolist() == [3.0, 2.0]
    mean_of_both, _ = correct_per_sentence(models, tmp_path / "test.spacy", "tag_")
    assert mean_of_both.tolist() == [1.0, 1.0]  # V: [1, 0]; averaged with N's [1, 2]


def test_decoder_set_at_load_decodes_the_label_marginals(tmp_path):
    """A CRF trained and saved with Viterbi, loaded with ``posterior``: its tags are the arg-max of the label
    marginals it stores (the same pipeline, no retraining); a pipeline without a structured head is an error."""
    import pytest
    import spacy
    from spacy.tokens import Doc
    from spacy.training import Example

    from projects.paper.scripts.paired_bootstrap import load_pipeline

    nlp = spacy.blank("en")
    nlp.add_pipe("crf_tagger", config={"attr": "tag", "decode": "viterbi", "store_probs": True})
    rows = [("I love this song !", "O V D N ,"), ("you are so funny lol", "O V R A !"),
            ("this song is so good", "D N V R A")]
    examples = [Example.from_dict(Doc(nlp.vocab, words=w.split()), {"tags": t.split()}) for w, t in rows]
    optimizer = nlp.initialize(lambda: examples)
    for _ in range(3):  # under-trained on purpose: marginals far from one-hot
        nlp.update(examples, sgd=optimizer)
    nlp.to_disk(tmp_path / "crf")

    assert load_pipeline(tmp_path / "crf").get_pipe("crf_tagger").decode == "viterbi"
    posterior = load_pipeline(tmp_path / "crf", "posterior")
    pipe = posterior.get_pipe("crf_tagger")
    assert pipe.decode == "posterior" and posterior.config["components"]["crf_tagger"]["decode"] == "posterior"
    for doc in posterior.pipe(["you love this song", "so good lol !", "I are funny"]):
        argmax = [pipe.labels[i] for i in doc._.nldm_probs.argmax(axis=1)]
        assert [t.tag_ for t in doc] == argmax

    plain = spacy.blank("en")
    plain.add_pipe("attribute_ruler")
    plain.to_disk(tmp_path / "plain")
    with pytest.raises(ValueError, match="no crf_tagger or nldm_tagger"):
        load_pipeline(tmp_path / "plain", "posterior")


def test_decoder_for_a_group_without_structured_head_is_a_clear_error(tmp_path):
    import spacy
    from spacy.tokens import DocBin

    plain = spacy.blank("en")
    plain.add_pipe("attribute_ruler")
    plain.to_disk(tmp_path / "plain")
    DocBin().to_disk(tmp_path / "test.spacy")
    done = subprocess.run([sys.executable, "-m", "projects.paper.scripts.paired_bootstrap", "--a", str(tmp_path / "plain"),
                           "--b", str(tmp_path / "plain"), "--decode-b", "posterior",
                           "--test", str(tmp_path / "test.spacy")], capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 2
    assert "no crf_tagger or nldm_tagger component" in done.stderr

