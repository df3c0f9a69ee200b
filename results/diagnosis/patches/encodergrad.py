"""Screening patch (not shipped): scale the gradient the structured head sends back to the tok2vec.

With ``normalize_loss = true`` the head's loss is the batch's mean NLL per token, so the encoder's gradient
is ~T times smaller than under spaCy's summed loss (T = tokens in the batch) and spaCy's default optimizer
(each parameter's gradient clipped to norm 1) almost never clips it. Section 16(c) found the encoder's final
weights to be where the structured taggers lose to spaCy's ``tagger`` on Pl. ``summed`` multiplies the
encoder's incoming gradient by T (the encoder then sees the summed loss and is clipped as the ``tagger``'s
encoder is) while the head keeps the per-token loss; ``sqrt`` multiplies it by the square root of T.
"""


def patch(scale) -> None:
    """``scale(T) -> float``: the factor for a batch of T tokens. The head's own gradient is unchanged:
    only the tok2vec's backprop is wrapped (the scores' backprop scales nothing else)."""
    from spacy_nldm.models import tagger as mt

    forward0 = mt.forward

    def forward(model, docs, is_train):
        tok2vec = model.layers[0]
        call0 = tok2vec._func

        def tok2vec_forward(layer, X, is_train):
            vecs, backprop_vecs = call0(layer, X, is_train=is_train)
            k = scale(sum(len(v) for v in vecs))
            return vecs, lambda dvecs: backprop_vecs([d * k for d in dvecs])

        tok2vec._func = tok2vec_forward
        try:
            return forward0(model, docs, is_train)
        finally:
            tok2vec._func = call0

    mt.forward = forward


def summed():
    patch(lambda n: float(n))


def sqrt():
    patch(lambda n: float(n) ** 0.5)
