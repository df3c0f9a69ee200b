"""Command-line interface: ``python -m spacy_nldm <command>`` or ``spacy-nldm <command>``.

Sub-command groups register themselves on :data:`app` when their module is imported below.
"""
import typer

app = typer.Typer(
    name="spacy-nldm",
    help="Neural Latent Dependency Model tools: benchmarks, data conversion, synthetic data.",
    no_args_is_help=True,
    add_completion=False,
)
bench_app = typer.Typer(help="Benchmarks that print speed and memory figures.", no_args_is_help=True)
app.add_typer(bench_app, name="bench")

# Command modules: importing them registers their commands.
from . import bench  # noqa: E402,F401
from . import bench_accuracy  # noqa: E402,F401
from . import bench_long  # noqa: E402,F401
from . import bench_pipeline  # noqa: E402,F401
from . import bench_spacy_train  # noqa: E402,F401
from . import bench_tokenizer  # noqa: E402,F401
from . import convert  # noqa: E402,F401
from . import synth  # noqa: E402,F401
from . import pretrained, tune  # noqa: E402,F401
from . import tag  # noqa: E402,F401


def main() -> None:
    app()
