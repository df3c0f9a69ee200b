"""The taggers' scorer: token accuracy of the predicted attribute, reported as ``<attr>_acc``."""
from typing import Any, Callable, Dict, Iterable

from spacy.scorer import Scorer
from spacy.training import Example
from spacy.util import registry


def score_tags(examples: Iterable[Example], *, attr: str = "tag", **kwargs) -> Dict[str, Any]:
    """``{attr}_acc`` over the tokens with a gold value (``attr`` is "tag" or "pos")."""
    return Scorer.score_token_attr(examples, attr)


@registry.scorers("spacy-nldm.tag_scorer.v1")
def make_tag_scorer() -> Callable[..., Dict[str, Any]]:
    return score_tags
