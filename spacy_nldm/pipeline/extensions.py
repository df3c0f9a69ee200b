"""Doc and Token extensions set by the structured taggers.

- ``Token._.nldm_head``: head token index of the decoded latent tree (doc index), None for the root;
- ``Doc._.nldm_tree_score``: score of the decoded (labels, tree), summed over the doc's segments;
- ``Doc._.nldm_probs`` (n_tokens, M) float32 label marginals and ``Doc._.nldm_prob_labels``
  (with ``store_probs = true``); ``Token._.nldm_probs`` reads them as a {label: probability} dict.
"""
from typing import Dict, Optional

from spacy.tokens import Doc, Token


def _token_probs(token: Token) -> Optional[Dict[str, float]]:
    probs = token.doc._.nldm_probs
    if probs is None:
        return None
    return dict(zip(token.doc._.nldm_prob_labels, probs[token.i].tolist()))


def register_extensions() -> None:
    """Idempotent."""
    for name, default in (("nldm_tree_score", None), ("nldm_probs", None), ("nldm_prob_labels", None)):
        if not Doc.has_extension(name):
            Doc.set_extension(name, default=default)
    if not Token.has_extension("nldm_head"):
        Token.set_extension("nldm_head", default=None)
    if not Token.has_extension("nldm_probs"):
        Token.set_extension("nldm_probs", getter=_token_probs)


register_extensions()
