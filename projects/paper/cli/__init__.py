"""The study's command line: ``python -m projects.paper <command>``, run from the repository root.

Sub-commands register themselves on :data:`app` when their module is imported below.
"""
import typer

from spacy_nldm.cli import MARKUP, FullHelpGroup

app = typer.Typer(
    name="projects.paper",
    help="The paper study: the spacy train harness, hyper-parameter search, GloVe and MiniLM seed runs, the arc-length "
         "sweep, the plain-loop accuracy comparison, the synthetic data and the long-sentence, raw-text and tokenizer "
         "benchmarks.",
    cls=FullHelpGroup,
    add_completion=False,
    rich_markup_mode=MARKUP,
)

from . import accuracy  # noqa: E402,F401
from . import long  # noqa: E402,F401
from . import pretrained  # noqa: E402,F401
from . import raw_text  # noqa: E402,F401
from . import spacy_train  # noqa: E402,F401
from . import structs  # noqa: E402,F401
from . import synth  # noqa: E402,F401
from . import tokenizer  # noqa: E402,F401
from . import tune  # noqa: E402,F401


def main() -> None:
    app()
