"""The ``nldm_tagger``, ``crf_tagger``, ``nldm_ner`` and ``crf_ner`` factories (entry points ``spacy_factories``)."""
from typing import Callable, Optional

from spacy.language import Language
from thinc.api import Model

from .. import models  # noqa: F401  (registers the architectures)
from .. import defaults
from . import scorers  # noqa: F401  (registers the scorer)
from .ner import StructuredEntityRecognizer
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


_NER_SCORER = {"@scorers": "spacy.ner_scorer.v1"}
#: as spaCy's ``ner``
_NER_SCORE_WEIGHTS = {"ents_f": 1.0, "ents_p": 0.0, "ents_r": 0.0, "ents_per_type": None}
_NER_ASSIGNS = ["doc.ents", "token.ent_iob", "token.ent_type", "doc.spans", "span._.nldm_prob", "doc._.nldm_nbest",
                "doc._.nldm_probs"]


@Language.factory(
    "nldm_ner",
    assigns=_NER_ASSIGNS,
    default_config={"model": defaults.NLDM_MODEL, **defaults.NLDM_NER, "scorer": _NER_SCORER},
    default_score_weights=_NER_SCORE_WEIGHTS,
)
def make_nldm_ner(
    nlp: Language,
    name: str,
    model: Model,
    scheme: str,
    loss: str,
    max_length: int,
    store_probs: bool,
    spans_key: Optional[str],
    threshold: float,
    candidate_threshold: Optional[float],
    n_best: int,
    temperature: float,
    missing_entity_bias: float,
    scorer: Optional[Callable],
) -> StructuredEntityRecognizer:
    """Named entities with the Neural Latent Dependency Model (BIO or BILUO tags linked by a latent tree)."""
    return StructuredEntityRecognizer(
        nlp.vocab, model, name, scheme=scheme, decode="posterior", loss=loss, max_length=max_length,
        store_probs=store_probs, spans_key=spans_key, threshold=threshold,
        candidate_threshold=candidate_threshold, n_best=n_best, temperature=temperature,
        missing_entity_bias=missing_entity_bias, scorer=scorer,
    )


@Language.factory(
    "crf_ner",
    assigns=_NER_ASSIGNS,
    default_config={"model": defaults.CRF_MODEL, **defaults.CRF_NER, "scorer": _NER_SCORER},
    default_score_weights=_NER_SCORE_WEIGHTS,
)
def make_crf_ner(
    nlp: Language,
    name: str,
    model: Model,
    scheme: str,
    decode: str,
    max_length: int,
    store_probs: bool,
    spans_key: Optional[str],
    threshold: float,
    candidate_threshold: Optional[float],
    n_best: int,
    temperature: float,
    missing_entity_bias: float,
    scorer: Optional[Callable],
) -> StructuredEntityRecognizer:
    """Named entities with a linear-chain CRF of order 1 or 2 over BIO or BILUO tags, the scheme's rules
    enforced."""
    return StructuredEntityRecognizer(
        nlp.vocab, model, name, scheme=scheme, decode=decode, max_length=max_length, store_probs=store_probs,
        spans_key=spans_key, threshold=threshold,
        candidate_threshold=candidate_threshold, n_best=n_best, temperature=temperature,
        missing_entity_bias=missing_entity_bias, scorer=scorer,
    )
