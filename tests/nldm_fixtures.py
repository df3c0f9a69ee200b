"""Paths to the test data: a miniature mirror under ``tests/fixtures/mirror`` (the first sentences of a few
files of the project's data mirror, see its README.md). No test reads ``../shared/data``; the few checks
that compare with the full mirror (md5 of the assets) run only where ``SPACY_NLDM_MIRROR`` names it."""
import os
from pathlib import Path
from typing import Optional

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = Path(__file__).resolve().parent / "fixtures"
MIRROR = FIXTURES / "mirror"
TWITTER = MIRROR / "twitter_pos"


def full_mirror() -> Optional[Path]:
    """The full data mirror named by the environment variable ``SPACY_NLDM_MIRROR``, or None."""
    path = os.environ.get("SPACY_NLDM_MIRROR")
    return Path(path) if path and Path(path).is_dir() else None
