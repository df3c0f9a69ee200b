"""GloVe through spaCy's machinery (export -> `spacy init vectors` -> case keys -> check), the derived GloVe and
MiniLM configs, and the seed-run table. Fixture: 35 GloVe rows in the kumo package layout
(tests/fixtures/vectors_glove)."""
from __future__ import annotations

import gzip
import subprocess
import sys
from pathlib import Path

import numpy
import pytest
from thinc.api import Config

pytest.importorskip("pyarrow")

from projects.paper.pretrained.glove import GloveError, add_case_keys, check_vectors, load_glove  # noqa: E402
from projects.paper.pretrained.variants import HASH_EMBEDS, derive_all, write_all  # noqa: E402

from nldm_fixtures import ROOT  # noqa: E402
STUDY_CONFIGS = ROOT / "projects" / "paper" / "configs"
FIXTURE = ROOT / "tests" / "fixtures" / "vectors_glove"
SYSTEMS = ["softmax", "crf1", "crf2", "nldm"]


def cli(*args: str) -> str:
    """A spacy_nldm command, in process."""
    from typer.testing import CliRunner

    from projects.paper.cli import app

    res = CliRunner().invoke(app, list(args))
    assert res.exit_code == 0, res.output
    return res.output


def init_vectors(txt: Path, output: Path) -> None:
    """spaCy's own command, as the project runs it."""
    res = subprocess.run([sys.executable, "-m", "spacy", "init", "vectors", "en", str(txt), str(output),
                          "--name", "glove_test"], capture_output=True, text=True)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]


@pytest.fixture(scope="module")
def vectors_folder(tmp_path_factory) -> Path:
    """The project's glove-vectors steps on the fixture: export, spacy init vectors, case keys, check."""
    tmp = tmp_path_factory.mktemp("glove")
    txt = tmp / "glove.txt.gz"
    cli("glove-export", "--root", str(FIXTURE), "--output", str(txt))
    init_vectors(txt, tmp / "vectors")
    cli("glove-case-keys", str(tmp / "vectors"))
    assert "OK, 35 x 50 vectors" in cli("glove-check", str(tmp / "vectors"), "--root", str(FIXTURE))
    return tmp / "vectors"


def test_export_is_word2vec_text_that_reads_back_exactly(vectors_folder):
    words, vectors = load_glove(FIXTURE)
    with gzip.open(vectors_folder.parent / "glove.txt.gz", "rt", encoding="utf8") as f:
        lines = f.read().splitlines()
    assert lines[0] == f"{len(words)} 50"
    assert [line.split(" ")[0] for line in lines[1:]] == words
    back = numpy.asarray([[float(x) for x in line.split(" ")[1:]] for line in lines[1:]], dtype="float32")
    assert numpy.array_equal(back, vectors)  # every float32 survives the text format


def test_vectors_folder_has_the_glove_shape_and_rows_in_any_case(vectors_folder):
    import spacy

    info = check_vectors(vectors_folder, FIXTURE)
    assert (info["rows"], info["dim"]) == (35, 50)
    assert info["checked_words"] == ["the", ",", "twitter", "lol", "good", "tomorrow", "haha"]
    words, glove = load_glove(FIXTURE)
    nlp = spacy.load(vectors_folder)
    assert nlp.vocab.vectors.shape == (35, 50)
    doc = nlp.make_doc("The TWITTER lol Tomorrow xyzzy")
    for token, word in zip(doc, ["the", "twitter", "lol", "tomorrow"]):
        assert numpy.array_equal(token.vector, glove[words.index(word)]), token.text
    assert not doc[4].has_vector
    # lower, capitalised and upper forms of the cased words: one key each, sharing the 35 rows
    assert nlp.vocab.vectors.n_keys == 35 + sum(len({w.capitalize(), w.upper()} - {w}) for w in words)


def test_check_refuses_a_folder_that_is_not_glove(vectors_folder, tmp_path):
    with pytest.raises(GloveError, match=r"vectors of shape \(35, 50\), GloVe has \(10, 50\)"):
        check_vectors(vectors_folder, FIXTURE, limit=10)
    import spacy
    from spacy.training.initialize import convert_vectors

    bare = tmp_path / "bare"  # what spacy init vectors alone gives: keyed by ORTH, "The" has no vector
    nlp = spacy.blank("en")
    convert_vectors(nlp, vectors_folder.parent / "glove.txt.gz", truncate=0, prune=-1, name="bare")
    nlp.to_disk(bare)
    with pytest.raises(GloveError, match="the token 'The' does not get GloVe's vector of 'the'"):
        check_vectors(bare, FIXTURE)
    assert add_case_keys(bare)["keys"] > 35 and check_vectors(bare, FIXTURE)["rows"] == 35


def test_missing_glove_files_are_clear_errors(tmp_path):
    with pytest.raises(GloveError, match="missing GloVe file: .*glove_6B_50d_emb.npy"):
        load_glove(tmp_path)


def test_glove_config_initialises_static_vectors_from_the_folder(vectors_folder, tmp_path):
    from spacy.tokens import DocBin
    from spacy.training.initialize import init_nlp
    from spacy.util import load_config

    import spacy
    from spacy_nldm.corpora.ark import ark_to_docs

    docs, _ = ark_to_docs([ROOT / "tests" / "fixtures" / "tune_twitter.txt"], spacy.blank("en").vocab)
    DocBin(docs=docs[:10]).to_disk(tmp_path / "train.spacy")
    config = load_config(STUDY_CONFIGS / "glove" / "nldm.cfg", overrides={
        "paths.vectors": str(vectors_folder), "paths.train": str(tmp_path / "train.spacy"),
        "paths.dev": str(tmp_path / "train.spacy")})
    nlp = init_nlp(config)
    assert nlp.vocab.vectors.shape == (35, 50)
    tok2vec = nlp.get_pipe("nldm").model.get_ref("tok2vec")
    static = [node for node in tok2vec.walk() if node.name == "static_vectors"]
    assert len(static) == 1 and static[0].get_param("W").shape[1] == 50


# ---------------------------------------------------------------- derived configs


def test_derived_configs_are_committed_and_up_to_date():
    assert write_all(ROOT / "configs", check=True, output=STUDY_CONFIGS) == [], "run: python -m projects.paper derive-configs"


def _cfg(path: Path) -> Config:
    return Config().from_disk(path, interpolate=False)


def test_glove_configs_differ_from_the_systems_only_by_the_static_vectors_word_dropout_and_averaging():
    for system in SYSTEMS:
        base, glove = _cfg(ROOT / "configs" / f"{system}.cfg"), _cfg(STUDY_CONFIGS / "glove" / f"{system}.cfg")
        name = base["nlp"]["pipeline"][-1]
        embed = glove["components"][name]["model"]["tok2vec"]["embed"]
        assert embed["@architectures"] == "spacy-nldm.WordDropoutHashEmbed.v1" and embed["include_static_vectors"] is True
        base_embed = base["components"][name]["model"]["tok2vec"]["embed"]
        assert 0 < embed.pop("word_dropout") < 1
        if "word_dropout" in base_embed:  # a base with word dropout of its own: the GloVe rate replaces it
            embed["word_dropout"] = base_embed["word_dropout"]
        embed["@architectures"] = base_embed["@architectures"]
        assert glove["paths"]["vectors"] == "assets/glove/vectors"
        assert glove["initialize"]["vectors"] == "${paths.vectors}"
        embed["include_static_vectors"] = base["components"][name]["model"]["tok2vec"]["embed"]["include_static_vectors"]
        glove["paths"]["vectors"] = base["paths"]["vectors"]
        assert glove["training"]["optimizer"]["use_averages"] is True
        glove["training"]["optimizer"]["use_averages"] = base["training"]["optimizer"]["use_averages"]
        assert glove == base, system


def test_minilm_configs_share_the_transformer_and_training_and_keep_each_head():
    trf = _cfg(STUDY_CONFIGS / "nldm_trf.cfg")
    listener = trf["components"]["nldm"]["model"]["tok2vec"]
    for system in ["softmax", "crf1", "crf2"]:
        cfg, base = _cfg(STUDY_CONFIGS / f"{system}_trf.cfg"), _cfg(ROOT / "configs" / f"{system}.cfg")
        name = base["nlp"]["pipeline"][-1]
        assert cfg["nlp"]["pipeline"] == ["transformer", name]
        assert cfg["components"]["transformer"] == trf["components"]["transformer"]
        for section in ("training", "corpora", "paths", "initialize"):
            assert cfg[section] == trf[section], (system, section)
        head = cfg["components"][name]
        assert head["model"]["tok2vec"] == listener
        expected = base["components"][name]
        expected["model"]["tok2vec"] = listener
        assert head == expected, system


def test_derive_refuses_an_encoder_without_hash_embeddings(tmp_path):
    from projects.paper.pretrained.variants import VariantError

    configs = tmp_path / "configs"
    configs.mkdir()
    for name in ["crf1", "crf2", "nldm"]:
        (configs / f"{name}.cfg").write_text((ROOT / "configs" / f"{name}.cfg").read_text())
    (configs / "nldm_trf.cfg").write_text((STUDY_CONFIGS / "nldm_trf.cfg").read_text())
    text = (ROOT / "configs" / "softmax.cfg").read_text()
    embed = next(name for name in HASH_EMBEDS if f'"{name}"' in text)
    (configs / "softmax.cfg").write_text(text.replace(f'"{embed}"', '"spacy.CharacterEmbed.v2"'))
    with pytest.raises(VariantError, match="softmax.cfg: .*is not spacy.MultiHashEmbed.v2"):
        derive_all(configs, output=configs)


# ---------------------------------------------------------------- seed-run table


def test_seed_table_mean_and_sample_std(tmp_path):
    from projects.paper.runs.records import RunsFile
    from projects.paper.runs.seeds import render_table

    runs = RunsFile(tmp_path / "runs.jsonl")
    for system, accs in {"softmax": [88.0, 89.0, 90.0], "nldm": [90.5]}.items():
        for seed, acc in enumerate(accs):
            runs.add({"key": f"{system}-seed{seed}", "system": system, "seed": seed, "test_acc": acc, "dev_acc": acc - 1, "train_seconds": 120.0,
                      "max_steps": 1200, "eval_frequency": 100})
    text = render_table(runs.path, title="T", systems=SYSTEMS, command="spacy project run glove", paper="twitter")
    from projects.paper.registry import PAPER_TABLE2

    paper = {system: f"{figures['twitter']:.2f}" for system, figures in PAPER_TABLE2.items()}  # the paper's Tw column
    assert f"| Neural softmax (`softmax`) | 89.00 ± 1.00 | 88.00 | 0,1,2 | 1200 (100) | 2.0 | {paper['softmax']} |" in text
    assert f"| NLDM (`nldm`) | 90.50 | 89.50 | 0 | 1200 (100) | 2.0 | {paper['nldm']} |" in text
    assert "| Neural CRF, order 1 (`crf1`) | not run |" in text and "Command: `spacy project run glove`" in text
