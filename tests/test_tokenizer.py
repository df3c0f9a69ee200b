"""The tweet tokenizers (spacy_nldm.tokenizers): the rules of each convention, lossless text, the registered
``@tokenizers`` function in a config and its save / load round trip (the agreement with the gold tokens of the
corpora is the study's: projects/paper/tests/test_tokenizer_bench.py)."""
import random

import pytest
import spacy

from spacy_nldm.tokenizers import CONVENTIONS, TweetTokenizer, create_tweet_tokenizer, tokenize

CONFIG = {"nlp": {"tokenizer": {"@tokenizers": "spacy-nldm.TweetTokenizer.v1", "conventions": "ark"}}}


def tokens(text, conventions):
    return [w for w in tokenize(text, conventions)[0] if w.strip(" \t\n\r\f\v")]


# (text, ark tokens, ud tokens): the units both conventions share, then where they differ
SHARED = [
    # URLs (trailing punctuation is not part of them), e-mail addresses
    ("Check http://t.co/abc123, now!", "Check | http://t.co/abc123 | , | now | !"),
    ("see www.example.com/page.", "see | www.example.com/page | ."),
    ("go to bit.ly/xyz or hotels.com", "go | to | bit.ly/xyz | or | hotels.com"),
    ("mail me@example.com ok", "mail | me@example.com | ok"),
    # mentions and hashtags
    ("@bob: hi @alice_99!", "@bob | : | hi | @alice_99 | !"),
    ("#win #100DaysOfCode!", "#win | #100DaysOfCode | !"),
    ("RT @USER12: #np", "RT | @USER12 | : | #np"),
    # emoticons
    ("lol :) :-D <3 xD ;P :( (: -_- ^_^ o.O :'( </3 <333", "lol | :) | :-D | <3 | xD | ;P | :( | (: | -_- | ^_^ | o.O | :'( | </3 | <333"),
    ("haha:) ok:D", "haha | :) | ok | :D"),
    ("so (^_^) ok", "so | (^_^) | ok"),
    ("¯\\_(ツ)_/¯ ok", "¯\\_(ツ)_/¯ | ok"),
    # emoji: a run is one token, with skin tones, variation selectors and ZWJ sequences
    ("Love it😂😂😂 👍🏽 👨\u200d👩\u200d👧 ❤️ 🇺🇸🇺🇸", "Love | it | 😂😂😂 | 👍🏽 | 👨\u200d👩\u200d👧 | ❤️ | 🇺🇸🇺🇸"),
    ("👩🏽\u200d💻 coding", "👩🏽\u200d💻 | coding"),
    # HTML entities
    ("fish &amp; chips &lt;3 &#39; &quot;", "fish | &amp; | chips | &lt;3 | &#39; | &quot;"),
    # punctuation runs
    ("wow... really?! no!!! ok.. hmm? what??", "wow | ... | really | ?! | no | !!! | ok | .. | hmm | ? | what | ??"),
    ('word, next; this: that "quote"', 'word | , | next | ; | this | : | that | " | quote | "'),
    ("(paren) [box]", "( | paren | ) | [ | box | ]"),
    # abbreviations and numbers
    ("U.S. Mr. Smith at 8:30 on 10/27/2010, 1,000 and 3.5", "U.S. | Mr. | Smith | at | 8:30 | on | 10/27/2010 | , | 1,000 | and | 3.5"),
    ("p.m. a.m. St. Louis", "p.m. | a.m. | St. | Louis"),
    # the end of a sentence is not an abbreviation
    ("I love you. See you soon.", "I | love | you | . | See | you | soon | ."),
]

DIFFERENT = [
    # contractions: whole in ARK, split as UD splits them
    ("I'm here", "I'm | here", "I | 'm | here"),
    ("don't can't won't ain't", "don't | can't | won't | ain't", "do | n't | ca | n't | wo | n't | ai | n't"),
    ("it's we're you've they'll she'd", "it's | we're | you've | they'll | she'd",
     "it | 's | we | 're | you | 've | they | 'll | she | 'd"),
    ("don’t I’m", "don’t | I’m", "do | n’t | I | ’m"),
    ("John's car", "John's | car", "John | 's | car"),
    ("gonna wanna gotta lemme cannot", "gonna | wanna | gotta | lemme | cannot",
     "gon | na | wan | na | got | ta | lem | me | can | not"),
    ("im dont didnt thats", "im | dont | didnt | thats", "i | m | do | nt | did | nt | that | s"),
    ("its a good day", "its | a | good | day", "it | s | a | good | day"),
    ("its own way", "its | own | way", "its | own | way"),
    ("Its cold", "Its | cold", "It | s | cold"),
    ("ur so cute", "ur | so | cute", "u | r | so | cute"),
    ("ur mom", "ur | mom", "ur | mom"),
    ("the players' fans", "the | players | ' | fans", "the | players | ' | fans"),
    ("drinkin' tea", "drinkin | ' | tea", "drinkin' | tea"),
    # hyphens: kept in ARK; UD splits them between words, not after prefixes or a single letter
    ("Kool-Aid all-star", "Kool-Aid | all-star", "Kool | - | Aid | all | - | star"),
    ("anti-war pre-order T-shirt", "anti-war | pre-order | T-shirt", "anti-war | pre-order | T-shirt"),
    ("score 6-8 on 2016-03-19", "score | 6-8 | on | 2016-03-19", "score | 6 | - | 8 | on | 2016-03-19"),
    # currency, percent, units
    ("$20 and 50% at 8pm", "$20 | and | 50% | at | 8pm", "$ | 20 | and | 50 | % | at | 8 | pm"),
    ("1st 2nd 10th", "1st | 2nd | 10th", "1st | 2nd | 10th"),
    # slashes: kept in ARK, split between words in UD (w/, s/o, b/c stay)
    ("him/her w/ b/c", "him/her | w/ | b/c", "him | / | her | w/ | b/c"),
    # ARK keeps a closing bracket before a period, and a run of punctuation marks together
    ("(at Toronto).", "( | at | Toronto) | .", "( | at | Toronto | ) | ."),
    ('ok..."', 'ok | ..."', 'ok | ... | "'),
    ("no!!!...", "no | !!!...", "no | !!!..."),
    # a truncated word keeps its ellipsis in ARK ("sp…", "Tuesday…")
    ("Tuesday… http://bit.ly/x", "Tuesday… | http://bit.ly/x", "Tuesday | … | http://bit.ly/x"),
    # "#1": UD cuts a one-digit hashtag
    ("#1 fan #22", "#1 | fan | #22", "# | 1 | fan | #22"),
    # "(@ place)" is one token in ARK (foursquare check-ins)
    ("I'm at Joe's (@ Joe's)", "I'm | at | Joe's | (@ | Joe's | )", "I | 'm | at | Joe | 's | ( | @ | Joe | 's | )"),
]


@pytest.mark.parametrize("text,expected", SHARED, ids=[t for t, _ in SHARED])
@pytest.mark.parametrize("conventions", CONVENTIONS)
def test_shared_units(text, expected, conventions):
    assert tokens(text, conventions) == expected.split(" | ")


@pytest.mark.parametrize("text,ark,ud", DIFFERENT, ids=[t for t, _, _ in DIFFERENT])
def test_conventions_differ(text, ark, ud):
    assert tokens(text, "ark") == ark.split(" | ")
    assert tokens(text, "ud") == ud.split(" | ")


ALPHABET = (
    list("abcXYZ019 .,!?;:'\"()[]{}<>@#&$%*-_/\\^~=+|`…“”‘’«»") + ["\n", "\t", "  ", "\r\n", "\xa0", "\u3000"]
    + ["😂", "👍🏽", "\u200d", "\ufe0f", "❤", "🇺", "♥", "\ue107", "é", "\u0301", "ツ", "¯"]
    + ["http://t.co/x", "@u", "#t", ":)", "<3", "&amp;", "I'm", "don't", "gonna", "U.S.", "its", "ur"]
)


@pytest.mark.parametrize("conventions", CONVENTIONS)
def test_text_is_kept_exactly(conventions):
    """doc.text == text for random strings with odd whitespace; no empty token; one space after a token
    is its whitespace_, any other whitespace a token of its own."""
    nlp = spacy.blank("en")
    tok = TweetTokenizer(nlp.vocab, conventions)
    rng = random.Random(0)
    texts = ["", " ", "  ", "\n", " a ", "\n\nhello  world \n", "  leading", "trailing  ", "a\tb\nc  d\r\ne"]
    texts += ["".join(rng.choice(ALPHABET) for _ in range(rng.randint(1, 40))) for _ in range(2000)]
    for text in texts:
        doc = tok(text)
        assert doc.text == text, (text, [t.text for t in doc])
        assert all(t.text for t in doc)
        for t in doc:
            if t.text.strip(" \t\n\r\f\v") == "":  # a whitespace token
                assert t.text != " " or t.i == 0 or doc[t.i - 1].whitespace_ == " "


def test_whitespace_tokens_follow_spacy():
    nlp = spacy.blank("en")
    doc = TweetTokenizer(nlp.vocab, "ark")("a  b\nc ")
    assert [t.text for t in doc] == ["a", " ", "b", "\n", "c"]
    assert [t.whitespace_ for t in doc] == [" ", "", "", "", " "]
    assert [(t.idx, t.text) for t in doc if not t.is_space] == [(0, "a"), (3, "b"), (5, "c")]


def test_pipe_and_bytes():
    nlp = spacy.blank("en")
    tok = TweetTokenizer(nlp.vocab, "ud")
    docs = list(tok.pipe(["I'm ok", "don't"]))
    assert [[t.text for t in d] for d in docs] == [["I", "'m", "ok"], ["do", "n't"]]
    other = TweetTokenizer(nlp.vocab, "ark").from_bytes(tok.to_bytes())
    assert other.conventions == "ud"


@pytest.mark.parametrize("conventions", CONVENTIONS)
def test_config_round_trip(tmp_path, conventions):
    config = {"nlp": {"tokenizer": {**CONFIG["nlp"]["tokenizer"], "conventions": conventions}}}
    nlp = spacy.blank("en", config=config)
    assert isinstance(nlp.tokenizer, TweetTokenizer)
    assert nlp.tokenizer.conventions == conventions
    text = "RT @bob: I'm lovin' it!!! 😂😂 http://t.co/x #win :-) can't"
    before = [t.text for t in nlp(text)]
    nlp.to_disk(tmp_path / "model")
    loaded = spacy.load(tmp_path / "model")
    assert isinstance(loaded.tokenizer, TweetTokenizer)
    assert loaded.tokenizer.conventions == conventions
    assert [t.text for t in loaded(text)] == before
    assert loaded.config["nlp"]["tokenizer"]["conventions"] == conventions


def test_entry_point_is_registered():
    from importlib.metadata import entry_points

    names = {e.name: e.value for e in entry_points(group="spacy_tokenizers")}
    assert names.get("spacy-nldm.TweetTokenizer.v1") == "spacy_nldm.tokenizers:create_tweet_tokenizer"
    assert spacy.registry.tokenizers.get("spacy-nldm.TweetTokenizer.v1") is create_tweet_tokenizer


def test_unknown_conventions_is_a_clear_error():
    with pytest.raises(ValueError, match="unknown tokenizer conventions 'penn'.*'ark', 'ud'"):
        TweetTokenizer(spacy.blank("en").vocab, "penn")
    with pytest.raises(ValueError, match="unknown tokenizer conventions 'penn'"):
        spacy.blank("en", config={"nlp": {"tokenizer": {**CONFIG["nlp"]["tokenizer"], "conventions": "penn"}}})
