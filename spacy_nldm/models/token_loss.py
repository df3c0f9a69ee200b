"""An auxiliary per-token loss for the structured taggers (component setting ``token_loss``).

Each token's scores in the first context, ``F[s, i, 0, 0, :]`` (M,), are read as the logits of a local
classifier: with the token-independent edge scorers (bilinear, emission_transition) they are the emission
``h W + b`` plus one fixed row of the transition table (the start state for a chain, a head at the root
for the NLDM), so the local classifier is spaCy's ``tagger`` output layer shifted by a per-label
constant. The loss is that classifier's cross-entropy against spaCy's smoothed target (the gold label
keeps ``1 - a``, every other label ``a / (M - 1)``), summed over the tokens whose gold label is known:

    token_loss(F) = - sum_{s, i labelled} sum_c q_{s,i}(c) log softmax(F[s, i, 0, 0])_c

The component adds ``weight * token_loss`` to the structured loss (weight 0: the structured loss alone,
unchanged). It gives the emission a direct per-token signal, as the ``tagger`` has.
"""
import torch

from .structure import real_tokens

Tensor = torch.Tensor


def token_cross_entropy(F: Tensor, gold_mask: Tensor, lengths: Tensor, label_smoothing: float = 0.0) -> Tensor:
    """Summed smoothed cross-entropy of the per-token classifier ``softmax(F[:, :, 0, 0])``.

    F (S, L, X, C, M) factored scores; gold_mask (S, L, M) allowed labels (one for a known gold label);
    lengths (S,) real tokens per segment. Tokens beyond ``lengths`` or with more than one allowed label
    (unknown gold) add nothing. ``label_smoothing`` a as spaCy's ``tagger`` (0: the gold one-hot).
    """
    S, L, m = gold_mask.shape
    logits = F[:, :L, 0, 0, :]
    known = real_tokens(gold_mask, lengths) & (gold_mask.sum(-1) == 1)
    if not bool(known.any()):
        return F.sum() * 0.0
    log_p = torch.log_softmax(logits[known], dim=-1)  # (K, M)
    gold = gold_mask[known].to(log_p.dtype)  # one-hot
    if label_smoothing and m > 1:
        gold = gold * (1.0 - label_smoothing) + (1.0 - gold) * (label_smoothing / (m - 1))
    return -(gold * log_p).sum()
