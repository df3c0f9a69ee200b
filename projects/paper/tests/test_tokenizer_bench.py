"""``python -m projects.paper tokenizer``: the readers of the gold tweets and the scores of a tokenizer against
them, on a tiny file and on a sample of the real data (where the data folder is here)."""
from pathlib import Path

import pytest
import spacy
from typer.testing import CliRunner

from nldm_fixtures import ROOT, full_mirror
from projects.paper.cli import app
from projects.paper.cli.tokenizer import read_ark_tweets, read_conllu_tweets, score_tokenizer
from spacy_nldm.tokenizers import TweetTokenizer


def test_conllu_reader_takes_the_surface_tokens(tmp_path):
    """Tweebank v2 has no multiword tokens; where a file has them, the range's form is the token."""
    path = tmp_path / "x.conllu"
    path.write_text(
        "# text = I'm gonna go\n"
        "1-2\tI'm\t_\t_\t_\t_\t_\t_\t_\t_\n1\tI\tI\tPRON\t_\t_\t0\troot\t_\t_\n2\t'm\tbe\tAUX\t_\t_\t1\taux\t_\t_\n"
        "3\tgonna\t_\tVERB\t_\t_\t1\tdep\t_\t_\n4\tgo\t_\tVERB\t_\t_\t1\tdep\t_\t_\n\n",
        encoding="utf8",
    )
    (tweet,) = read_conllu_tweets(path)
    assert tweet.tokens == ["I'm", "gonna", "go"]
    assert tweet.spans == [(0, 3), (4, 9), (10, 12)]


# --- agreement with the gold tokens on a sample of the real data -----------------------------------------------

def shared_data() -> Path:
    data = full_mirror() or ROOT.parent / "shared" / "data"
    if not (data / "twitter_pos").is_dir() or not (data / "tweebank_v2").is_dir():
        pytest.skip(f"the data folder {data} (twitter_pos/, tweebank_v2/) is not here")
    return data


def test_ark_cuts_daily547_as_the_gold():
    tweets = read_ark_tweets(shared_data() / "twitter_pos" / "daily547.conll")[:200]
    nlp = spacy.blank("en")
    score = score_tokenizer("ark", TweetTokenizer(nlp.vocab, "ark"), tweets)
    assert score.docs == 200
    assert score.exact_pct >= 99.0
    spacy_en = score_tokenizer("spacy-en", nlp.tokenizer, tweets)
    assert spacy_en.exact_pct < score.exact_pct


def test_ud_cuts_tweebank_v2_test_as_the_gold():
    tweets = read_conllu_tweets(shared_data() / "tweebank_v2" / "en-ud-tweet-test.conllu")[:200]
    assert all(t.spans for t in tweets)  # every gold token is found in its tweet's # text
    nlp = spacy.blank("en")
    score = score_tokenizer("ud", TweetTokenizer(nlp.vocab, "ud"), tweets)
    assert score.docs == 200
    assert score.f1 >= 0.99
    spacy_en = score_tokenizer("spacy-en", nlp.tokenizer, tweets)
    assert spacy_en.f1 < score.f1


def test_tokenizer_command_scores_the_tweet_tokenizer_against_the_gold(tmp_path):
    path = tmp_path / "tiny.ark"
    path.write_text("I'm\tL\nhappy\tA\n:)\tE\n\n#win\t#\ndon't\tV\n", encoding="utf8")
    tweets = read_ark_tweets(path)
    nlp = spacy.blank("en")
    ours = score_tokenizer("ark", TweetTokenizer(nlp.vocab, "ark"), tweets)
    assert (ours.docs, ours.exact_pct, ours.f1) == (2, 100.0, 1.0)  # the ARK conventions keep "I'm", ":)", "don't"
    assert score_tokenizer("spacy-en", nlp.tokenizer, tweets).exact_pct < 100.0  # spaCy cuts "I'm" and "don't"
    result = CliRunner().invoke(app, ["tokenizer", str(path), "--errors", "5"])
    assert result.exit_code == 0, result.output
    result = CliRunner().invoke(app, ["tokenizer", str(path), "--conventions", "penn"])
    assert result.exit_code != 0
