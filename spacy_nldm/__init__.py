"""spacy-nldm: structured sequence labellers for spaCy.

The structured core lives in :mod:`spacy_nldm.structs` and imports only torch.
The spaCy components are registered through entry points, so ``spacy.load`` and
``spacy train`` find them without importing this package explicitly.
"""
from .about import __version__
from . import tokenizers  # noqa: F401  (registers @tokenizers "spacy-nldm.TweetTokenizer.v1")

__all__ = ["__version__"]
