"""The study's plain-loop comparison (``python -m projects.paper accuracy``): the side-by-side table and its
resumable runs file, on a tiny corpus."""
import json

import spacy
from spacy.tokens import Doc, DocBin
from typer.testing import CliRunner

from nldm_fixtures import ROOT
from projects.paper.cli import app
from projects.paper.cli.accuracy import accuracy_table

SENTENCES = [
    ("the dog runs", "D N V"), ("a cat sleeps", "D N V"), ("dogs run fast", "N V R"),
    ("the cat runs fast", "D N V R"), ("a dog sleeps", "D N V"), ("cats sleep", "N V"),
]


def write_corpus(root):
    nlp = spacy.blank("en")
    folder = root / "twitter"
    folder.mkdir(parents=True)
    for split in ("train", "test"):
        docs = []
        for text, tags in SENTENCES:
            doc = Doc(nlp.vocab, words=text.split())
            for token, tag in zip(doc, tags.split()):
                token.tag_ = tag
            docs.append(doc)
        DocBin(docs=docs).to_disk(folder / f"{split}.spacy")


def test_bench_accuracy_trains_the_systems_side_by_side_and_resumes(tmp_path):
    write_corpus(tmp_path / "corpus")
    results, output = tmp_path / "runs.jsonl", tmp_path / "accuracy.md"
    args = ["accuracy", "--datasets", "twitter", "--systems", "softmax,crf", "--seeds", "0", "--epochs", "3",
            "--corpus", str(tmp_path / "corpus"), "--results", str(results), "--output", str(output)]
    first = CliRunner().invoke(app, args)
    assert first.exit_code == 0, first.output
    rows = [json.loads(line) for line in results.read_text().splitlines()]
    assert sorted(r["spec"]["factory"] for r in rows) == ["crf_tagger", "tagger"]
    # held-out = training sentences, which a tagger fits: both systems tag them all right, far above the
    # most frequent tag's 6 of 18 tokens, and so do the CRF's two decoders and its emissions alone
    assert [r["acc"] for r in rows] == [100.0, 100.0]
    crf = next(r for r in rows if r["spec"]["factory"] == "crf_tagger")
    assert crf["acc_by_decoder"] == {"viterbi": 100.0, "posterior": 100.0} and crf["acc_emission_only"] > 100 * 6 / 18
    table = output.read_text()
    twitter = next(line for line in table.splitlines() if line.startswith("| twitter |"))
    assert [c.strip() for c in twitter.strip("|").split("|")][1:] == ["100.00", "100.00", "+0.00"]  # from the runs
    # the table's command names the corpus and the runs file it was made from, so that it re-reads them
    assert f"--corpus {tmp_path / 'corpus'}" in table and f"--results {results}" in table
    second = CliRunner().invoke(app, args)  # everything is in the runs file: nothing is trained again
    assert second.exit_code == 0, second.output
    assert len(results.read_text().splitlines()) == 2 and output.read_text() == table


def test_accuracy_table_differences_and_wins():
    rows = {"a": {"softmax": [90.0, 92.0], "crf": [92.0, 92.0], "nldm": [93.0, 93.0]},
            "b": {"softmax": [80.0], "crf": [79.0], "nldm": [81.0]}}
    lines = accuracy_table(rows, ["softmax", "crf", "nldm"])
    a = [c.strip() for c in lines[2].strip("|").split("|")]
    assert a == ["a", "91.00 ± 1.41", "92.00 ± 0.00", "93.00 ± 0.00", "+1.00", "+2.00", "+1.00"]
    average = [c.strip() for c in lines[4].strip("|").split("|")]
    assert average[1:4] == ["85.50", "85.50", "87.00"] and average[4:] == ["+0.00", "+1.50", "+1.50"]
    wins = [c.strip() for c in lines[5].strip("|").split("|")]
    assert wins[-3:] == ["1/2", "2/2", "2/2"]


def test_unknown_dataset_is_a_clear_error(tmp_path):
    result = CliRunner().invoke(app, ["accuracy", "--datasets", "xx", "--results", str(tmp_path / "r")])
    assert result.exit_code != 0 and "'xx'" in result.output and not (tmp_path / "r").exists()


def test_diagnosis_rows_give_every_run_their_change():
    """projects/paper/scripts/diagnose_accuracy.py: each run of a row (every dataset, seed and system) carries the
    row's config and tok2vec, not only the first one (a shared dict was once emptied by the first run's pop)."""
    import importlib.util
    path = ROOT / "projects" / "paper" / "scripts" / "diagnose_accuracy.py"
    spec = importlib.util.spec_from_file_location("diagnose_accuracy", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    for group in ("decode", "word_dropout"):
        by_row = {}
        for label, name, run in module.specs_for(group, ["twitter", "en"], [0, 1], "corpus"):
            by_row.setdefault((label, name), []).append(json.dumps(run.config, sort_keys=True))
        for (label, name), configs in by_row.items():
            assert len(configs) == 4 and len(set(configs)) == 1, (label, name, configs)
        assert any("max_dist" in c or "word_dropout" in c for cs in by_row.values() for c in cs)
    decode = module.specs_for("decode", ["twitter"], [0, 1], "corpus")
    assert all('"max_dist": 10' in json.dumps(r.config) for label, _, r in decode if label == "max_dist 10")
    wd = module.specs_for("word_dropout", ["twitter"], [0, 1], "corpus")
    assert sum(r.config["model"]["tok2vec"]["embed"]["word_dropout"] == 0.4 for _, _, r in wd if r.config) == 6


def test_every_recorded_run_is_found_again_under_its_key():
    """The plain loop's records (projects/paper/results/accuracy/*.jsonl, projects/paper/results/diagnosis/*.jsonl) keep their keys: each row's
    spec gives its stored key back, so no recorded run is redone (Twitter is ``twitter`` in the registry and ``tw``
    in the keys, patches of the study's scripts ``scripts.<module>``)."""
    from projects.paper.runs.loop import RunSpec

    results = ROOT / "projects" / "paper" / "results"
    files = sorted([*(results / "accuracy").glob("*.jsonl"), *(results / "diagnosis").glob("*.jsonl")])
    rows = [json.loads(line) for path in files for line in path.read_text(encoding="utf8").splitlines() if line.strip()]
    rows = [row for row in rows if "spec" in row and "key" in row]
    assert len(rows) > 500
    for row in rows:
        assert RunSpec(**row["spec"]).key() == row["key"], row["key"]
    tw = RunSpec(dataset="tw", system="s", factory="tagger")
    assert tw.dataset == "twitter" and tw.key() == RunSpec(dataset="twitter", system="s", factory="tagger").key()
    assert '"dataset": "tw"' in tw.key()


def test_the_committed_runs_of_the_defaults_are_found_by_their_02_signature():
    """The plain loop's runs of the factory defaults (projects/paper/results/accuracy/runs-defaults.jsonl) carry
    the signature of the defaults as 0.2 writes them (the 0.2 migration leaves a 0.2 config as it is): one run
    per dataset for each system."""
    from collections import Counter

    from thinc.api import Config

    from projects.paper.cli.accuracy import SYSTEMS, config_signature, default_config
    from projects.paper.scripts.migrate_runs_0_2 import VERSION, migrate_config

    path = ROOT / "projects" / "paper" / "results" / "accuracy" / "runs-defaults.jsonl"
    systems = Counter(json.loads(json.loads(line)["key"])["system"] for line in path.read_text().splitlines())
    for name, factory in SYSTEMS.items():
        config = Config({"components": {name: {"factory": factory, **default_config(factory)}}})
        migrate_config(config)
        settings = {key: value for key, value in config["components"][name].items() if key != "factory"}
        assert systems[f"{name} defaults {config_signature(settings, VERSION)}"] == 8, name
