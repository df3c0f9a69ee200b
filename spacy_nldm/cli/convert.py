"""``python -m spacy_nldm convert ...``: corpus converters (ARK Twitter POS, CoNLL-U, Tweebank v1, entities in
CoNLL layouts), and a
train/dev split of a DocBin.

Malformed input stops the command with ``error: FILE:LINE: problem`` on stderr and exit status 1 (no
traceback); input that is kept but looks wrong is reported as ``warning: FILE:LINE: problem``. On success
each command prints the number of sentences and tokens it wrote.
"""
from __future__ import annotations

import warnings
from contextlib import contextmanager
from pathlib import Path
from typing import List, Optional, Tuple

import typer

from .app import MARKUP, FullHelpGroup, app

convert_app = typer.Typer(
    help="Convert corpora to spaCy DocBin files (.spacy), checking the input.", cls=FullHelpGroup,
    rich_markup_mode=MARKUP,
)
app.add_typer(convert_app, name="convert")


@contextmanager
def _reported():
    """Run a conversion: ConversionError -> ``error: ...`` and exit 1; ConversionWarning -> ``warning: ...``."""
    from ..corpora.errors import ConversionError, ConversionWarning

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ConversionWarning)
        try:
            yield
        except ConversionError as err:
            _warn(caught, ConversionWarning)
            typer.secho(f"error: {err}", fg=typer.colors.RED, err=True)
            raise typer.Exit(code=1)
    _warn(caught, ConversionWarning)


def _warn(caught, kind) -> None:
    for item in caught:
        if issubclass(item.category, kind):
            typer.secho(f"warning: {item.message}", fg=typer.colors.YELLOW, err=True)
        else:
            warnings.warn_explicit(item.message, item.category, item.filename, item.lineno)


def _fail(message: str) -> None:
    typer.secho(f"error: {message}", fg=typer.colors.RED, err=True)
    raise typer.Exit(code=1)


def _finish(docs, per_file, output: Path, extra: Tuple[str, ...] = ()) -> None:
    """Write the DocBin; print a line per source file, the ``extra`` lines, then the total."""
    from ..corpora.docbins import summary, write_docbin

    write_docbin(docs, output)
    lines = summary(per_file, output)
    for line in lines[:-1] + list(extra):
        typer.echo(line)
    typer.secho(lines[-1], fg=typer.colors.GREEN)


@convert_app.command("ark")
def convert_ark(
    inputs: List[Path] = typer.Argument(..., help="ARK files (token<TAB>tag), concatenated in the given order"),
    output: Path = typer.Option(..., "--output", "-o", help="Output .spacy file"),
    tagset: str = typer.Option("ark", help="'ark': only the 25 ARK tags are accepted; 'any': any tag"),
) -> None:
    """ARK Twitter POS to DocBin: one Doc per tweet, the tags on Token.tag_."""
    from ..corpora.ark import ARK_TAGS, ark_to_docs

    if tagset not in ("ark", "any"):
        _fail(f"--tagset must be 'ark' or 'any', not {tagset!r}")
    with _reported():
        docs, per_file = ark_to_docs(inputs, tagset=ARK_TAGS if tagset == "ark" else None)
    _finish(docs, per_file, output)


@convert_app.command("ner")
def convert_ner(
    inputs: List[Path] = typer.Argument(..., help="CoNLL files (token ... tag per line), concatenated in the given order"),
    output: Path = typer.Option(..., "--output", "-o", help="Output .spacy file"),
    scheme: str = typer.Option("BIO", help="Tag scheme of the input: BIO (IOB2), IOB1 or BILUO (IOBES read as BILUO)"),
    repair: bool = typer.Option(False, "--repair", help="Read a broken entity sequence instead of stopping: a stray "
                                                        "I-X begins an X entity (BILUO: a stray L-X is U-X, an "
                                                        "unended entity ends where the next begins), with a "
                                                        "warning per line"),
    token_column: int = typer.Option(1, "--token-column", help="Column of the token, from 1 (negative: from the "
                                                               "end)"),
    tag_column: int = typer.Option(-1, "--tag-column", help="Column of the tag, from 1 (negative: from the end; "
                                                            "-1: the last)"),
    comments: bool = typer.Option(False, "--comments", help="Skip lines starting with # before a sentence's "
                                                            "first token (CoNLL-U style comments)"),
) -> None:
    """Entities in CoNLL layouts (WNUT 2017, CoNLL-2003) to DocBin: one Doc per sentence, the entities on
    Doc.ents and on Doc.spans["sc"] (for spaCy's spancat)."""
    from collections import Counter

    from ..corpora.conll_ner import SCHEMES, conll_ner_to_docs

    if scheme not in SCHEMES:
        _fail(f"--scheme must be one of {', '.join(SCHEMES)}, not {scheme!r}")
    if 0 in (token_column, tag_column):
        _fail("--token-column and --tag-column count from 1 (or from -1, the last column)")
    with _reported():
        docs, per_file = conll_ner_to_docs(inputs, scheme=scheme, repair=repair, token_column=token_column,
                                           tag_column=tag_column, comments=comments)
    types = Counter(ent.label_ for doc in docs for ent in doc.ents)
    by_type = ", ".join(f"{label} {n}" for label, n in sorted(types.items()))
    _finish(docs, per_file, output, (f"  entities: {sum(types.values())}" + (f" ({by_type})" if types else ""),))


@convert_app.command("conllu-check")
def conllu_check(
    inputs: List[Path] = typer.Argument(..., help="CoNLL-U files"),
) -> None:
    """Validate CoNLL-U files for `spacy convert` (columns, ids, UPOS, HEAD, UTF-8, no byte order mark,
    line endings) and print their counts."""
    from ..corpora.conllu import check_conllu

    for path in inputs:
        with _reported():
            st = check_conllu(path)
        typer.echo(
            f"{path}: {st.sentences} sentences, {st.words} words, {st.multiword_tokens} multiword tokens, "
            f"{st.empty_nodes} empty nodes, {len(st.upos)} UPOS"
        )


@convert_app.command("ud")
def convert_ud(
    conllu: Path = typer.Argument(..., help="A CoNLL-U file (UD)"),
    output: Path = typer.Option(..., "--output", "-o", help="Output .spacy file"),
) -> None:
    """CoNLL-U to DocBin in one step: conllu-check, spaCy's conllu converter (one sentence per Doc,
    multiword tokens split; a byte order mark removed first), then ud-targets."""
    from ..corpora.ud import convert_conllu

    with _reported():
        docs, n_sents, n_toks = convert_conllu(conllu)
    _finish(docs, [(str(conllu), n_sents, n_toks)], output)


@convert_app.command("ud-targets")
def ud_targets(
    docbin: Path = typer.Argument(..., help="DocBin written by `spacy convert --converter conllu --n-sents 1`"),
    output: Path = typer.Option(..., "--output", "-o", help="Output .spacy file"),
    conllu: Optional[Path] = typer.Option(None, help="The CoNLL-U source: its counts must match the DocBin's"),
    expect_sentences: Optional[int] = typer.Option(None, help="Expected sentences (when there is no CoNLL-U)"),
    expect_tokens: Optional[int] = typer.Option(None, help="Expected tokens (when there is no CoNLL-U)"),
) -> None:
    """Copy UPOS (Token.pos_) onto Token.tag_, store gold heads, check the counts against the source."""
    from ..corpora.ud import targets_from_docbin

    with _reported():
        docs, n_sents, n_toks = targets_from_docbin(docbin, conllu, expect_sentences, expect_tokens)
    _finish(docs, [(str(conllu or docbin), n_sents, n_toks)], output)


@convert_app.command("tweebank-v1")
def convert_tweebank_v1(
    inputs: List[Path] = typer.Argument(..., help="Tweebank v1 files (14 columns)"),
    output: Path = typer.Option(..., "--output", "-o", help="Output .spacy file"),
) -> None:
    """Tweebank v1 to DocBin: ARK tags on Token.tag_, gold heads in user_data['gold_heads'] and on the tokens."""
    from ..corpora.tweebank import tweebank_v1_to_docs

    with _reported():
        docs, per_file = tweebank_v1_to_docs(inputs)
    _finish(docs, per_file, output)


@convert_app.command("split")
def convert_split(
    input: Path = typer.Argument(..., help="DocBin file (.spacy) to split"),
    train: Path = typer.Option(..., "--train", help="Output .spacy file of the training part"),
    dev: Path = typer.Option(..., "--dev", help="Output .spacy file of the development part"),
    dev_share: float = typer.Option(0.15, "--dev-share", help="Share of the documents that go to dev, in (0, 0.5]"),
) -> None:
    """Split a DocBin into train and dev, for a corpus that ships without one of them: one document in each
    of floor(n * dev share) equal stretches goes to dev (spread evenly, the same split on every run)."""
    from ..corpora.docbins import read_docbin, split_dev, write_docbin

    if input.resolve() in (train.resolve(), dev.resolve()):
        _fail(f"{input}: the input would be overwritten; give --train and --dev other paths")
    with _reported():
        docs = read_docbin(input)
    try:
        train_docs, dev_docs = split_dev(docs, dev_share)
    except ValueError as err:
        _fail(f"{input}: {err}")
    for part, path in ((train_docs, train), (dev_docs, dev)):
        write_docbin(part, path)
        typer.echo(f"  {path}: {len(part)} sentences, {sum(len(doc) for doc in part)} tokens")
    typer.secho(f"Split {len(docs)} sentences of {input} into train and dev", fg=typer.colors.GREEN)
