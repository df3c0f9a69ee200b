"""project.yml and configs: structure checks, and a smoke run of the project's own commands on the
miniature mirror of tests/fixtures (project.yml is read and run from a copy in a temporary folder: weasel
creates the project's directories next to the project.yml it reads, and the checkout must stay clean)."""
from __future__ import annotations

import hashlib
import re

import pytest
import srsly
from thinc.api import Config

from nldm_fixtures import MIRROR, ROOT, copy_project, full_mirror, project_runner

SYSTEMS = ["softmax", "crf1", "crf2", "nldm"]


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    from weasel.util import load_project_config

    return load_project_config(copy_project(tmp_path_factory.mktemp("project")), interpolate=True)


def test_project_yml_validates_and_workflows_name_commands(project):
    cfg = project
    names = {c["name"] for c in cfg["commands"]}
    for wf in ("all", "reproduce", "package"):
        assert wf in cfg["workflows"]
        assert set(cfg["workflows"][wf]) <= names
    assert cfg["workflows"]["all"][-1] == "table-all"
    assert cfg["vars"]["mirror"] == "../shared/data"


def test_assets_are_pinned_upstream_and_match_the_mirror(project):
    """Every asset is pinned; with SPACY_NLDM_MIRROR set to the full mirror, its files match the md5s."""
    assets = project["assets"]
    mirror = full_mirror()
    assert len(assets) >= 25
    for a in assets:
        # an upstream file at an exact commit (40 hex digits), with an md5 checksum
        assert re.match(r"https://raw\.githubusercontent\.com/[^/]+/[^/]+/[0-9a-f]{40}/", a["url"]), a["url"]
        assert re.fullmatch(r"[0-9a-f]{32}", a["checksum"])
        assert a["dest"].startswith("../shared/data/")
        if mirror is not None:
            dest = mirror / a["dest"][len("../shared/data/"):]
            assert hashlib.md5(dest.read_bytes()).hexdigest() == a["checksum"], a["dest"]


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
    assert nldm["model"]["label_dim"] in (10, 50, 100) and nldm["model"]["rank"] in (100, 400, 600)
    assert 2 <= nldm["model"]["max_dist"] <= 10


def test_every_spacy_train_and_evaluate_step_runs_at_the_projects_thread_count():
    """`spacy project run` steps of both projects run at vars.threads torch threads (projects/paper/scripts/timed.py
    sets OMP_NUM_THREADS): at torch's default, a `spacy evaluate` beside another step oversubscribed the cores
    (SPEED 92 words/s instead of 2,131)."""
    steps = []
    # the study's commands start from projects/paper and reach the scripts through run.py
    for path, timed in ((ROOT / "project.yml", "python -m projects.paper.scripts.timed"),
                        (ROOT / "projects" / "paper" / "project.yml", "python run.py timed")):
        project = srsly.read_yaml(path)
        scripts = [line for command in project["commands"] for line in command.get("script", [])]
        for line in scripts:
            if re.search(r"-m spacy (train|evaluate)\b", line):
                steps.append(line)
                assert line.startswith(f"{timed} --threads ${{vars.threads}} --record "), (path, line)
    assert sum(" spacy evaluate " in line for line in steps) >= 5 and sum(" spacy train " in line for line in steps) >= 5


def test_the_study_is_its_own_project_and_the_main_job_names_none_of_it():
    """projects/paper/project.yml holds the study's workflows; the root project.yml is the main job."""
    from weasel.util import load_project_config

    root = srsly.read_yaml(ROOT / "project.yml")
    assert set(root["workflows"]) == {"all", "corpora", "reproduce", "package"}
    study = load_project_config(ROOT / "projects" / "paper", interpolate=True)
    names = {c["name"] for c in study["commands"]}
    assert {"synthetic", "tune", "glove", "trf"} <= set(study["workflows"])
    for steps in study["workflows"].values():
        assert set(steps) <= names
    assert not names & {c["name"] for c in root["commands"]}
    for command in study["commands"]:
        for line in command.get("script", []):  # started in projects/paper: the study's code through run.py
            assert line.startswith("python run.py ") or line.startswith("python -m spacy init vectors "), line
        for path in command.get("deps", []) + command.get("outputs", []):
            assert path.startswith("../../"), (command["name"], path)


def test_smoke_convert_and_train_on_the_fixture_mirror(tmp_path):
    """The project's own commands (spacy project run) on the miniature mirror; softmax trains a few steps."""
    mirror = MIRROR
    proj = copy_project(tmp_path / "proj")
    run = project_runner(proj)

    out = run("convert-twitter")
    assert "Wrote 140 sentences" in out and "Wrote 80 sentences" in out and "Wrote 40 sentences" in out
    out = run("convert-ud")
    assert "Wrote 30 sentences" in out and "it has dev/test only" in out.replace("note: ", "").replace(
        str(mirror / "ud/UD_Italian-PoSTWITA/it_postwita-ud-train.conllu") + " is not in the mirror (see "
        + str(mirror / "ud/UD_Italian-PoSTWITA") + "/MISSING_TRAIN.md): ", "")
    from spacy.tokens import DocBin
    from spacy.vocab import Vocab

    te = list(DocBin().from_disk(proj / "corpus/ud/te/train.spacy").get_docs(Vocab()))
    assert len(te) == 30 and all(t.tag_ == t.pos_ != "" for d in te for t in d)
    it_dev = list(DocBin().from_disk(proj / "corpus/ud/it/dev.spacy").get_docs(Vocab()))
    assert len(it_dev) == 20 and not (proj / "corpus/ud/it/train.spacy").exists()

    run("train-softmax", "--vars.all_steps_softmax=4", "--vars.all_eval_frequency=2")
    assert (proj / "training/twitter/softmax/model-best/meta.json").exists()
    assert srsly.read_json(proj / "training/twitter/softmax/time.json")["returncode"] == 0
    run("evaluate-softmax")
    scores = srsly.read_json(proj / "metrics/twitter/softmax.json")
    assert 0.0 <= scores["tag_acc"] <= 1.0
    timing = srsly.read_json(proj / "training/twitter/softmax/evaluate_time.json")
    assert timing["threads"] == 1 and timing["returncode"] == 0 and "evaluate" in timing["command"]
