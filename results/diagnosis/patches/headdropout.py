"""Screening patch (not shipped as a default): dropout on the token vectors inside the torch edge scorer.

The plain loop calls ``nlp.update`` with ``drop = 0`` (spaCy's default), which thinc's dropout layers obey; a
dropout inside the scorer acts whenever thinc puts the torch module in training mode
(``PyTorchShim.begin_update``), so the component regularises itself in any loop. Since section 19 this is the
architectures' ``dropout`` option; the patch sets it on every scorer built (the factories' defaults leave it
at 0), so the rows recorded under ``setup="headdropout:p25"`` re-run through the shipped code path (same masks:
Tw, CRF, seed 0 gives 85.42 either way).
"""


def patch(p: float) -> None:
    from spacy_nldm.models.scorers import Scorer

    init0 = Scorer.__init__

    def __init__(self, *args, **kwargs):
        init0(self, *args, **{**kwargs, "dropout": p})

    Scorer.__init__ = __init__


def p10():
    patch(0.1)


def p25():
    patch(0.25)


def p50():
    patch(0.5)
