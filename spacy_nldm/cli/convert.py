"""``python -m spacy_nldm convert ...``: corpus converters (ARK Twitter POS, CoNLL-U targets, Tweebank v1).

Malformed input stops the command with ``error: FILE:LINE: problem`` on stderr and exit status 1 (no
traceback). On success each command prints the number of sentences and tokens it wrote.
"""
from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from . import app

convert_app = typer.Typer(
    help="Convert corpora to spaCy DocBin files (.spacy), checking the input.", no_args_is_help=True
)
app.add_typer(convert_app, name="convert")


def _fail(err: Exception) -> None:
    typer.secho(f"error: {err}", fg=typer.colors.RED, err=True)
    raise typer.Exit(code=1)


def _write(docs, output: Path) -> None:
    from spacy.tokens import DocBin

    output.parent.mkdir(parents=True, exist_ok=True)
    DocBin(docs=docs, store_user_data=True).to_disk(output)


def _report(per_file, output: Path) -> None:
    for path, n_sents, n_toks in per_file:
        typer.echo(f"  {path}: {n_sents} sentences, {n_toks} tokens")
    total_s = sum(s for _, s, _ in per_file)
    total_t = sum(t for _, _, t in per_file)
    typer.secho(f"Wrote {total_s} sentences, {total_t} tokens to {output}", fg=typer.colors.GREEN)


@convert_app.command("ark")
def convert_ark(
    inputs: List[Path] = typer.Argument(..., help="ARK files (token<TAB>tag), concatenated in the given order"),
    output: Path = typer.Option(..., "--output", "-o", help="Output .spacy file"),
    tagset: str = typer.Option("ark", help="'ark': only the 25 ARK tags are accepted; 'any': any tag"),
) -> None:
    """ARK Twitter POS to DocBin: one Doc per tweet, the tags on Token.tag_."""
    from ..corpora.ark import ARK_TAGS, ark_to_docs
    from ..corpora.errors import ConversionError

    if tagset not in ("ark", "any"):
        _fail(ValueError(f"--tagset must be 'ark' or 'any', not {tagset!r}"))
    try:
        docs, per_file = ark_to_docs(inputs, tagset=ARK_TAGS if tagset == "ark" else None)
    except ConversionError as err:
        _fail(err)
    _write(docs, output)
    _report(per_file, output)


@convert_app.command("conllu-check")
def conllu_check(
    inputs: List[Path] = typer.Argument(..., help="CoNLL-U files"),
) -> None:
    """Validate CoNLL-U files (columns, ids, UPOS, HEAD, UTF-8) and print their counts."""
    from ..corpora.conllu import check_conllu
    from ..corpora.errors import ConversionError

    for path in inputs:
        try:
            st = check_conllu(path)
        except ConversionError as err:
            _fail(err)
        typer.echo(
            f"{path}: {st.sentences} sentences, {st.words} words, {st.multiword_tokens} multiword tokens, "
            f"{st.empty_nodes} empty nodes, {len(st.upos)} UPOS"
        )


@convert_app.command("ud-targets")
def ud_targets(
    docbin: Path = typer.Argument(..., help="DocBin written by `spacy convert --converter conllu --n-sents 1`"),
    output: Path = typer.Option(..., "--output", "-o", help="Output .spacy file"),
    conllu: Optional[Path] = typer.Option(None, help="The CoNLL-U source: its counts must match the DocBin's"),
    expect_sentences: Optional[int] = typer.Option(None, help="Expected sentences (when there is no CoNLL-U)"),
    expect_tokens: Optional[int] = typer.Option(None, help="Expected tokens (when there is no CoNLL-U)"),
) -> None:
    """Copy UPOS (Token.pos_) onto Token.tag_, store gold heads, check the counts against the source."""
    from spacy.tokens import DocBin
    from spacy.vocab import Vocab

    from ..corpora.conllu import check_conllu, set_targets
    from ..corpora.errors import ConversionError

    try:
        if not docbin.exists():
            raise ConversionError(docbin, None, "file not found")
        expected = check_conllu(conllu) if conllu is not None else None
        docs = list(DocBin().from_disk(docbin).get_docs(Vocab()))
        if not docs:
            raise ConversionError(docbin, None, "empty DocBin: no sentences")
        docs, n_sents, n_toks = set_targets(docs, docbin, expected)
        if expect_sentences is not None and n_sents != expect_sentences:
            raise ConversionError(docbin, None, f"{n_sents} sentences, expected {expect_sentences}")
        if expect_tokens is not None and n_toks != expect_tokens:
            raise ConversionError(docbin, None, f"{n_toks} tokens, expected {expect_tokens}")
    except ConversionError as err:
        _fail(err)
    _write(docs, output)
    _report([(str(conllu or docbin), n_sents, n_toks)], output)


@convert_app.command("tweebank-v1")
def convert_tweebank_v1(
    inputs: List[Path] = typer.Argument(..., help="Tweebank v1 files (14 columns)"),
    output: Path = typer.Option(..., "--output", "-o", help="Output .spacy file"),
) -> None:
    """Tweebank v1 to DocBin: ARK tags on Token.tag_, gold heads in user_data['gold_heads'] and on the tokens."""
    from ..corpora.errors import ConversionError
    from ..corpora.tweebank import tweebank_v1_to_docs

    try:
        docs, per_file = tweebank_v1_to_docs(inputs)
    except ConversionError as err:
        _fail(err)
    _write(docs, output)
    _report(per_file, output)
