"""spacy-nldm: structured sequence labellers for spaCy.

The structured core lives in :mod:`spacy_nldm.structs` (torch and numba; it imports nothing of spaCy itself).
The spaCy components are registered through entry points, so ``spacy.load`` and
``spacy train`` find them without importing this package explicitly.
"""
from .about import __version__
from . import tokenizers  # noqa: F401  (registers @tokenizers "spacy-nldm.TweetTokenizer.v1")

__all__ = ["__version__"]
