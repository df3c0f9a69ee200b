"""``python -m projects.paper tokenizer``: how closely a tokenizer cuts raw tweets as the gold tokens are cut.

Two inputs:

* ``--format conllu`` (Tweebank v2): the raw text of each tweet is its ``# text = ...`` line; the gold tokens
  are the word lines' FORMs (the tokens of the converted DocBins in ``corpus/tweebank_v2``: Tweebank v2 has
  no multiword-token ranges; where a file has them, the range's surface form is taken);
* ``--format ark`` (ARK Twitter POS, ``token<TAB>tag``): the raw text is the gold tokens joined by single
  spaces, so only the cuts inside the space-separated pieces are tested.

Scores: ``exact docs``, the share of tweets cut exactly as the gold; token precision, recall and F1 over
character spans (a token counts when both its start and its end match a gold token's). Whitespace tokens
are left out. ``spacy-en`` is spaCy's English tokenizer (``spacy.blank("en")``) on the same text.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, List, Optional, Sequence, Tuple

import typer

from . import app

Span = Tuple[int, int]


@dataclass
class GoldTweet:
    text: str
    tokens: List[str]
    spans: List[Span]  # character offsets of the tokens in text; empty when they could not be aligned


def align(text: str, tokens: Sequence[str]) -> List[Span]:
    """Offsets of ``tokens`` found in order in ``text`` with only whitespace between them ([] if not)."""
    spans: List[Span] = []
    pos = 0
    for tok in tokens:
        start = text.find(tok, pos)
        if start < 0 or text[pos:start].strip():
            return []
        spans.append((start, start + len(tok)))
        pos = start + len(tok)
    return spans


def read_conllu_tweets(path: Path) -> List[GoldTweet]:
    """Tweets of a CoNLL-U file: ``# text`` and the surface tokens (a multiword range's form, not its words)."""
    tweets: List[GoldTweet] = []
    text: Optional[str] = None
    tokens: List[str] = []
    skip_to = 0

    def close() -> None:
        nonlocal text, tokens, skip_to
        if tokens:
            raw = text if text is not None else " ".join(tokens)
            tweets.append(GoldTweet(raw, tokens, align(raw, tokens)))
        text, tokens, skip_to = None, [], 0

    with open(path, encoding="utf8") as f:
        for line in f:
            line = line.rstrip("\n").lstrip("\ufeff")
            if not line.strip():
                close()
            elif line.startswith("#"):
                if line.startswith("# text = "):
                    text = line[len("# text = "):]
                elif line.startswith("# text ="):
                    text = line[len("# text ="):].lstrip()
            else:
                cols = line.split("\t")
                id_ = cols[0]
                if "." in id_:
                    continue  # empty node
                if "-" in id_:
                    start, end = id_.split("-")
                    tokens.append(cols[1])
                    skip_to = int(end)
                    continue
                if int(id_) <= skip_to:
                    continue  # a word inside a multiword token already taken
                tokens.append(cols[1])
    close()
    return tweets


def read_ark_tweets(path: Path) -> List[GoldTweet]:
    """Tweets of an ARK file (``token<TAB>tag``): the text is the tokens joined by single spaces."""
    from spacy_nldm.corpora.ark import read_ark

    tweets = []
    for sent in read_ark(path):
        text = " ".join(sent.words)
        spans, pos = [], 0
        for w in sent.words:
            spans.append((pos, pos + len(w)))
            pos += len(w) + 1
        tweets.append(GoldTweet(text, list(sent.words), spans))
    return tweets


def read_tweets(path: Path, fmt: str) -> List[GoldTweet]:
    if fmt == "conllu":
        return read_conllu_tweets(path)
    if fmt == "ark":
        return read_ark_tweets(path)
    raise ValueError(f"unknown format {fmt!r}: expected 'conllu' or 'ark'")


def token_spans(doc) -> List[Span]:
    """Character spans of a Doc's tokens, whitespace tokens left out."""
    from spacy_nldm.tokenizers import WHITESPACE

    return [(t.idx, t.idx + len(t.text)) for t in doc if t.text.strip(WHITESPACE)]


@dataclass
class Score:
    name: str
    docs: int = 0
    exact: int = 0
    gold: int = 0
    predicted: int = 0
    correct: int = 0

    @property
    def exact_pct(self) -> float:
        return 100.0 * self.exact / self.docs if self.docs else 0.0

    @property
    def precision(self) -> float:
        return self.correct / self.predicted if self.predicted else 0.0

    @property
    def recall(self) -> float:
        return self.correct / self.gold if self.gold else 0.0

    @property
    def f1(self) -> float:
        p, r = self.precision, self.recall
        return 2 * p * r / (p + r) if p + r else 0.0


def score_tokenizer(name: str, tokenizer: Callable, tweets: Iterable[GoldTweet], errors: Optional[list] = None) -> Score:
    """Score ``tokenizer`` (text -> Doc) on ``tweets``; mismatching tweets are appended to ``errors``."""
    score = Score(name)
    for tweet in tweets:
        doc = tokenizer(tweet.text)
        predicted = token_spans(doc)
        gold = tweet.spans
        score.docs += 1
        score.gold += len(tweet.tokens)
        score.predicted += len(predicted)
        score.correct += len(set(predicted) & set(gold))
        if predicted == gold:
            score.exact += 1
        elif errors is not None:
            errors.append((tweet, [tweet.text[a:b] for a, b in predicted]))
    return score


def table(scores: Sequence[Score], title: str) -> str:
    lines = [
        f"{title}",
        "",
        "| tokenizer | docs | exact docs % | token P | token R | token F1 |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for s in scores:
        lines.append(
            f"| {s.name} | {s.docs} | {s.exact_pct:.2f} | {100 * s.precision:.2f} | {100 * s.recall:.2f} "
            f"| {100 * s.f1:.2f} |"
        )
    return "\n".join(lines)


def show_errors(errors, n: int) -> None:
    for tweet, predicted in errors[:n]:
        gold, pred = list(tweet.tokens), predicted
        i = 0
        while i < min(len(gold), len(pred)) and gold[i] == pred[i]:
            i += 1
        typer.echo(f"- text: {tweet.text!r}")
        typer.echo(f"  gold: {' | '.join(gold[max(0, i - 2):i + 6])}")
        typer.echo(f"  ours: {' | '.join(pred[max(0, i - 2):i + 6])}")


@app.command("tokenizer")
def tokenizer(
    data: Path = typer.Argument(
        ..., help="Gold file: CoNLL-U with '# text' lines (Tweebank v2) or ARK 'token<TAB>tag' (twitter_pos).",
        exists=True, dir_okay=False,
    ),
    fmt: str = typer.Option(
        "", "--format", help="'conllu' or 'ark' (default: 'conllu' for a .conllu file, else 'ark')."
    ),
    conventions: str = typer.Option(
        "", help="Tweet tokenizer conventions, 'ark' or 'ud' (default: 'ud' for conllu, 'ark' for ark)."
    ),
    limit: int = typer.Option(0, help="Score only the first N tweets (0 = all)."),
    compare: bool = typer.Option(True, help="Also score spaCy's English tokenizer on the same text."),
    errors: int = typer.Option(0, help="Print the first N tweets our tokenizer cuts differently from the gold."),
) -> None:
    """Exact-tweet share and token P/R/F1 of the tweet tokenizer (and spaCy's English one) against gold tokens."""
    import spacy

    from spacy_nldm.tokenizers import CONVENTIONS, TweetTokenizer

    fmt = fmt or ("conllu" if data.suffix == ".conllu" else "ark")
    if fmt not in ("conllu", "ark"):
        raise typer.BadParameter(f"--format must be 'conllu' or 'ark', not {fmt!r}")
    conventions = conventions or ("ud" if fmt == "conllu" else "ark")
    if conventions not in CONVENTIONS:
        raise typer.BadParameter(f"--conventions must be one of {', '.join(CONVENTIONS)}, not {conventions!r}")
    tweets = read_tweets(data, fmt)
    if limit:
        tweets = tweets[:limit]
    unaligned = sum(1 for t in tweets if not t.spans)
    nlp = spacy.blank("en")
    wrong: list = []
    scores = [score_tokenizer(f"TweetTokenizer ({conventions})", TweetTokenizer(nlp.vocab, conventions), tweets, wrong)]
    if compare:
        scores.append(score_tokenizer("spacy-en", nlp.tokenizer, tweets))
    typer.echo(table(scores, f"{data.name} ({fmt}, {len(tweets)} tweets)"))
    if unaligned:
        typer.echo(f"\n{unaligned} tweets whose gold tokens are not found in their text count as all wrong.")
    if errors:
        typer.echo("")
        show_errors(wrong, errors)
