"""project.yml (the main job) and projects/paper/project.yml (the study): structure checks, and a smoke run of
their own commands on the miniature mirror of tests/fixtures (each project.yml is read and run from a copy in a
temporary folder: weasel creates the project's directories next to the project.yml it reads, and the checkout
must stay clean)."""
from __future__ import annotations

import hashlib
import re

import pytest
import srsly
from thinc.api import Config

from nldm_fixtures import ROOT, copy_project, full_mirror, project_runner

SYSTEMS = ["softmax", "crf1", "crf2", "nldm"]


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    from weasel.util import load_project_config

    return load_project_config(copy_project(tmp_path_factory.mktemp("project")), interpolate=True)


def _scripts(project: dict) -> list:
    return [line for command in project["commands"] for line in command.get("script", [])]


def test_the_main_job_trains_and_tests_the_four_systems_and_packages_one(project):
    names = {c["name"] for c in project["commands"]}
    assert set(project["workflows"]) == {"all", "corpora", "package", "ner"}
    for steps in project["workflows"].values():
        assert set(steps) <= names
    assert project["workflows"]["all"] == ["convert-twitter"] + [f"{step}-{system}" for system in SYSTEMS
                                                               for step in ("train", "evaluate")]
    assert project["workflows"]["package"][-1] == "load-package"
    assert project["vars"]["mirror"] == "../shared/data"


def test_the_main_job_is_short_and_calls_only_spacy_and_the_package():
    """At most 250 lines; every step is a spaCy command, one of `python -m spacy_nldm`, pip, or a line of
    Python that loads the package it built; nothing of the study (projects/)."""
    text = (ROOT / "project.yml").read_text(encoding="utf8")
    assert len(text.splitlines()) <= 250
    project = srsly.read_yaml(ROOT / "project.yml")
    for line in _scripts(project):
        assert re.match(r"python -(m (spacy|spacy_nldm|pip) |c )", line), line
        assert "projects" not in line, line
    for command in project["commands"]:
        for path in command.get("deps", []) + command.get("outputs", []):
            assert not path.startswith("projects"), (command["name"], path)


def _assets_are_pinned(assets, prefix: str) -> None:
    mirror = full_mirror()
    for a in assets:
        # an upstream file at an exact commit (40 hex digits), with an md5 checksum
        assert re.match(r"https://raw\.githubusercontent\.com/[^/]+/[^/]+/[0-9a-f]{40}/", a["url"]), a["url"]
        assert re.fullmatch(r"[0-9a-f]{32}", a["checksum"])
        assert a["dest"].startswith(prefix), a["dest"]
        if mirror is not None:
            dest = mirror / a["dest"][len(prefix):]
            assert hashlib.md5(dest.read_bytes()).hexdigest() == a["checksum"], a["dest"]


def test_assets_are_pinned_upstream_and_match_the_mirror(project):
    """The main job's assets are the four Twitter files and the three of WNUT 2017, the study's the rest; every
    asset is pinned and, with SPACY_NLDM_MIRROR set to the full mirror, its file matches the md5. Both land in
    the same mirror."""
    from weasel.util import load_project_config

    assert sorted(a["dest"].rsplit("/", 1)[1] for a in project["assets"]) == [
        "daily547.conll", "emerging.dev.conll", "emerging.test.annotated", "oct27.dev", "oct27.test", "oct27.train",
        "wnut17train.conll"]
    _assets_are_pinned(project["assets"], "../shared/data/")
    study = load_project_config(ROOT / "projects" / "paper", interpolate=True)
    assert len(study["assets"]) >= 25
    _assets_are_pinned(study["assets"], "../../../shared/data/")
    assert (ROOT / "projects" / "paper" / "../../../shared/data").resolve() == (ROOT / "../shared/data").resolve()


def _cfg(system: str) -> Config:
    return Config().from_disk(ROOT / "configs" / f"{system}.cfg", interpolate=False)


def _component(cfg: Config) -> str:
    (name,) = cfg["nlp"]["pipeline"]
    return name


def test_the_four_systems_share_one_encoder_and_one_training_setup():
    cfgs = {s: _cfg(s) for s in SYSTEMS}
    encoders = {s: c["components"][_component(c)]["model"]["tok2vec"] for s, c in cfgs.items()}
    ref = encoders["softmax"]
    assert ref["encode"]["@architectures"] == "spacy-nldm.TorchBiLSTMEncoder.v1" and ref["encode"]["depth"] == 1
    assert ref["encode"]["width"] // 2 in (100, 200, 400)  # D_h per direction, paper 6.1
    for s in SYSTEMS:
        assert encoders[s] == ref, s
        for section in ("training", "corpora", "paths"):
            assert cfgs[s][section] == cfgs["softmax"][section], (s, section)
        assert cfgs[s]["corpora"]["train"]["gold_preproc"] is True
        assert cfgs[s]["corpora"]["dev"]["gold_preproc"] is True
    tagger = cfgs["softmax"]["components"]["tagger"]
    from spacy_nldm.corpora.ark import ARK_TAGS

    assert not any(tag.startswith(tagger["neg_prefix"]) for tag in ARK_TAGS | {"!"})
    assert cfgs["crf1"]["components"]["crf"]["model"]["order"] == 1
    assert cfgs["crf2"]["components"]["crf"]["model"]["order"] == 2
    nldm = cfgs["nldm"]["components"]["nldm"]
    assert nldm["factory"] == "nldm_tagger" and nldm["model"]["@architectures"] == "spacy-nldm.NLDMTagger.v2"
    # the paper's search grid (6.1) and its arc lengths (Figure 4)
    assert nldm["model"]["label_dim"] in (10, 50, 100) and nldm["model"]["rank"] in (100, 400, 600)
    assert nldm["model"]["max_dist"] in (1, 2, 3, 5, 7, 10, 15)


def test_every_spacy_train_and_evaluate_step_of_the_study_runs_at_its_thread_count():
    """The study's `spacy train` / `spacy evaluate` steps run at vars.threads torch threads through
    projects/paper/scripts/timed.py (started from projects/paper through run.py): at torch's default, a `spacy
    evaluate` beside another step oversubscribed the cores (SPEED 92 words/s instead of 2,131)."""
    steps = [line for line in _scripts(srsly.read_yaml(ROOT / "projects" / "paper" / "project.yml"))
             if re.search(r"-m spacy (train|evaluate)\b", line)]
    for line in steps:
        assert line.startswith("python run.py timed --threads ${vars.threads} --record "), line
    assert sum(" spacy evaluate " in line for line in steps) >= 1 and sum(" spacy train " in line for line in steps) >= 1


def test_the_study_is_its_own_project_and_the_main_job_names_none_of_it():
    """projects/paper/project.yml holds the study's workflows, Table 2 and the corpora beyond Twitter among them."""
    from weasel.util import load_project_config

    root = srsly.read_yaml(ROOT / "project.yml")
    study = load_project_config(ROOT / "projects" / "paper", interpolate=True)
    names = {c["name"] for c in study["commands"]}
    assert {"synthetic", "tune", "glove", "trf", "reproduce", "ud-corpora"} <= set(study["workflows"])
    for steps in study["workflows"].values():
        assert set(steps) <= names
    assert not names & {c["name"] for c in root["commands"]}
    for command in study["commands"]:
        for line in command.get("script", []):  # started in projects/paper: the study's code through run.py
            assert re.match(r"(python run\.py |python -m spacy init vectors |python -m spacy_nldm convert |cp )",
                            line), line
        for path in command.get("deps", []) + command.get("outputs", []):
            assert path.startswith("../../"), (command["name"], path)


def test_smoke_convert_and_train_on_the_fixture_mirror(tmp_path):
    """The main job's own commands (spacy project run) on the miniature mirror; softmax trains a few steps and
    its test score is what the trained pipeline scores on the given tokens."""
    import spacy
    from spacy.tokens import Doc, DocBin
    from spacy.training import Example

    proj = copy_project(tmp_path / "proj")
    run = project_runner(proj)

    run("convert-twitter")
    assert sorted(len(DocBin().from_disk(path)) for path in (proj / "corpus/twitter").glob("*.spacy")) == [40, 80, 140]

    run("train-softmax", "--vars.all_steps=4", "--vars.all_eval_frequency=2")
    run("evaluate-softmax")
    scores = srsly.read_json(proj / "metrics/twitter/softmax.json")
    nlp = spacy.load(proj / "training/twitter/softmax/model-best")
    gold = list(DocBin().from_disk(proj / "corpus/twitter/test.spacy").get_docs(nlp.vocab))
    examples = [Example(Doc(nlp.vocab, words=[t.text for t in d]), d) for d in gold]
    assert scores["tag_acc"] == pytest.approx(nlp.evaluate(examples)["tag_acc"])
