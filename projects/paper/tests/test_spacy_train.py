"""``python -m projects.paper spacy-train``: the configs it generates are spaCy's, its runs are kept and never
redone, the table says what the rows hold, and the committed runs are found by the configs of today."""
import json

import pytest
import spacy
from spacy.tokens import Doc, DocBin, Span
from spacy.training import Example
from typer.testing import CliRunner
from thinc.api import Config

from projects.paper.cli import app
from projects.paper.runs.spacy_train import (DATASETS, DEFAULT_RESULTS, HELD_OUT, Run, apply_overrides, dev_curve,
                                             entity_tables, generate_config, generate_entity_config, load_rows,
                                             machine_of, route_table, run_key, surface_forms, surface_scores)
from projects.paper.scripts.migrate_runs_0_2 import fill_later_settings, migrate_config


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
    config = apply_overrides(generate_config("nldm_tagger", "own", "en"), ["components.{c}.label_smoothing=0.1"], "nldm_tagger")
    assert config["components"]["nldm_tagger"]["label_smoothing"] == 0.1
    tagger = apply_overrides(generate_config("tagger", "own", "en"), ["components.{c}.label_smoothing=0.1"], "tagger")
    assert tagger["components"]["tagger"]["label_smoothing"] == 0.05
    ner = apply_overrides(generate_entity_config("ner", "own", "en", 100), ["components.{c}.moves=\"x\""], "ner")
    assert ner["components"]["ner"]["moves"] is None


def test_an_override_of_another_components_block_is_left_out():
    """One command sets each structured system its own value; the block of the other is not created."""
    settings = ["components.crf_ner.missing_entity_bias=6", "components.nldm_ner.missing_entity_bias=3"]
    for system, value in (("crf_ner", 6), ("nldm_ner", 3)):
        config = apply_overrides(generate_entity_config(system, "own", "en", 100), settings, system)
        assert config["components"][system]["missing_entity_bias"] == value
        assert set(config["components"]) == set(generate_entity_config(system, "own", "en", 100)["components"])


def test_the_entity_records_migrate_to_todays_config_and_key():
    """A record of a run made before ``temperature`` and ``missing_entity_bias`` came and ``average_params`` left
    takes today's config and key; a record whose config was not a generated one is refused."""
    from projects.paper.scripts.migrate_ner_configs import migrated

    today = generate_entity_config("crf_ner", "own", "en", 100)
    old = Config().from_str(today.to_str(), interpolate=False)
    block = old["components"]["crf_ner"]
    del block["temperature"], block["missing_entity_bias"]
    block["average_params"] = True
    row = {"key": "x", "dataset": "wnut17", "system": "crf_ner", "setting": "own", "seed": 0, "config": old.to_str()}
    moved = migrated(row)
    assert moved["key"] == run_key("wnut17", today.to_str(), 0)
    assert migrated(moved) == moved
    block["model"]["label_dim"] = 7  # a model the generated config does not build
    with pytest.raises(ValueError, match="not today's"):
        migrated({**row, "config": old.to_str()})


def test_average_params_is_part_of_a_runs_key_in_both_settings():
    """The setting trains something in both settings (own averages, or the optimizer's for a listener), so
    on and off are two runs."""
    for system in ("crf_tagger", "nldm_tagger"):
        for setting in ("own", "shared"):
            on = generate_config(system, setting, "en")
            assert on["components"][system]["average_params"] is True
            off = apply_overrides(generate_config(system, setting, "en"), ["components.{c}.average_params=false"], system)
            assert run_key("tb2", on.to_str(), 0) != run_key("tb2", off.to_str(), 0)


def test_overrides_on_every_system_reach_the_tagger_too():
    for system in ("tagger", "crf_tagger"):
        config = apply_overrides(generate_config(system, "own", "en"), ["training.optimizer.learn_rate=0.002"], system,
                        every_system=True)
        assert config["training"]["optimizer"]["learn_rate"] == 0.002


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
    args = ["spacy-train", "--datasets", "tw", "--systems", "crf_tagger", "--settings", "own",
            "--seeds", "0", "--max-steps", "2", "--corpus", str(tmp_path / "corpus"), "--jobs", "1",
            "--results", str(tmp_path / "runs.jsonl"), "--workdir", str(tmp_path / "work"),
            "--output", str(tmp_path / "table.md")]
    first = CliRunner().invoke(app, args)
    assert first.exit_code == 0, first.output
    rows = [json.loads(line) for line in (tmp_path / "runs.jsonl").read_text().splitlines()]
    assert len(rows) == 1 and rows[0]["system"] == "crf_tagger"
    run = Run("tw", "crf_tagger", "own", 0, rows[0]["config"])
    nlp = spacy.load(tmp_path / "work" / run.folder / "model" / "model-best")  # its test score, on the given tokens
    gold = list(DocBin().from_disk(tmp_path / "corpus" / "twitter" / "test.spacy").get_docs(nlp.vocab))
    examples = [Example(Doc(nlp.vocab, words=[t.text for t in d]), d) for d in gold]
    assert rows[0]["test_tag_acc"] == pytest.approx(100 * nlp.evaluate(examples)["tag_acc"])
    log = tmp_path / "work" / run.folder / "train.log"
    trained = log.stat().st_mtime_ns
    assert rows[0]["machine"].endswith("1 runs at a time")
    table = (tmp_path / "table.md").read_text()
    assert "### Setting `own`" in table and rows[0]["machine"] in table
    second = CliRunner().invoke(app, args)
    assert second.exit_code == 0, second.output
    assert len((tmp_path / "runs.jsonl").read_text().splitlines()) == 1 and log.stat().st_mtime_ns == trained
    assert run.key == rows[0]["key"]


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


def test_held_out_datasets_are_accepted_but_not_run_by_default(tmp_path):
    assert not set(HELD_OUT) & set(DATASETS)
    args = ["spacy-train", "--datasets", "it", "--systems", "crf_tagger", "--settings", "own",
            "--seeds", "0", "--corpus", str(tmp_path / "corpus"), "--results", str(tmp_path / "runs.jsonl"),
            "--dry-run"]
    res = CliRunner().invoke(app, args)
    assert res.exit_code != 0 and "heldout/it/train.spacy" in res.output  # the missing file
    assert "convert-heldout" in res.output  # and the step that writes it
    _tiny_corpus(tmp_path / "corpus", folder="heldout/it")
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    assert "it crf_tagger own seed 0" in res.output and not (tmp_path / "runs.jsonl").exists()  # listed, not run


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


#: the committed runs' datasets whose train split has an ARK "!" tag (spaCy's tagger gets another neg_prefix there)
BANG = {"tw": True, "en": False, "te": False}


@pytest.mark.parametrize("dataset", sorted(BANG))
@pytest.mark.parametrize("setting", ["own", "shared"])
def test_todays_default_configs_find_their_committed_runs(dataset, setting):
    """Seed 0 of every system has a committed run whose config is what the harness generates (through the
    0.2 migration, which leaves a config without removed settings as it is) and whose figure is that run's."""
    rows = load_rows(DEFAULT_RESULTS)
    lang = DATASETS[dataset][1]
    for system in ("tagger", "crf_tagger", "nldm_tagger"):
        config = generate_config(system, setting, lang, labels_with_bang=BANG[dataset])
        assert migrate_config(config) == []
        row = rows[run_key(dataset, config.to_str(), 0)]
        assert (row["dataset"], row["system"], row["seed"]) == (dataset, system, 0)
        if system != "tagger":
            assert setting == "own" or row["setting"] == "shared"


def test_the_migration_keeps_a_removed_setting_off_its_default_and_says_so():
    config = generate_config("nldm_tagger", "own", "en")
    migrate_config(config)
    block = config["components"]["nldm_tagger"]
    assert block["model"]["@architectures"].endswith(".v2")
    block["model"]["tie_directions"], block["token_loss"] = True, 0.0
    block["model"]["@architectures"] = "spacy-nldm.NLDMTagger.v1"
    assert migrate_config(config) == ["tie_directions=true"]
    assert block["model"]["tie_directions"] is True and "token_loss" not in block
    assert block["model"]["@architectures"] == "spacy-nldm.NLDMTagger.v2"


@pytest.mark.parametrize("setting, stands_for", [("own", (None, None, None)), ("shared", (0, None, None))])
def test_a_run_made_before_the_head_embeddings_gets_what_it_trained(setting, stands_for):
    """A record without average_params and the head embeddings trained neither: on the component's own encoder
    null says that (no head embeddings there); on a listener a null width adds embeddings, so the width is 0
    (what `--set components.{c}.model.embed_width=0` writes), and beside it null depth and mix train none."""
    config = generate_config("crf_tagger", setting, "en")
    block = config["components"]["crf_tagger"]
    for name in ("embed_width", "embed_depth", "embed_mix"):
        del block["model"][name]
    del block["average_params"]
    fill_later_settings(config)
    assert block["average_params"] is False
    assert tuple(block["model"][n] for n in ("embed_width", "embed_depth", "embed_mix")) == stands_for


# ---------------------------------------------------------------------------------------------- entities

def test_entity_configs_are_what_init_config_writes_with_the_budget():
    from spacy.cli.init_config import init_config

    for system in ("ner", "spancat"):
        ours = generate_entity_config(system, "own", "en", 1234)
        expected = init_config(lang="en", pipeline=[system])
        assert ours["training"].pop("max_steps") == 1234
        expected["training"].pop("max_steps")
        for split in ("train", "dev"):
            assert ours["corpora"][split].pop("gold_preproc") is True
            expected["corpora"][split].pop("gold_preproc")
        assert ours.to_str() == expected.to_str()
    budgets = [run_key("wnut17", generate_entity_config("ner", "own", "en", n).to_str(), 0) for n in (1000, 2000)]
    assert budgets[0] != budgets[1]  # the budget is part of a run's key


def test_vectors_setting_differs_from_own_only_in_the_static_vectors(tmp_path):
    own = generate_entity_config("ner", "own", "en", 100)
    vectors = generate_entity_config("ner", "vectors", "en", 100, vectors=tmp_path / "vectors")
    assert vectors["paths"]["vectors"] == str(tmp_path / "vectors")
    assert vectors["components"]["tok2vec"]["model"]["embed"]["include_static_vectors"] is True
    vectors["paths"]["vectors"] = None
    vectors["components"]["tok2vec"]["model"]["embed"]["include_static_vectors"] = False
    assert vectors.to_str() == own.to_str()


def test_spacy_ner_reads_the_incorrect_spans_where_a_dataset_has_them():
    import spacy

    from spacy_nldm.defaults import INCORRECT_SPANS_KEY

    for system in ("ner", "beam_ner", "crf_ner"):
        plain = generate_entity_config(system, "own", "en", 100)
        config = generate_entity_config(system, "own", "en", 100, incorrect_spans=True)
        if system == "crf_ner":  # ours always read them: the config is unchanged
            assert config.to_str() == plain.to_str()
            continue
        assert plain["components"][system]["incorrect_spans_key"] is None  # spaCy's default: none
        assert config["components"][system]["incorrect_spans_key"] == INCORRECT_SPANS_KEY
        config["components"][system]["incorrect_spans_key"] = None
        assert config.to_str() == plain.to_str()
        nlp = spacy.util.load_model_from_config(generate_entity_config(system, "own", "en", 100, incorrect_spans=True))
        assert nlp.get_pipe(system).incorrect_spans_key == INCORRECT_SPANS_KEY  # spaCy takes the setting


def test_trf_setting_puts_minilm_under_the_listeners():
    config = generate_entity_config("spancat", "trf", "en", 100)
    assert config["nlp"]["pipeline"] == ["transformer", "spancat"]
    assert config["components"]["transformer"]["model"]["name"] == {"@misc": "spacy-nldm.minilm_path.v1"}
    listener = config["components"]["spancat"]["model"]["tok2vec"]["@architectures"]
    assert listener == "spacy-transformers.TransformerListener.v1"


def test_surface_f1_counts_unique_surface_forms_and_their_types():
    nlp = spacy.blank("en")
    gold = Doc(nlp.vocab, words=["London", "and", "London", "and", "Paris", "Rome"],
               ents=["B-loc", "O", "B-loc", "O", "B-loc", "B-loc"])
    predicted = Doc(nlp.vocab, words=["London", "and", "London", "and", "Paris", "Rome"],
                    ents=["B-loc", "O", "O", "O", "B-person", "B-loc"])
    assert surface_forms([gold]) == {("London", "loc"), ("Paris", "loc"), ("Rome", "loc")}
    scores = surface_scores(surface_forms([gold]), surface_forms([predicted]))
    # predicted {London/loc, Paris/person, Rome/loc}: 2 of 3 right, 2 of the 3 gold forms found
    assert scores["surface_p"] == pytest.approx(200 / 3) and scores["surface_r"] == pytest.approx(200 / 3)
    assert scores["surface_f"] == pytest.approx(200 / 3)
    predicted.spans["sc"] = [Span(predicted, 0, 1, "loc"), Span(predicted, 2, 3, "loc"), Span(predicted, 0, 1, "org")]
    assert surface_forms([predicted], "sc") == {("London", "loc"), ("London", "org")}  # overlapping spans count


def test_dev_curve_reads_the_named_column(tmp_path):
    log = tmp_path / "train.log"
    log.write_text("E    #       LOSS TOK2VEC  LOSS NER  ENTS_F  ENTS_P  ENTS_R  SCORE \n"
                   "---  ------  ------------  --------  ------  ------  ------  ------\n"
                   "  0       0          0.00     50.92    0.00    0.00    0.00    0.00\n"
                   "  0     200         47.60   1904.69    3.59   28.57    1.91    0.04\n"
                   "  1     400        100.10   1500.00   10.50   30.00    6.36    0.11\n")
    assert dev_curve(log, "ENTS_F") == [(0, 0.0), (200, 3.59), (400, 10.5)]
    assert dev_curve(log, "ENTS_R")[-1] == (400, 6.36)
    with pytest.raises(ValueError, match="SPANS_SC_F"):
        dev_curve(log, "SPANS_SC_F")


def _tiny_entity_corpus(root):
    nlp = spacy.blank("en")
    sentences = [(["I", "met", "Anna", "in", "Paris"], ["O", "O", "B-person", "O", "B-location"]),
                 (["Anna", "Smith", "likes", "Rome"], ["B-person", "I-person", "O", "B-location"]),
                 (["we", "saw", "Paris", "today"], ["O", "O", "B-location", "O"])]
    docs = []
    for words, tags in sentences:
        doc = Doc(nlp.vocab, words=words, ents=tags)
        doc.spans["sc"] = list(doc.ents)
        docs.append(doc)
    for split in ("train", "dev", "test"):
        path = root / "ner" / "wnut17" / f"{split}.spacy"
        path.parent.mkdir(parents=True, exist_ok=True)
        DocBin(docs=docs, store_user_data=True).to_disk(path)
    return docs


@pytest.mark.parametrize("system", ["ner", "spancat"])
def test_entity_runs_record_what_spacy_evaluate_and_the_model_say(tmp_path, system):
    docs = _tiny_entity_corpus(tmp_path / "corpus")
    args = ["spacy-train", "--datasets", "wnut17", "--systems", system, "--settings", "own", "--seeds", "0",
            "--max-steps", "4", "--corpus", str(tmp_path / "corpus"), "--jobs", "1",
            "--results", str(tmp_path / "runs.jsonl"), "--workdir", str(tmp_path / "work"),
            "--output", str(tmp_path / "table.md")]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    (row,) = [json.loads(line) for line in (tmp_path / "runs.jsonl").read_text().splitlines()]
    assert (row["system"], row["setting"], row["max_steps"]) == (system, "own", 4)
    run = Run("wnut17", system, "own", 0, row["config"])
    nlp = spacy.load(tmp_path / "work" / run.folder / "model" / "model-best")
    examples = [Example(nlp(Doc(nlp.vocab, words=[t.text for t in d])), d) for d in docs]
    prefix = "ents" if system == "ner" else "spans_sc"
    scores = nlp.evaluate(examples)
    assert row["test_f"] == pytest.approx(100 * scores[f"{prefix}_f"])
    key = None if system == "ner" else "sc"
    assert row["surface_f"] == pytest.approx(surface_scores(surface_forms(docs), surface_forms(
        [e.predicted for e in examples], key))["surface_f"])
    assert [step for step, _ in row["dev_curve"]][0] == 0 and row["train_seconds"] > 0
    table = (tmp_path / "table.md").read_text()
    assert f"{system} F1" in table and "| wnut17 | own |" in table
    again = CliRunner().invoke(app, args)
    assert again.exit_code == 0 and len((tmp_path / "runs.jsonl").read_text().splitlines()) == 1


def test_entity_and_tagging_datasets_are_not_mixed(tmp_path):
    res = CliRunner().invoke(app, ["spacy-train", "--datasets", "tw,wnut17", "--dry-run",
                                   "--corpus", str(tmp_path)])
    assert res.exit_code != 0 and "separately" in res.output
    _tiny_entity_corpus(tmp_path)
    res = CliRunner().invoke(app, ["spacy-train", "--datasets", "wnut17", "--systems", "tagger", "--dry-run",
                                   "--corpus", str(tmp_path)])
    assert res.exit_code != 0 and "'tagger'" in res.output


def test_entity_table_has_encoder_rows_and_differences_to_ner():
    row = lambda f, secs=120.0: {"test_f": f, "test_p": f + 10, "test_r": f - 5, "surface_f": f - 2,  # noqa: E731
                                 "train_seconds": secs, "dev_curve": [[0, 0.0], [400, f / 2], [800, f]],
                                 "test_per_type": {"person": f + 1, "location": f - 1}}
    cells = {("wnut17", "own", "ner"): [row(20), row(22)], ("wnut17", "own", "spancat"): [row(18)],
             ("wnut17", "vectors", "ner"): [row(30)]}
    lines = entity_tables(cells, ["wnut17"], ["own", "vectors"], ["ner", "spancat"])
    assert lines[0] == "| dataset | encoder | ner F1 | spancat F1 | spancat − ner |"
    assert lines[2] == "| wnut17 | own | 21.00 ± 1.41 (n=2) | 18.00 (n=1) | -3.00 |"
    assert lines[3] == "| wnut17 | vectors | 30.00 (n=1) | — | — |"
    assert "| wnut17 | own | 31.00 / 16.00 / 19.00 / 2.0 | 28.00 / 13.00 / 16.00 / 2.0 |" in lines
    assert "| dataset | encoder | system | location | person |" in lines
    assert "| wnut17 | own | ner | 20.0 | 22.0 |" in lines
    assert "| dataset | encoder | system | 400 | 800 |" in lines
    assert "| wnut17 | own | ner | 10.5 | 21.0 |" in lines and "| wnut17 | vectors | ner | 15.0 | 30.0 |" in lines


@pytest.mark.parametrize("gpu_id", [-1, 0])
def test_gpu_id_reaches_spacy_train_and_spacy_evaluate(tmp_path, monkeypatch, gpu_id):
    from projects.paper.runs import spacy_train as harness
    from projects.paper.runs.queue import RunFailed, evaluate_command, train_command

    seen = {}

    def train(config, output, overrides, log, **kwargs):
        seen["train"] = train_command(config, output, overrides)
        return 1.0, 1.0

    def evaluate(model, data, log, gpu_id=-1, **kwargs):
        seen["evaluate"] = evaluate_command(model, data, tmp_path / "scores.json", gpu_id)
        raise RunFailed("stopped after building the commands")

    monkeypatch.setattr(harness, "spacy_train", train)
    monkeypatch.setattr(harness, "spacy_evaluate", evaluate)
    config = generate_entity_config("crf_ner", "own", "en", 10).to_str()
    for run, call in [(Run("wnut17", "crf_ner", "own", 0, config),
                       lambda run: harness.execute_entities(run, tmp_path, tmp_path / "work", "here", gpu_id)),
                      (Run("tw", "crf_tagger", "own", 0, generate_config("crf_tagger", "own", "en").to_str()),
                       lambda run: harness.execute(run, tmp_path, tmp_path / "work", 10, "here", gpu_id))]:
        seen.clear()
        with pytest.raises(RunFailed):
            call(run)
        for command in seen.values():
            assert ("--gpu-id" in command) == (gpu_id >= 0 or command is seen["evaluate"])
            if "--gpu-id" in command:
                assert command[command.index("--gpu-id") + 1] == str(gpu_id)
