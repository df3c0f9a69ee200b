"""Tagging a corpus the spaCy way: `spacy apply` with a trained NLDM pipeline (from the project's own
configs/nldm.cfg) on .jsonl and .txt input, in one process and in two."""
import subprocess
import sys

import pytest
import spacy
import srsly
from spacy.tokens import DocBin

from nldm_fixtures import TWITTER, train_tweet_pipeline
from spacy_nldm.corpora.ark import read_ark

TWEETS = [(s.words, s.tags) for s in read_ark(TWITTER / "oct27.train")][:24]
TEXTS = [" ".join(w) for w, _ in TWEETS[:12]] + ["", "  ", "OMG I love this song"]


@pytest.fixture(scope="module")
def pipeline(tmp_path_factory):
    return train_tweet_pipeline(tmp_path_factory.mktemp("apply") / "nldm")


def tagged(docs):
    return [([t.tag_ for t in d], [t._.nldm_head for t in d], d._.nldm_tree_score) for d in docs]


@pytest.mark.parametrize("n_process,batch_size", [(1, 1), (2, 4)])
def test_spacy_apply_tags_jsonl_and_text_files(pipeline, tmp_path, n_process, batch_size):
    inputs = tmp_path / "inputs"
    inputs.mkdir()
    srsly.write_jsonl(inputs / "tweets.jsonl", [{"text": t} for t in TEXTS])
    (inputs / "one.txt").write_text("ikr smh he asked fir yo last name", encoding="utf8")
    out = tmp_path / "tagged.spacy"
    cmd = [sys.executable, "-m", "spacy", "apply", str(pipeline), str(inputs), str(out), "--n-process", str(n_process),
           "--batch-size", str(batch_size)]
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    nlp = spacy.load(pipeline)
    got = list(DocBin().from_disk(out).get_docs(nlp.vocab))
    by_text = {d.text: d for d in got}
    assert len(got) == len(TEXTS) + 1 and set(by_text) == set(TEXTS) | {"ikr smh he asked fir yo last name"}
    want = list(nlp.pipe(TEXTS + ["ikr smh he asked fir yo last name"]))
    for (tags, heads, score), (want_tags, want_heads, want_score) in zip(tagged(by_text[d.text] for d in want),
                                                                         tagged(want)):
        assert (tags, heads) == (want_tags, want_heads)  # tags and latent trees kept
        assert score == pytest.approx(want_score, rel=1e-5, abs=1e-4)
    assert all(t.tag_ for d in got for t in d) and len(by_text[""]) == 0
