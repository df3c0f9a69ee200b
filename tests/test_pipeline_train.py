"""Training: the components learn real tags, and ``spacy train`` runs them from a config file."""
import random
import subprocess
import sys
from collections import Counter

import pytest
import spacy
import srsly
from spacy.tokens import Doc, DocBin
from spacy.cli.init_config import fill_config
from spacy.util import load_config
from spacy.training import Example
from thinc.api import Adam

from nldm_fixtures import TWITTER as DATA
from spacy_nldm.corpora.ark import read_ark

TOK2VEC = {
    "@architectures": "spacy.HashEmbedCNN.v2",
    "pretrained_vectors": None,
    "width": 64,
    "depth": 2,
    "embed_size": 2000,
    "window_size": 1,
    "maxout_pieces": 2,
    "subword_features": True,
}


@pytest.fixture(scope="module")
def ark_split():
    train = [(s.words, s.tags) for s in read_ark(DATA / "oct27.train")][:100]
    held_out = [(s.words, s.tags) for s in read_ark(DATA / "oct27.test")][:80]
    return train, held_out


def to_examples(nlp, sents):
    return [Example.from_dict(Doc(nlp.vocab, words=w), {"tags": t}) for w, t in sents]


def test_nldm_training_beats_the_majority_label_on_held_out_tweets(ark_split):
    train, held_out = ark_split
    majority = Counter(t for _, tags in train for t in tags).most_common(1)[0][0]
    baseline = sum(t == majority for _, tags in held_out for t in tags) / sum(len(t) for _, t in held_out)
    nlp = spacy.blank("en")
    model = {"edge_scorer": "trilinear", "label_dim": 16, "rank": 32, "max_dist": 3, "tok2vec": TOK2VEC}
    nlp.add_pipe("nldm_tagger", config={"model": model})
    egs = to_examples(nlp, train)
    nlp.initialize(lambda: egs)
    optimizer = Adam(0.01)
    rng = random.Random(0)
    for _ in range(2):
        rng.shuffle(egs)
        for i in range(0, len(egs), 8):
            nlp.update(egs[i : i + 8], sgd=optimizer, drop=0.1)
    accuracy = nlp.evaluate(to_examples(nlp, held_out))["tag_acc"]
    assert accuracy > baseline + 0.25, (accuracy, baseline)


TINY_CONFIG = """
[paths]
train = null
dev = null

[nlp]
lang = "en"
pipeline = ["tok2vec", "nldm", "crf"]
batch_size = 64

[components]

[components.tok2vec]
factory = "tok2vec"

[components.tok2vec.model]
@architectures = "spacy.Tok2Vec.v2"

[components.tok2vec.model.embed]
@architectures = "spacy.MultiHashEmbed.v2"
width = 32
attrs = ["NORM", "SHAPE"]
rows = [1000, 100]
include_static_vectors = false

[components.tok2vec.model.encode]
@architectures = "spacy.TorchBiLSTMEncoder.v1"
width = 32
depth = 1
dropout = 0.0

[components.nldm]
factory = "nldm_tagger"
attr = "tag"
decode = "viterbi"
max_length = 256
store_probs = false

[components.nldm.model]
@architectures = "spacy-nldm.NLDMTagger.v2"
edge_scorer = "trilinear"
label_dim = 8
rank = 16
max_dist = 5

[components.nldm.model.tok2vec]
@architectures = "spacy.Tok2VecListener.v1"
width = 32
upstream = "tok2vec"

[components.crf]
factory = "crf_tagger"
attr = "tag"

[components.crf.model]
@architectures = "spacy-nldm.CRFTagger.v2"
order = 2
edge_scorer = "emission_transition"
label_dim = 8
rank = 16

[components.crf.model.tok2vec]
@architectures = "spacy-nldm.BiLSTMEncoder.v1"
embed_width = 24
hidden_size = 16

[components.crf.model.tok2vec.embed]
@architectures = "spacy.MultiHashEmbed.v2"
width = 24
attrs = ["NORM"]
rows = [1000]
include_static_vectors = false

[corpora]

[corpora.train]
@readers = "spacy.Corpus.v1"
path = ${paths.train}
gold_preproc = true

[corpora.dev]
@readers = "spacy.Corpus.v1"
path = ${paths.dev}
gold_preproc = true

[training]
max_steps = 4
eval_frequency = 4
dropout = 0.1
seed = 0

[training.optimizer]
@optimizers = "Adam.v1"
learn_rate = 0.01

[training.batcher]
@batchers = "spacy.batch_by_words.v1"
size = 200
tolerance = 0.2
"""


def test_spacy_train_cli_and_spacy_load(ark_split, tmp_path):
    train, held_out = ark_split
    vocab = spacy.blank("en").vocab
    for name, sents in (("train", train[:30]), ("dev", held_out[:10])):
        DocBin(docs=[Doc(vocab, words=w, tags=t) for w, t in sents]).to_disk(tmp_path / f"{name}.spacy")
    (tmp_path / "base.cfg").write_text(TINY_CONFIG)
    fill_config(tmp_path / "config.cfg", tmp_path / "base.cfg", silent=True)
    cmd = [
        sys.executable, "-m", "spacy", "train", str(tmp_path / "config.cfg"), "--output", str(tmp_path / "out"),
        "--paths.train", str(tmp_path / "train.spacy"), "--paths.dev", str(tmp_path / "dev.spacy"),
    ]
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    nlp = spacy.load(tmp_path / "out" / "model-last")
    assert nlp.pipe_names == ["tok2vec", "nldm", "crf"]
    assert set(nlp.get_pipe("nldm").labels) == {t for _, tags in train[:30] for t in tags}
    # the pipeline loaded from disk scores on dev what training last measured (and saved in its meta)
    dev = [Example(Doc(nlp.vocab, words=w), Doc(nlp.vocab, words=w, tags=t)) for w, t in held_out[:10]]
    assert nlp.evaluate(dev)["tag_acc"] == pytest.approx(nlp.meta["performance"]["tag_acc"], abs=1e-9)


def training_table(stdout: str):
    """The columns and rows of `spacy train`'s console table."""
    lines = stdout.splitlines()
    head = next(i for i, line in enumerate(lines) if line.split()[:2] == ["E", "#"])
    columns = lines[head].replace("LOSS ", "LOSS_").split()  # "LOSS NLDM_TAGGER" is one column
    rows = [line.split() for line in lines[head + 2 :] if line.split() and line.split()[0].isdigit()]
    return columns, [dict(zip(columns, row)) for row in rows]


def test_spacy_init_config_route_scores_the_tagged_attribute(ark_split, tmp_path, capsys):
    """`spacy init config -p nldm_tagger`, then `spacy train`: the table's accuracy column is the one of
    the component's attr (tag, or pos when set so) and SCORE is that accuracy."""
    from spacy.training.converters import conllu_to_docs

    from nldm_fixtures import MIRROR

    train, held_out = ark_split
    vocab = spacy.blank("en").vocab
    for name, sents in (("train", train[:30]), ("dev", held_out[:10])):
        DocBin(docs=[Doc(vocab, words=w, tags=t) for w, t in sents]).to_disk(tmp_path / f"tag-{name}.spacy")
    conllu = (MIRROR / "ud/UD_Telugu-MTG/te_mtg-ud-train.conllu").read_text(encoding="utf8")
    ud = list(conllu_to_docs(conllu, n_sents=1, no_print=True))
    for name, docs in (("train", ud[:20]), ("dev", ud[20:])):
        DocBin(docs=docs).to_disk(tmp_path / f"pos-{name}.spacy")
    # spacy init config and spacy train in this process (the commands' own functions; the entry points in a
    # fresh interpreter: test_pipeline.py)
    from spacy.cli.init_config import init_config
    from spacy.cli.train import train

    init_config(lang="en", pipeline=["nldm_tagger"], optimize="efficiency", gpu=False).to_disk(tmp_path / "config.cfg")
    weights = load_config(tmp_path / "config.cfg")["training"]["score_weights"]
    assert weights == {"tag_acc": 1.0, "pos_acc": None}
    small = {"components.nldm_tagger.model.tok2vec.embed.width": 16,
             "components.nldm_tagger.model.tok2vec.encode.width": 16,
             "components.nldm_tagger.model.tok2vec.encode.depth": 1,
             "components.nldm_tagger.model.rank": 16, "components.nldm_tagger.model.label_dim": 8,
             "training.max_steps": 3, "training.eval_frequency": 1}
    for attr in ("tag", "pos"):
        out = tmp_path / f"out-{attr}"
        capsys.readouterr()
        train(tmp_path / "config.cfg", out, overrides={
            "paths.train": str(tmp_path / f"{attr}-train.spacy"), "paths.dev": str(tmp_path / f"{attr}-dev.spacy"),
            "components.nldm_tagger.attr": attr, **small})
        columns, rows = training_table(capsys.readouterr().out)
        key, other = f"{attr.upper()}_ACC", "POS_ACC" if attr == "tag" else "TAG_ACC"
        assert key in columns and other not in columns, columns
        assert rows and all(abs(float(r["SCORE"]) - float(r[key]) / 100) < 0.006 for r in rows), rows
        meta = srsly.read_json(out / "model-last" / "meta.json")  # the last row is what model-last saved
        assert float(rows[-1][key]) == pytest.approx(100 * meta["performance"][f"{attr}_acc"], abs=0.006)
        saved = load_config(out / "model-last" / "config.cfg")["training"]["score_weights"]
        assert saved[f"{attr}_acc"] == 1.0 and not saved["pos_acc" if attr == "tag" else "tag_acc"]
