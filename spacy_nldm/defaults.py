"""The components' default settings: the one place they are written (a module of its own, which imports nothing
of the package, so that the models and the pipeline both read it without importing each other).

The factories' default configs (what ``nlp.add_pipe`` and ``spacy init config -p nldm_tagger`` give) and the
component class's keyword defaults come from here; the registered architectures declare no defaults of their
own (spaCy fills a config's model block from :data:`NLDM_MODEL` or :data:`CRF_MODEL`).
"""
import json
from typing import Optional, Tuple

from thinc.api import Config

#: settings of both components (see :class:`~spacy_nldm.pipeline.tagger.StructuredTagger` for their meaning)
COMMON = {
    "attr": "tag",
    "max_length": 256,
    "store_probs": False,
    "normalize_loss": True,
    "tok2vec_loss": "sum",
    "label_smoothing": 0.05,
    "average_params": True,
}
NLDM = {**COMMON, "decode": "posterior", "loss": "exact", "store_tree": True}
CRF = {**COMMON, "decode": "viterbi"}

#: settings of both entity components (see :class:`~spacy_nldm.pipeline.ner.StructuredEntityRecognizer`): the
#: tag scheme the entities are learnt in; the span group that gets the entities with their probabilities
#: (spancat's default key); the probability an entity needs to be kept; the lower one a span that was not
#: decoded needs to join the span group (None: none joins); how many entity sets to keep per doc (0: none);
#: the temperature every score is divided by at predict time (1: the distribution as trained); the bias
#: towards entities of the tokens whose annotation is missing, in training (0: the plain likelihood). BILUO: on
#: WNUT 2017 (``spacy train``, seeds 0-2, two encoders) it was ahead of BIO in all four cells (crf_ner +0.18 / +1.03,
#: nldm_ner +1.82 / +0.95 F1; projects/paper/results/ner/wnut17.md and wnut17_bio.md), at 25 tags instead of 13
NER_COMMON = {
    "max_length": COMMON["max_length"],
    "store_probs": COMMON["store_probs"],
    "scheme": "BILUO",
    "spans_key": "sc",
    "threshold": 0.0,
    "candidate_threshold": None,
    "n_best": 0,
    "temperature": 1.0,
    "missing_entity_bias": 0.0,
}
#: what the entity components train with and do not offer as settings: the taggers' loss normalisation,
#: tok2vec gradient and weight averaging (left to the optimizer where it averages already), and no label
#: smoothing (spaCy's ``ner`` has none; a uniform target over every tag sequence would also count the sequences
#: the scheme forbids)
NER_TRAINING = {"normalize_loss": COMMON["normalize_loss"], "tok2vec_loss": COMMON["tok2vec_loss"],
                "average_params": COMMON["average_params"], "label_smoothing": 0.0}
#: the span group of a gold doc whose spans the entity components learn are not entities of their type (as spaCy's
#: ``ner`` reads its ``incorrect_spans_key``; Prodigy's name for it). Not a config setting: the components are at
#: their 12; a pipeline can rename it on the component (``nlp.get_pipe("crf_ner").incorrect_spans_key = ...``)
INCORRECT_SPANS_KEY = "incorrect_spans"
NLDM_NER = {**NER_COMMON, "loss": "exact"}
CRF_NER = {**NER_COMMON, "decode": "viterbi"}


#: The encoder a component gets in its own config: the ``tok2vec`` that ``spacy init config -p tagger`` writes
#: for spaCy's ``tagger`` (MultiHashEmbed over NORM, PREFIX, SUFFIX, SHAPE, then a MaxoutWindowEncoder of
#: depth 4), with more capacity: width 192 instead of the tagger's 96 and hash tables of twice its rows
#: (5000, 1000, 2500, 2500). Measured in ``spacy train`` (eight datasets, three seeds;
#: results/spacy_train_diagnosis.md), the two together gained both components more than width 128 or 192
#: alone, or twice the rows alone. A component listening to a shared ``tok2vec`` has none.
OWN_WIDTH = 192
OWN_ATTRS = ("NORM", "PREFIX", "SUFFIX", "SHAPE")
OWN_ROWS = (10000, 2000, 5000, 5000)
OWN_TOK2VEC = f"""
[model.tok2vec]
@architectures = "spacy.Tok2Vec.v2"

[model.tok2vec.embed]
@architectures = "spacy.MultiHashEmbed.v2"
width = {OWN_WIDTH}
attrs = {json.dumps(list(OWN_ATTRS))}
rows = {list(OWN_ROWS)}
include_static_vectors = false

[model.tok2vec.encode]
@architectures = "spacy.MaxoutWindowEncoder.v2"
width = {OWN_WIDTH}
depth = 4
window_size = 1
maxout_pieces = 3
"""

#: The head's own embeddings when its tok2vec is a listener to a shared spaCy ``tok2vec`` (not a transformer)
#: and the config leaves
#: ``embed_width`` and ``embed_depth`` at null: spaCy's MultiHashEmbed over OWN_ATTRS with OWN_ROWS, of this
#: width, then a MaxoutWindowEncoder of this depth (``models.tagger.head_embeddings``), beside the listener's
#: vectors at the scorer's input. A shared tok2vec is sized for the pipeline's other components; in
#: ``spacy train`` on the tagger's tok2vec this gained both components more than embeddings without context
#: (results/spacy_train_diagnosis.md). A head with its own encoder gets none (nothing gained there).
LISTENER_EMBED_WIDTH = 96
LISTENER_EMBED_DEPTH = 4


def resolve_head_embeddings(width: Optional[int], depth: Optional[int], listening: bool) -> Tuple[int, int]:
    """(embed_width, embed_depth) as the architecture reads them. A null width stands for LISTENER_EMBED_WIDTH
    and LISTENER_EMBED_DEPTH where ``listening`` (the tok2vec listens to a shared spaCy tok2vec), else for
    (0, 0); a null depth beside a stated width stands for 0."""
    if width is None:
        auto_width, auto_depth = (LISTENER_EMBED_WIDTH, LISTENER_EMBED_DEPTH) if listening else (0, 0)
        return auto_width, auto_depth if depth is None else depth
    return width, 0 if depth is None else depth


def resolve_embed_mix(mix: Optional[bool], depth: int, listening: bool) -> bool:
    """``embed_mix`` as the architecture reads it, given the resolved ``embed_depth``: a null one stands for
    true where ``listening`` and the head has window layers (depth > 0), else for false. On a listener the
    head's window encoder then reads the shared tok2vec's vectors beside its own embeddings: in ``spacy
    train`` on the tagger's tok2vec (seeds 0-2) this gained crf_tagger 0.12 and nldm_tagger 0.14 over a window
    encoder over the embeddings alone (results/spacy_train_diagnosis.md)."""
    return bool(listening and depth) if mix is None else mix


#: the model settings both architectures take (their meaning: the README's settings table)
SHARED_MODEL = """
edge_scorer = "bilinear"
label_dim = 50
rank = 400
emission = true
dropout = 0.0
embed_width = null
embed_depth = null
embed_mix = null
"""

NLDM_MODEL = Config().from_str(
    """
[model]
@architectures = "spacy-nldm.NLDMTagger.v2"
max_dist = 3
distance_bias = true"""
    + SHARED_MODEL
    + OWN_TOK2VEC
)["model"]

CRF_MODEL = Config().from_str(
    """
[model]
@architectures = "spacy-nldm.CRFTagger.v2"
order = 1"""
    + SHARED_MODEL
    + OWN_TOK2VEC
)["model"]
