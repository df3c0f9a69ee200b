"""Word dropout for hash embeddings: while training, some tokens lose their word identity.

A hash embedding has no unknown-word row: a word never seen in training hashes to rows trained for other words,
and the tagger reads it as a noisy mix of them. :func:`word_id_dropout` sits after spaCy's ``FeatureExtractor``
(one (n_tokens, n_attrs) array of uint64 keys per doc) and, while training only, gives a random ``rate`` share of
the tokens :data:`UNKNOWN_KEY` in place of their key in ``column`` (the word: NORM), so that the model also learns
to tag from the other attributes (prefix, suffix, shape) and the static vectors, which is all it has for the
words it never saw. Prediction leaves every key as it is.
"""
from typing import List

from thinc.api import Model
from thinc.types import Ints2d

UNKNOWN_KEY = 0  # spaCy's hash of the empty string: no token has an empty NORM


def word_id_dropout(rate: float, column: int = 0) -> Model[List[Ints2d], List[Ints2d]]:
    """Model[List[Ints2d], List[Ints2d]]: in training, each token's key in ``column`` becomes
    :data:`UNKNOWN_KEY` with probability ``rate`` (independently per token); the identity otherwise."""
    if not 0.0 <= rate < 1.0:
        raise ValueError(f"word dropout rate must be in [0, 1), not {rate}")
    return Model("word_id_dropout", _forward, attrs={"rate": rate, "column": column})


def _forward(model: Model, Xs: List[Ints2d], is_train: bool):
    rate, column = model.attrs["rate"], model.attrs["column"]
    if not is_train or rate == 0.0:
        return Xs, lambda dYs: dYs
    xp = model.ops.xp
    Ys = []
    for X in Xs:
        Y = X.copy()
        Y[xp.random.uniform(0.0, 1.0, (len(X),)) < rate, column] = UNKNOWN_KEY
        Ys.append(Y)
    return Ys, lambda dYs: dYs
