"""projects/paper/runs/seeds.py (``python -m projects.paper seed-runs``): systems x seeds through the study's run
queue, one record per run, a finished run never redone, the record's figure that of the trained pipeline."""

import pytest
import spacy
from spacy.tokens import Doc, DocBin
from spacy.training import Example

from projects.paper.runs.records import RunsFile
from projects.paper.runs.seeds import RunError, RunSpec, run_all
from projects.paper.runs.spacy_train import generate_config

WORDS = [["I", "love", "it", "!"], ["you", "are", "so", "funny"], ["we", "like", "this", "song"]]
TAGS = [["O", "V", "O", ","], ["O", "V", "R", "A"], ["O", "V", "D", "N"]]


def _spec(tmp_path) -> RunSpec:
    nlp = spacy.blank("en")
    data = tmp_path / "data.spacy"
    DocBin(docs=[Doc(nlp.vocab, words=w, tags=t) for w, t in zip(WORDS, TAGS)]).to_disk(data)
    (tmp_path / "crf.cfg").write_text(generate_config("crf_tagger", "own", "en").to_str(), encoding="utf8")
    return RunSpec(config_pattern=str(tmp_path / "{system}.cfg"), train=data, dev=data, test=data,
                   training=tmp_path / "training", results=tmp_path / "runs.jsonl", max_steps=2, eval_frequency=1)


def test_a_seed_run_is_recorded_once_with_its_pipelines_score(tmp_path):
    spec = _spec(tmp_path)
    run_all(spec, ["crf"], [0])
    runs_file = RunsFile(tmp_path / "runs.jsonl")
    (record,) = runs_file.rows().values()
    assert record["key"] == "crf-seed0"
    assert (record["system"], record["seed"], record["max_steps"]) == ("crf", 0, 2)
    nlp = spacy.load(tmp_path / "training" / "crf" / "seed0" / "model-best")
    gold = list(DocBin().from_disk(spec.test).get_docs(nlp.vocab))
    examples = [Example(Doc(nlp.vocab, words=[t.text for t in d]), d) for d in gold]
    assert record["test_acc"] == round(100 * nlp.evaluate(examples)["tag_acc"], 2)
    assert "--system.seed 0" in record["train_command"] and "--training.max_steps 2" in record["train_command"]
    written = runs_file.path.read_text()
    run_all(spec, ["crf"], [0])  # done: the queue skips it
    assert runs_file.path.read_text() == written and not list(runs_file.lock("crf-seed0").parent.glob("*.lock"))


def test_a_missing_config_or_a_failed_run_is_a_run_error(tmp_path):
    spec = _spec(tmp_path)
    with pytest.raises(RunError, match="config not found"):
        run_all(spec, ["nldm"], [0])
    (tmp_path / "crf.cfg").write_text("[nlp]\nlang = \"en\"\npipeline = [\"nope\"]\n", encoding="utf8")
    with pytest.raises(RunError, match="1 of 1 runs failed"):
        run_all(spec, ["crf"], [0])
    assert RunsFile(tmp_path / "runs.jsonl").rows() == {}
