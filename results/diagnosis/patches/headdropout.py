"""Screening patch (not shipped): dropout on the token vectors inside the torch edge scorer.

The plain loop calls ``nlp.update`` with ``drop = 0`` (spaCy's default), which thinc's dropout layers obey; a
``torch.nn.functional.dropout`` inside the scorer acts whenever thinc puts the torch module in training mode
(``PyTorchShim.begin_update``), so the component would regularise itself in any loop.
"""
import torch


def patch(p: float) -> None:
    from spacy_nldm.models.scorers import Scorer

    forward0 = Scorer.forward

    def forward(self, h):
        return forward0(self, torch.nn.functional.dropout(h, p, training=self.training))

    Scorer.forward = forward


def p10():
    patch(0.1)


def p25():
    patch(0.25)


def p50():
    patch(0.5)
