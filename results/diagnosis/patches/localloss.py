"""Screening patch (not shipped): the structured NLL plus ``lam`` times a local softmax loss.

The local loss is the cross-entropy of a softmax over each token's scores averaged over its contexts,
``F[t].mean(over x, a)`` (M,): for the token-independent scorers that is the emission plus a per-label
constant, i.e. a softmax tagger on the shared encoder, so the encoder also gets the ``tagger``'s gradient
``p - y`` (spaCy's tagger: summed over tokens). Tokens with unknown gold (all labels allowed) add 0. The sum
joins the structured NLL before the component normalises it (per token with ``normalize_loss``).
"""
import torch


def patch(lam: float) -> None:
    from spacy_nldm.pipeline import tagger as pt

    get_structure0 = pt.get_structure

    def get_structure(model):
        structure = get_structure0(model)
        nll0 = structure.nll

        def nll(F, lengths, gold, approx="exact"):
            local = F.mean(dim=(2, 3))  # (S, L, M)
            full = torch.logsumexp(local, -1)
            allowed = torch.logsumexp(local.masked_fill(~gold, float("-inf")), -1)
            steps = torch.arange(F.shape[1])[None, :] < lengths[:, None]
            return nll0(F, lengths, gold, approx=approx) + lam * ((full - allowed) * steps).sum()

        structure.nll = nll
        return structure

    pt.get_structure = get_structure


def l1():
    patch(1.0)
