"""``bench spacy-train``: the configs it generates are spaCy's, its runs are kept and never redone, the table
says what the rows hold."""
import json

import pytest
import spacy
from spacy.tokens import Doc, DocBin
from typer.testing import CliRunner

from spacy_nldm.cli import app
from spacy_nldm.cli.bench_spacy_train import Run, _apply, generate_config, machine_of, route_table, run_key


def test_own_setting_is_what_init_config_writes():
    from spacy.cli.init_config import init_config

    ours = generate_config("nldm_tagger", "own", "en")
    expected = init_config(lang="en", pipeline=["nldm_tagger"])
    for split in ("train", "dev"):
        assert ours["corpora"][split].pop("gold_preproc") is True
        expected["corpora"][split].pop("gold_preproc")
    assert ours.to_str() == expected.to_str()


def test_shared_setting_listens_to_the_taggers_tok2vec():
    config = generate_config("crf_tagger", "shared", "en")
    tagger = generate_config("tagger", "own", "en")
    assert config["nlp"]["pipeline"] == ["tok2vec", "crf_tagger"]
    assert config["components"]["tok2vec"] == tagger["components"]["tok2vec"]
    assert config["components"]["crf_tagger"]["model"]["tok2vec"]["@architectures"] == "spacy.Tok2VecListener.v1"
    assert config["training"]["score_weights"]["tag_acc"] == 1.0
    nlp = spacy.util.load_model_from_config(config, auto_fill=True)  # a valid pipeline
    assert nlp.pipe_names == ["tok2vec", "crf_tagger"]


def test_tagger_keeps_labels_starting_with_a_bang_only_where_needed():
    assert generate_config("tagger", "own", "en")["components"]["tagger"]["neg_prefix"] == "!"
    assert generate_config("tagger", "own", "en", labels_with_bang=True)["components"]["tagger"]["neg_prefix"] != "!"


def test_overrides_reach_the_structured_component_only():
    config = _apply(generate_config("nldm_tagger", "own", "en"), ["components.{c}.label_smoothing=0.1"], "nldm_tagger")
    assert config["components"]["nldm_tagger"]["label_smoothing"] == 0.1
    tagger = _apply(generate_config("tagger", "own", "en"), ["components.{c}.label_smoothing=0.1"], "tagger")
    assert tagger["components"]["tagger"]["label_smoothing"] == 0.05


def test_average_params_is_part_of_a_runs_key_in_both_settings():
    """The setting trains something in both settings (own averages, or the optimizer's for a listener), so
    on and off are two runs; off is the key of the runs recorded before it existed."""
    for system in ("crf_tagger", "nldm_tagger"):
        for setting in ("own", "shared"):
            on = generate_config(system, setting, "en")
            assert on["components"][system]["average_params"] is True
            off = _apply(generate_config(system, setting, "en"), ["components.{c}.average_params=false"], system)
            assert run_key("tb2", on.to_str(), 0) != run_key("tb2", off.to_str(), 0)
            del off["components"][system]["average_params"]  # a config from before the setting existed
            assert run_key("tb2", off.to_str(), 0) == run_key(
                "tb2", _apply(generate_config(system, setting, "en"), ["components.{c}.average_params=false"],
                              system).to_str(), 0)


def test_overrides_on_every_system_reach_the_tagger_too():
    for system in ("tagger", "crf_tagger"):
        config = _apply(generate_config(system, "own", "en"), ["training.optimizer.learn_rate=0.002"], system,
                        every_system=True)
        assert config["training"]["optimizer"]["learn_rate"] == 0.002


def test_settings_added_at_their_neutral_value_keep_a_runs_key():
    """A run recorded before token_loss and hidden_width existed is found again by the config that states them
    at the value that trains the same; any other value is another run."""
    config = generate_config("nldm_tagger", "own", "en")
    block = config["components"]["nldm_tagger"]
    block.pop("token_loss"), block["model"].pop("hidden_width")
    recorded = run_key("tw", config.to_str(), 0)
    block["token_loss"], block["model"]["hidden_width"] = 0.0, 0
    assert run_key("tw", config.to_str(), 0) == recorded
    block["model"]["hidden_width"] = 64
    assert run_key("tw", config.to_str(), 0) != recorded
    block["model"]["hidden_width"], block["token_loss"] = 0, 0.5
    assert run_key("tw", config.to_str(), 0) != recorded


def test_table_means_differences_and_average():
    rows = lambda accs: [{"test_tag_acc": a, "train_seconds": 10.0} for a in accs]  # noqa: E731
    cells = {("a", "tagger"): rows([90, 92]), ("a", "crf_tagger"): rows([92, 92]), ("a", "nldm_tagger"): rows([93, 93]),
             ("b", "tagger"): rows([80]), ("b", "crf_tagger"): rows([79]), ("b", "nldm_tagger"): rows([82])}
    lines = route_table(cells, ["a", "b"], ["tagger", "crf_tagger", "nldm_tagger"])
    assert lines[2] == "| a | 91.00 ± 1.41 (n=2) | 92.00 ± 0.00 (n=2) | 93.00 ± 0.00 (n=2) | +1.00 | +2.00 | +1.00 | 10 | 10 | 10 |"
    average = next(line for line in lines if "average (2)" in line)
    assert "| 85.50 | 85.50 | 87.50 | +0.00 | +2.00 | +2.00 |" in average
    assert "| 1/2 | 2/2 | 2/2 |" in lines[-1]


def _tiny_corpus(root, folder="twitter"):
    nlp = spacy.blank("en")
    words = [["I", "love", "it", "!"], ["you", "are", "so", "funny"], ["we", "like", "this", "song"]]
    tags = [["O", "V", "O", ","], ["O", "V", "R", "A"], ["O", "V", "D", "N"]]
    docs = [Doc(nlp.vocab, words=w, tags=t) for w, t in zip(words, tags)]
    for split in ("train", "dev", "test"):
        path = root / folder / f"{split}.spacy"
        path.parent.mkdir(parents=True, exist_ok=True)
        DocBin(docs=docs).to_disk(path)


def test_runs_are_kept_and_not_redone(tmp_path):
    _tiny_corpus(tmp_path / "corpus")
    args = ["bench", "spacy-train", "--datasets", "tw", "--systems", "crf_tagger", "--settings", "own",
            "--seeds", "0", "--max-steps", "2", "--corpus", str(tmp_path / "corpus"), "--jobs", "1",
            "--results", str(tmp_path / "runs.jsonl"), "--workdir", str(tmp_path / "work"),
            "--output", str(tmp_path / "table.md")]
    first = CliRunner().invoke(app, args)
    assert first.exit_code == 0, first.output
    rows = [json.loads(line) for line in (tmp_path / "runs.jsonl").read_text().splitlines()]
    assert len(rows) == 1 and 0 <= rows[0]["test_tag_acc"] <= 100 and rows[0]["system"] == "crf_tagger"
    assert rows[0]["machine"].endswith("1 runs at a time")
    table = (tmp_path / "table.md").read_text()
    assert "### Setting `own`" in table and rows[0]["machine"] in table
    second = CliRunner().invoke(app, args)
    assert second.exit_code == 0 and "0 runs to do" in second.output
    assert len((tmp_path / "runs.jsonl").read_text().splitlines()) == 1
    assert Run("tw", "crf_tagger", "own", 0, rows[0]["config"]).key == rows[0]["key"]


def test_dev_curves_read_spacy_train_logs(tmp_path):
    """projects/paper/scripts/spacy_train_curves.py: the dev accuracy column of each system's log rows."""
    from projects.paper.scripts.spacy_train_curves import dev_curve, gain_since

    tagger = tmp_path / "tagger.log"
    tagger.write_text("E    #  LOSS TOK2VEC  LOSS TAGGER  TAG_ACC  POS_ACC  SCORE\n---\n"
                      "  0       0    0.00   83.54   17.36    0.00    0.17\n"
                      "  0     400  267.40 3674.65   87.03    0.00    0.87\n"
                      "  1    1000   80.56  828.98   88.11    0.00    0.88\n"
                      "  2    1400   29.53  363.84   88.34    0.00    0.88\n")
    ours = tmp_path / "crf.log"
    ours.write_text("  0       0    2.83   18.77    0.19\n  1     400  130.75   87.43    0.87\n"
                    "  2    1000   75.73   88.44    0.88\n  3    1400   68.30   88.32    0.88\n")
    assert dev_curve(tagger, "tagger") == [(0, 17.36), (400, 87.03), (1000, 88.11), (1400, 88.34)]
    assert dev_curve(ours, "crf_tagger")[-1] == (1400, 88.32)
    assert gain_since(dev_curve(tagger, "tagger"), 1000) == pytest.approx(0.23)
    assert gain_since(dev_curve(ours, "crf_tagger"), 400) == pytest.approx(0.89)


def test_null_head_embeddings_have_the_key_of_the_values_they_stand_for():
    """embed_width / embed_depth left at null train what 0 trains on the component's own encoder and what
    defaults.LISTENER_EMBED_* train on a listener: the runs keys say so, and the two settings differ."""
    from spacy_nldm.pipeline import defaults

    for setting, stands_for in (("own", (0, 0)), ("shared", (defaults.LISTENER_EMBED_WIDTH,
                                                              defaults.LISTENER_EMBED_DEPTH))):
        config = generate_config("crf_tagger", setting, "en")
        model = config["components"]["crf_tagger"]["model"]
        assert (model["embed_width"], model["embed_depth"]) == (None, None)
        default = run_key("tw", config.to_str(), 0)
        model["embed_width"], model["embed_depth"] = stands_for
        assert run_key("tw", config.to_str(), 0) == default
        model["embed_width"], model["embed_depth"] = stands_for[0] + 8, stands_for[1]
        assert run_key("tw", config.to_str(), 0) != default


def test_a_null_embed_mix_has_the_key_of_the_value_it_stands_for():
    """embed_mix left at null trains what false trains on the component's own encoder (the key of the runs
    recorded before the setting existed) and what true trains on a listener; the two values differ there."""
    for setting, stands_for in (("own", False), ("shared", True)):
        config = generate_config("nldm_tagger", setting, "en")
        model = config["components"]["nldm_tagger"]["model"]
        assert model["embed_mix"] is None
        default = run_key("tw", config.to_str(), 0)
        model["embed_mix"] = stands_for
        assert run_key("tw", config.to_str(), 0) == default
        if setting == "own":
            del model["embed_mix"]
            assert run_key("tw", config.to_str(), 0) == default
        else:
            model["embed_mix"] = False
            assert run_key("tw", config.to_str(), 0) != default


def test_the_head_embeddings_tables_are_part_of_a_runs_key(monkeypatch):
    """The head's own hash tables come from defaults.OWN_ATTRS / OWN_ROWS, which no config states: a run
    recorded with today's tables keeps its key, and other tables give a listener's default config another key
    (the component's own encoder, which has no head embeddings, keeps its key)."""
    from spacy_nldm.pipeline import defaults

    keys = {setting: run_key("tw", generate_config("crf_tagger", setting, "en").to_str(), 0)
            for setting in ("own", "shared")}
    monkeypatch.setattr(defaults, "OWN_ROWS", tuple(2 * r for r in defaults.OWN_ROWS))
    assert run_key("tw", generate_config("crf_tagger", "shared", "en").to_str(), 0) != keys["shared"]
    own = generate_config("crf_tagger", "own", "en")
    own["components"]["crf_tagger"]["model"]["tok2vec"]["embed"]["rows"] = [10000, 2000, 5000, 5000]
    assert run_key("tw", own.to_str(), 0) == keys["own"]


def test_held_out_datasets_are_accepted_but_not_run_by_default(tmp_path):
    from spacy_nldm.cli.bench_spacy_train import DATASETS, HELD_OUT

    assert not set(HELD_OUT) & set(DATASETS)
    args = ["bench", "spacy-train", "--datasets", "it", "--systems", "crf_tagger", "--settings", "own",
            "--seeds", "0", "--corpus", str(tmp_path / "corpus"), "--results", str(tmp_path / "runs.jsonl"),
            "--dry-run"]
    res = CliRunner().invoke(app, args)
    assert res.exit_code != 0 and "heldout/it/train.spacy: no such corpus file" in res.output
    assert "convert-heldout" in res.output
    _tiny_corpus(tmp_path / "corpus", folder="heldout/it")
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    assert "1 runs to do" in res.output and "it crf_tagger own seed 0" in res.output


def test_training_seconds_come_from_one_machine():
    """Runs made on another machine (or under another load of the same one) count in the accuracy, and only
    the timing machine's runs in the seconds."""
    here = "2 CPUs, x86_64, Python 3.11.7, torch 2.13.0+cpu"
    row = lambda acc, secs, machine: {"test_tag_acc": acc, "train_seconds": secs, "machine": machine}  # noqa: E731
    assert machine_of(row(0, 0, here + ", 2 runs at a time")) == here
    assert machine_of(row(0, 0, here + " (runs at a time not recorded)")) == here
    cells = {("a", "tagger"): [row(90, 100.0, here + ", 2 runs at a time"), row(92, 60.0, "16 CPUs, 16 runs at a time")],
             ("a", "crf_tagger"): [row(91, 300.0, here + " (runs at a time not recorded)"), row(93, 200.0, "16 CPUs")]}
    timed = route_table(cells, ["a"], ["tagger", "crf_tagger"], timing_machine=here)
    assert timed[2] == "| a | 91.00 ± 1.41 (n=2) | 92.00 ± 1.41 (n=2) | +1.00 | 100 | 300 |"
    assert route_table(cells, ["a"], ["tagger", "crf_tagger"])[2].endswith("| 80 | 250 |")
