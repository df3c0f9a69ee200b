"""Screening patch (not shipped): the structured NLL plus ``lam`` times a local softmax loss.

The local loss is the cross-entropy of a softmax over each token's scores averaged over its contexts,
``F[t].mean(over x, a)`` (M,): for the token-independent scorers that is the emission plus a per-label
constant, i.e. a softmax tagger on the shared encoder, so the encoder also gets the ``tagger``'s gradient
``p - y`` (spaCy's tagger: summed over tokens). Tokens with unknown gold (all labels allowed) add 0. The sum
is normalised like the structured loss (per token with ``normalize_loss``).
"""
import torch


def patch(lam: float) -> None:
    from spacy_nldm.pipeline import tagger as pt

    nll0 = pt.StructuredTagger.get_loss

    def get_loss(self, examples, scores):
        # the structure's nll is wrapped so that the local term joins it before normalisation and backward
        structure = pt.get_structure(self.model)
        nll_structured = structure.nll

        def nll(F, lengths, gold, approx="exact"):
            loss = nll_structured(F, lengths, gold, approx=approx)
            local = F.mean(dim=(2, 3))  # (S, L, M)
            full = torch.logsumexp(local, -1)
            allowed = torch.logsumexp(local.masked_fill(~gold, float("-inf")), -1)
            steps = torch.arange(F.shape[1])[None, :] < lengths[:, None]
            return loss + lam * ((full - allowed) * steps).sum()

        structure.nll = nll
        real = pt.get_structure
        pt.get_structure = lambda model: structure
        try:
            return nll0(self, examples, scores)
        finally:
            pt.get_structure = real

    pt.StructuredTagger.get_loss = get_loss


def l05():
    patch(0.5)


def l1():
    patch(1.0)


def l3():
    patch(3.0)
