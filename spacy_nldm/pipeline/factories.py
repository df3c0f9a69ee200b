"""The ``nldm_tagger`` and ``crf_tagger`` factories (entry points ``spacy_factories``)."""
from typing import Callable, List, Optional, Sequence

from spacy.language import Language
from thinc.api import Config, Model

from .. import models  # noqa: F401  (registers the architectures)
from .. import defaults
from . import scorers  # noqa: F401  (registers the scorer)
from .tagger import StructuredTagger

_SCORER = {"@scorers": "spacy-nldm.tag_scorer.v1"}
# The scorer reports <attr>_acc: the default attr "tag" carries the whole weight (pos_acc is left out of the
# training table); a component with attr "pos" moves the weight to pos_acc when it is initialized (see
# StructuredTagger.initialize), so that the table's SCORE is the accuracy of what the component tags.
_SCORE_WEIGHTS = {"tag_acc": 1.0, "pos_acc": None}
_ASSIGNS = ["token.tag", "token.pos", "doc._.nldm_heads", "doc._.nldm_tree_score", "doc._.nldm_probs"]


@Language.factory(
    "nldm_tagger",
    assigns=_ASSIGNS,
    default_config={"model": defaults.NLDM_MODEL, **defaults.NLDM, "scorer": _SCORER},
    default_score_weights=_SCORE_WEIGHTS,
)
def make_nldm_tagger(
    nlp: Language,
    name: str,
    model: Model,
    attr: str,
    decode: str,
    loss: str,
    max_length: int,
    store_probs: bool,
    store_tree: bool,
    normalize_loss: bool,
    tok2vec_loss: Optional[str],
    label_smoothing: float,
    average_params: bool,
    scorer: Optional[Callable],
) -> StructuredTagger:
    """Neural Latent Dependency Model tagger (labels linked by a latent projective tree)."""
    return StructuredTagger(
        nlp.vocab, model, name, attr=attr, decode=decode, loss=loss, max_length=max_length,
        store_probs=store_probs, store_tree=store_tree, normalize_loss=normalize_loss, tok2vec_loss=tok2vec_loss,
        label_smoothing=label_smoothing, average_params=average_params, scorer=scorer,
    )


@Language.factory(
    "crf_tagger",
    assigns=_ASSIGNS[:2] + ["doc._.nldm_probs"],
    default_config={"model": defaults.CRF_MODEL, **defaults.CRF, "scorer": _SCORER},
    default_score_weights=_SCORE_WEIGHTS,
)
def make_crf_tagger(
    nlp: Language,
    name: str,
    model: Model,
    attr: str,
    decode: str,
    max_length: int,
    store_probs: bool,
    normalize_loss: bool,
    tok2vec_loss: Optional[str],
    label_smoothing: float,
    average_params: bool,
    scorer: Optional[Callable],
) -> StructuredTagger:
    """Linear-chain CRF tagger of order 1 or 2 (the paper's baselines)."""
    return StructuredTagger(
        nlp.vocab, model, name, attr=attr, decode=decode, max_length=max_length,
        store_probs=store_probs, normalize_loss=normalize_loss, tok2vec_loss=tok2vec_loss,
        label_smoothing=label_smoothing, average_params=average_params, scorer=scorer,
    )


def components_made_by(config: Config, factories: Sequence[str]) -> List[str]:
    """Names of the components in a pipeline's config (``[components]``) made by one of ``factories``, in order."""
    return [name for name, block in config.get("components", {}).items() if block.get("factory") in factories]
