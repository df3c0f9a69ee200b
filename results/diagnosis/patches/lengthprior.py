"""Screening patch (not shipped): the NLDM's distance bias starts as a length prior instead of at zero.

distance_bias (2, K) [direction, arc length - 1] starts at -beta * (length - 1) in both directions, so the
trees the model starts from are mostly the two chains (adjacent arcs), and longer arcs have to earn their
weight; it stays a learned parameter. The prior is the same for every labelling, so with the label
interactions at zero it cancels and the NLDM still starts as the softmax tagger. Same factory otherwise
(k = 3, bilinear interaction).
"""
import torch


def patch(beta: float):
    from spacy_nldm.models import scorers

    init0 = scorers.Scorer._init

    def _init(self, name, shape):
        if name == "distance_bias":
            lengths = torch.arange(shape[1], dtype=torch.float32)
            return (-beta * lengths).expand(shape).clone()
        return init0(self, name, shape)

    scorers.Scorer._init = _init


def beta1():
    patch(1.0)
