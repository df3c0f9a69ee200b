"""``python -m projects.paper raw-text``: raw text cut by the tweet tokenizer scores as the given tokens do where it cuts them
alike; spaCy's English tokenizer re-cuts hashtags and contractions and is scored on the aligned tokens."""
import spacy
from spacy.tokens import Doc, DocBin
from spacy.training import Example
from typer.testing import CliRunner

from projects.paper.cli import app
from projects.paper.cli.raw_text import raw_text_scores

TWEETS = [
    (["I'm", "so", "happy", "#win", ":)"], ["L", "R", "A", "#", "E"]),
    (["you", "are", "#great", "lol"], ["O", "V", "#", "!"]),
    (["I'm", "going", "home", "#tired"], ["L", "V", "N", "#"]),
]


def _pipeline(tmp_path):
    nlp = spacy.blank("en")
    nlp.add_pipe("crf_tagger")
    examples = [Example.from_dict(Doc(nlp.vocab, words=w), {"tags": t}) for w, t in TWEETS]
    optimizer = nlp.initialize(lambda: examples)
    for _ in range(30):
        nlp.update(examples, sgd=optimizer)
    nlp.to_disk(tmp_path / "model")
    docs = [Doc(nlp.vocab, words=w, tags=t) for w, t in TWEETS]  # text: the tokens joined by spaces (ARK)
    DocBin(docs=docs).to_disk(tmp_path / "test.spacy")
    return tmp_path / "model", tmp_path / "test.spacy"


def test_tweet_tokenizer_scores_as_the_given_tokens(tmp_path):
    model, test = _pipeline(tmp_path)
    scores = raw_text_scores(model, test, "ark")
    assert scores["given tokens"] > 90  # learned
    assert scores["raw, tweet tokenizer"] == scores["given tokens"]  # the same tokens
    # the pipeline's own (English) tokenizer cuts "I'm" and "#win" apart: its score is that of other tokens,
    # aligned to the given ones (a piece tagged as its whole counts), so it need not be lower
    assert [t.text for t in spacy.load(model).make_doc(" ".join(TWEETS[0][0]))] != TWEETS[0][0]
    assert scores["raw, spaCy's tokenizer"] == scores["raw, own tokenizer"]  # spacy.blank("en")'s own
    out = tmp_path / "table.md"
    result = CliRunner().invoke(app, ["raw-text", str(model), "--test", str(test), "--conventions", "ark",
                                      "--output", str(out)])
    assert result.exit_code == 0, result.output
    row = next(line for line in out.read_text().splitlines() if line.startswith(f"| {model} |"))
    cells = [float(c) for c in row.strip("| ").split(" | ")[1:]]
    assert cells[:4] == [round(scores[c], 2) for c in ("given tokens", "raw, own tokenizer", "raw, spaCy's tokenizer",
                                                        "raw, tweet tokenizer")]
    assert cells[-1] == 0.0  # the tweet tokenizer loses nothing against the given tokens


def test_unknown_conventions_are_refused(tmp_path):
    result = CliRunner().invoke(app, ["raw-text", str(tmp_path), "--test", __file__, "--conventions", "xx"])
    assert result.exit_code != 0
