"""Doc and Token extensions set by the structured taggers.

- ``Token._.nldm_head``: head token index of the decoded latent tree (doc index), None for the root (read
  from ``Doc._.nldm_heads``, the doc's heads as one int32 array, -1 for the root);
- ``Doc._.nldm_tree_score``: score of the decoded (labels, tree), summed over the doc's segments;
- ``Doc._.nldm_probs`` (n_tokens, M) float32 label marginals and ``Doc._.nldm_prob_labels``
  (with ``store_probs = true``); ``Token._.nldm_probs`` reads them as a {label: probability} dict;
- ``Span._.nldm_prob`` (the entity components): the probability of an entity under the model;
- ``Doc._.nldm_nbest`` (the entity components, with ``n_best``): the k most probable entity sets of the doc,
  best first, as ``(probability, [(start, end, label), ...])`` pairs (token offsets).
"""
from typing import Dict, Optional

from spacy.tokens import Doc, Span, Token


def _token_probs(token: Token) -> Optional[Dict[str, float]]:
    probs = token.doc._.nldm_probs
    if probs is None:
        return None
    return dict(zip(token.doc._.nldm_prob_labels, probs[token.i].tolist()))


def _token_head(token: Token) -> Optional[int]:
    heads = token.doc._.nldm_heads
    if heads is None or heads[token.i] < 0:
        return None
    return int(heads[token.i])


def register_extensions() -> None:
    """Idempotent."""
    for name in ("nldm_tree_score", "nldm_heads", "nldm_probs", "nldm_prob_labels", "nldm_nbest"):
        if not Doc.has_extension(name):
            Doc.set_extension(name, default=None)
    if not Span.has_extension("nldm_prob"):
        Span.set_extension("nldm_prob", default=None)
    if not Token.has_extension("nldm_head"):
        Token.set_extension("nldm_head", getter=_token_head)
    if not Token.has_extension("nldm_probs"):
        Token.set_extension("nldm_probs", getter=_token_probs)


register_extensions()
