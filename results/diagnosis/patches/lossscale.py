"""Screening patch (not shipped): the per-token loss times a constant ``c``.

With ``normalize_loss = true`` the structured components return the batch's NLL per token; with
``false`` its sum (about 270 tokens in a batch of 16 sentences, so ~270 times larger). Under spaCy's default
optimizer (each parameter's gradient clipped to norm 1 before Adam) the scale decides which updates are
clipped: per token almost none (median norm ~0.03), summed almost all. A factor ``c`` in between clips only
the batches whose gradient is ~1/(c * 0.03) times the median: the outliers.
"""


def patch(c: float) -> None:
    from spacy_nldm.pipeline import tagger as pt

    get_loss0 = pt.StructuredTagger.get_loss

    def get_loss(self, examples, scores):
        loss, d_scores = get_loss0(self, examples, scores)
        return loss * c, d_scores * c

    pt.StructuredTagger.get_loss = get_loss


def c4():
    patch(4.0)


def c10():
    patch(10.0)
