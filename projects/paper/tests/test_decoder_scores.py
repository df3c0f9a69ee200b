"""projects/paper/scripts/decoder_scores.py: a trained pipeline's dev and test accuracy under each decoder."""
import subprocess
import sys

import spacy
from spacy.tokens import Doc, DocBin
from spacy.training import Example

from nldm_fixtures import ROOT

WORDS = [["I", "love", "this", "song", "!"], ["you", "are", "so", "funny", "lol"], ["this", "song", "is", "so", "good"]]
TAGS = [["O", "V", "D", "N", ","], ["O", "V", "R", "A", "!"], ["D", "N", "V", "R", "A"]]


def accuracy(model, decode, docs):
    nlp = spacy.load(model, config={"components": {"nldm_tagger": {"decode": decode}}})
    assert nlp.get_pipe("nldm_tagger").decode == decode
    pairs = [(t.tag_, g) for doc, tags in docs for t, g in zip(nlp(Doc(nlp.vocab, words=[w.text for w in doc])), tags)]
    return 100 * sum(p == g for p, g in pairs) / len(pairs)


def test_each_decoder_is_applied_at_load_time_and_scored_on_both_splits(tmp_path):
    nlp = spacy.blank("en")
    nlp.add_pipe("nldm_tagger", config={"attr": "tag"})
    examples = [Example.from_dict(Doc(nlp.vocab, words=w), {"tags": t}) for w, t in zip(WORDS, TAGS)]
    optimizer = nlp.initialize(lambda: examples)
    for _ in range(3):  # a few steps: decoders may still disagree
        nlp.update(examples, sgd=optimizer)
    nlp.to_disk(tmp_path / "model")
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    splits = {"dev": [0, 1], "test": [1, 2]}
    for split, rows in splits.items():
        docs = [Doc(nlp.vocab, words=WORDS[i], tags=TAGS[i]) for i in rows]
        DocBin(docs=docs, attrs=["TAG"]).to_disk(corpus / f"{split}.spacy")
    res = subprocess.run([sys.executable, str(ROOT / "projects/paper/scripts/decoder_scores.py"), str(tmp_path / "model"),
                          "--corpus", str(corpus)], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr[-3000:]
    mean_row = [line for line in res.stdout.splitlines() if line.startswith("| mean of 1 |")][0]
    printed = [float(v) for v in mean_row.strip("| ").split(" | ")[1:]]
    expected = []
    for decode in ("posterior", "viterbi"):
        for split, rows in splits.items():
            expected.append(accuracy(tmp_path / "model", decode, [(Doc(nlp.vocab, words=WORDS[i]), TAGS[i]) for i in rows]))
    assert printed == [round(v, 2) for v in expected]


def test_a_missing_corpus_is_a_clear_error(tmp_path):
    res = subprocess.run([sys.executable, str(ROOT / "projects/paper/scripts/decoder_scores.py"), str(tmp_path / "model"),
                          "--corpus", str(tmp_path)], capture_output=True, text=True)
    assert res.returncode == 1 and "dev.spacy not found" in res.stderr and "Traceback" not in res.stderr
