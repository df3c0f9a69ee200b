"""The components' default settings: the one place they are written.

The factories' default configs (what ``nlp.add_pipe`` and ``spacy init config -p nldm_tagger`` give), the
component class's keyword defaults and the registered architectures' defaults all come from here (the
architectures' signatures are checked against :data:`NLDM_MODEL` and :data:`CRF_MODEL` by the tests). A
config in ``configs/`` (or the study's ``projects/paper/configs/``) differs from them only where a comment says why.
"""
from thinc.api import Config

#: settings of both components (see :class:`~.tagger.StructuredTagger` for their meaning)
COMMON = {
    "attr": "tag",
    "max_length": 256,
    "store_probs": False,
    "normalize_loss": True,
    "tok2vec_loss": "sum",
    "label_smoothing": 0.05,
    "token_loss": 0.0,
    "average_params": True,
}
NLDM = {**COMMON, "decode": "posterior", "loss": "exact", "store_tree": True}
CRF = {**COMMON, "decode": "viterbi"}


def own_tok2vec(width: int) -> str:
    """The encoder a component gets in its own config: the ``tok2vec`` that ``spacy init config -p tagger``
    writes for spaCy's ``tagger`` (MultiHashEmbed over NORM, PREFIX, SUFFIX, SHAPE with rows 5000, 1000, 2500,
    2500, then a MaxoutWindowEncoder of depth 4), at ``width`` instead of the tagger's 96. A component
    listening to a shared ``tok2vec`` has none."""
    return f"""
[model.tok2vec]
@architectures = "spacy.Tok2Vec.v2"

[model.tok2vec.embed]
@architectures = "spacy.MultiHashEmbed.v2"
width = {width}
attrs = ["NORM", "PREFIX", "SUFFIX", "SHAPE"]
rows = [5000, 1000, 2500, 2500]
include_static_vectors = false

[model.tok2vec.encode]
@architectures = "spacy.MaxoutWindowEncoder.v2"
width = {width}
depth = 4
window_size = 1
maxout_pieces = 3
"""


#: The own encoders' widths, measured in ``spacy train`` (eight datasets, three seeds;
#: results/spacy_train_diagnosis.md). crf_tagger: 128 gained +0.18 over 96 for about 30% more training
#: time; 192 gained only +0.05 more for twice the time of 128 (as much as hash tables of twice the rows at
#: 128, which cost no time). nldm_tagger: 128 gained +0.13 over 96, and 192 +0.19 more (on each of the three
#: seeds; twice the rows at 128 gained +0.11), for about twice the time of 128.
CRF_WIDTH = 128
NLDM_WIDTH = 192

NLDM_MODEL = Config().from_str(
    """
[model]
@architectures = "spacy-nldm.NLDMTagger.v1"
edge_scorer = "bilinear"
label_dim = 50
rank = 400
max_dist = 3
emission = true
distance_bias = true
dropout = 0.0
char_width = 0
context_width = 0
hidden_width = 0
"""
    + own_tok2vec(NLDM_WIDTH)
)["model"]

CRF_MODEL = Config().from_str(
    """
[model]
@architectures = "spacy-nldm.CRFTagger.v1"
order = 1
edge_scorer = "bilinear"
label_dim = 50
rank = 400
emission = true
dropout = 0.0
char_width = 0
context_width = 0
hidden_width = 0
"""
    + own_tok2vec(CRF_WIDTH)
)["model"]
