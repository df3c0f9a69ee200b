"""Command-line interface: ``python -m spacy_nldm <command>`` or ``spacy-nldm <command>``.

The apps live in :mod:`.app`; importing the command modules below registers their commands on them.
"""
from . import bench_pipeline, convert, tag  # noqa: F401  (register their commands)
from .app import MARKUP, FullHelpGroup, app, bench_app  # noqa: F401

__all__ = ["app", "bench_app", "main", "MARKUP", "FullHelpGroup"]


def main() -> None:
    app()
