"""Screening patch (not shipped): spaCy's ``tagger`` with its loss (and gradient) divided by the batch's
token count, i.e. the per-token loss of the structured components (``normalize_loss = true``). spaCy's
tagger sums over tokens, so its gradients are clipped by the default optimizer (norm 1 per parameter) at
nearly every step; per token they almost never are."""


def per_token() -> None:
    from spacy.pipeline.tagger import Tagger

    get_loss0 = Tagger.get_loss

    def get_loss(self, examples, scores):
        loss, d_scores = get_loss0(self, examples, scores)
        n = max(1, sum(len(s) for s in scores))
        return loss / n, [d / n for d in d_scores]

    Tagger.get_loss = get_loss
