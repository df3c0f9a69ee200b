"""``python -m projects.paper raw-text``: a trained tagger on raw text against the given tokens.

For each pipeline, the accuracy of what it tags (``tag_acc`` or ``pos_acc``) on a test DocBin three ways:

* ``given tokens``: the reference tokens (``spacy evaluate --gold-preproc``);
* ``raw, own tokenizer``: the reference text cut by the pipeline's own tokenizer (``spacy evaluate``);
  spaCy aligns the predicted tokens to the reference ones and scores the aligned tokens (a token cut
  differently from the reference counts as wrong);
* ``raw, spaCy's tokenizer``: the same text cut by spaCy's rule-based tokenizer for the pipeline's language
  (``spacy.Tokenizer.v1``), set at load time in place of the pipeline's;
* ``raw, tweet tokenizer``: the same text cut by ``spacy-nldm.TweetTokenizer.v1`` with ``--conventions``
  (``ark`` for ARK Twitter POS, ``ud`` for Tweebank v2), set at load time in place of the pipeline's.

The reference text is the DocBin's (``Doc.text``: the tweet's own text for Tweebank v2, the tokens joined by
spaces for ARK data).
"""
from pathlib import Path
from typing import Dict, List, Optional

import typer

from . import app

TWEETS = "spacy-nldm.TweetTokenizer.v1"
SPACY = {"@tokenizers": "spacy.Tokenizer.v1"}


def raw_text_scores(model: Path, test: Path, conventions: Optional[str], score: str = "tag_acc") -> Dict[str, float]:
    """``score`` (in %) of the pipeline at ``model`` on ``test``: given tokens, raw text with its own tokenizer,
    with spaCy's, and (with ``conventions``) with the tweet tokenizer."""
    import spacy
    import torch
    from spacy.tokens import DocBin
    from spacy.training import Example

    torch.set_num_threads(1)
    out = {}
    tokenizers = [(("given tokens", "raw, own tokenizer"), None), (("raw, spaCy's tokenizer",), SPACY)]
    if conventions:
        tokenizers.append((("raw, tweet tokenizer",), {"@tokenizers": TWEETS, "conventions": conventions}))
    for names, tokenizer in tokenizers:
        if tokenizer:  # in place of the saved one (whose data is not read)
            nlp = spacy.load(model, config={"nlp": {"tokenizer": tokenizer}}, exclude=["tokenizer"])
        else:
            nlp = spacy.load(model)
        docs = list(DocBin().from_disk(test).get_docs(nlp.vocab))
        for name in names:
            if name == "given tokens":
                examples = [Example(spacy.tokens.Doc(nlp.vocab, words=[t.text for t in d],
                                                     spaces=[bool(t.whitespace_) for t in d]), d) for d in docs]
            else:
                examples = [Example(nlp.make_doc(d.text), d) for d in docs]
            scores = nlp.evaluate(examples)
            if scores.get(score) is None:
                raise ValueError(f"{model}: the pipeline reports no {score} (try --score pos_acc)")
            out[name] = 100 * scores[score]
    return out


@app.command("raw-text")
def raw_text(
    models: List[Path] = typer.Argument(..., help="Trained pipelines (folders such as model-best)."),
    test: Path = typer.Option(..., help="Test DocBin with the reference tokens and labels (e.g. corpus/tweebank_v2/test.spacy)."),
    conventions: Optional[str] = typer.Option(None, help="Also cut the raw text with spacy-nldm.TweetTokenizer.v1 in these conventions: ark or ud."),
    score: str = typer.Option("tag_acc", help="The score to report: tag_acc, or pos_acc for pipelines that tag Token.pos_."),
    output: Optional[Path] = typer.Option(None, help="Also write the Markdown table here."),
) -> None:
    """Accuracy on the given tokens and on raw text (the pipeline's own tokenizer, spaCy's, a tweet tokenizer),
    side by side, with the raw-text losses."""
    if not test.exists():
        raise typer.BadParameter(f"{test}: no such file")
    if conventions is not None:
        from spacy_nldm.tokenizers import check_conventions

        check_conventions(conventions)
    columns = ["given tokens", "raw, own tokenizer", "raw, spaCy's tokenizer"] + (["raw, tweet tokenizer"] if conventions else [])
    head = ["pipeline"] + columns + [f"{c} − given" for c in columns[1:]]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for model in models:
        if not model.exists():
            raise typer.BadParameter(f"{model}: no such pipeline folder")
        scores = raw_text_scores(model, test, conventions, score)
        cells = [str(model)] + [f"{scores[c]:.2f}" for c in columns]
        cells += [f"{scores[c] - scores['given tokens']:+.2f}" for c in columns[1:]]
        lines.append("| " + " | ".join(cells) + " |")
        typer.echo(lines[-1])
    text = (f"{score} (%) on {test}, given tokens and raw text; command: `python -m projects.paper raw-text "
            f"{' '.join(str(m) for m in models)} --test {test}" + (f" --conventions {conventions}" if conventions else "")
            + "`\n\n" + "\n".join(lines) + "\n")
    typer.echo("\n" + text)
    if output is not None:
        output.parent.mkdir(parents=True, exist_ok=True)
        output.write_text(text, encoding="utf8")
