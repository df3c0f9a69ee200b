"""Command-line interface: ``python -m spacy_nldm <command>`` or ``spacy-nldm <command>``.

Sub-command groups register themselves on :data:`app` when their module is imported below.
"""
import typer

# The help texts are plain text: with rich markup (typer's default), "[min, max]" or "[training]" in a help
# text is read as a style tag and vanishes, and every flag is shown with a "<bool>" value it does not take.
# Every Typer of the CLI (sub-apps too: each renders its own commands' help) passes MARKUP.
MARKUP = None

app = typer.Typer(
    name="spacy-nldm",
    help="Neural Latent Dependency Model tools: data conversion, tagging, benchmarks.",
    no_args_is_help=True,
    add_completion=False,
    rich_markup_mode=MARKUP,
)
bench_app = typer.Typer(help="Benchmarks that print speed and memory figures.", no_args_is_help=True,
                        rich_markup_mode=MARKUP)
app.add_typer(bench_app, name="bench")

# Command modules: importing them registers their commands.
from . import bench  # noqa: E402,F401
from . import bench_pipeline  # noqa: E402,F401
from . import convert  # noqa: E402,F401
from . import tag  # noqa: E402,F401


def main() -> None:
    app()
