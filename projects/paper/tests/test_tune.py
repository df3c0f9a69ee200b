"""python -m projects.paper tune: search space, resumable studies, pruning (with a stand-in trainer), and one real
end-to-end search of two `spacy train` trials on a few tweets (tests/fixtures/tune_twitter.txt)."""
from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest

optuna = pytest.importorskip("optuna")

from projects.paper.tuning.space import SpaceError, fold_overrides, get_path, load_space, parse_space  # noqa: E402
from projects.paper.tuning.study import StudySpec, TuneError, open_study, run_study  # noqa: E402
from projects.paper.tuning.trial import ProgressTable, pid_alive  # noqa: E402

from nldm_fixtures import ROOT  # noqa: E402
STUDY_CONFIGS = ROOT / "projects" / "paper" / "configs"
FIXTURES = ROOT / "tests" / "fixtures"
FAKE_TRAIN = (sys.executable, str(FIXTURES / "tune_fake_train.py"))
DROPOUT_SPACE = {"parameters": {"dropout": {"type": "float", "low": 0.0, "high": 0.5, "set": "training.dropout"}}}


def fake_score(dropout: float, step: int) -> float:
    """The stand-in trainer's dev score (tests/fixtures/tune_fake_train.py), rounded as printed."""
    return round(90.0 - 40.0 * abs(dropout - 0.25) - 20.0 / (1 + step), 2)


@pytest.fixture
def spec(tmp_path) -> StudySpec:
    for name in ("train.spacy", "dev.spacy"):
        (tmp_path / name).write_bytes(b"")  # the stand-in trainer does not read them
    return StudySpec(dataset="tiny", system="softmax", config=ROOT / "configs" / "softmax.cfg",
                     train=tmp_path / "train.spacy", dev=tmp_path / "dev.spacy", steps=4, eval_frequency=2,
                     study_dir=tmp_path / "studies")


@pytest.fixture
def launches(tmp_path, monkeypatch) -> Path:
    path = tmp_path / "launches.jsonl"
    monkeypatch.setenv("TUNE_FAKE_LAUNCHES", str(path))
    return path


def read_launches(path: Path):
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def load(spec: StudySpec):
    return optuna.load_study(study_name=spec.name, storage=spec.storage)


# ---------------------------------------------------------------- search space


def test_shipped_space_fits_the_four_configs_and_starts_from_their_values():
    from thinc.api import Config

    space = load_space(STUDY_CONFIGS / "tuned" / "space.yml")
    for system in ("softmax", "crf1", "crf2", "nldm"):
        config = Config().from_disk(ROOT / "configs" / f"{system}.cfg", interpolate=False)
        component = config["nlp"]["pipeline"][-1]
        space.check_against(system, config, component, system)  # every path it sets exists
        names = [p.name for p in space.for_system(system, config, component)]
        assert {"optimizer", "adam_learn_rate", "sgd_learn_rate", "dropout", "hidden_size"} <= set(names)
        assert ("max_dist" in names) == (system == "nldm")
        # trial 0 (the baseline) reproduces the config: its overrides set the values the config already has
        base = space.baseline(system, config, component)
        assert {"dropout", "hidden_size"} <= set(base) and not {"adam_learn_rate", "sgd_learn_rate"} <= set(base)
        for path, value in space.overrides(base, component).items():
            assert get_path(config, path) == value or (
                isinstance(value, dict) and all(get_path(config, f"{path}.{k}") == v for k, v in value.items())), path


def test_sgd_choice_replaces_the_optimizer_block_and_keeps_its_learning_rate():
    space = load_space(STUDY_CONFIGS / "tuned" / "space.yml")
    out = space.overrides({"optimizer": "sgd", "sgd_learn_rate": 0.3, "hidden_size": 200}, "nldm")
    assert out["training.optimizer"]["@optimizers"] == "SGD.v1"
    assert out["training.optimizer"]["learn_rate"] == 0.3  # folded into the block, not lost behind it
    assert "training.optimizer.learn_rate" not in out
    assert out["components.nldm.model.tok2vec.embed.width"] == 400
    assert out["components.nldm.model.tok2vec.encode.width"] == 400
    adam = space.overrides({"optimizer": "adam", "adam_learn_rate": 0.001}, "tagger")
    assert adam == {"training.optimizer.learn_rate": 0.001}
    assert fold_overrides([("a.b", {"c": 1}), ("a.b.d.e", 2)]) == {"a.b": {"c": 1, "d": {"e": 2}}}


def test_a_base_config_on_sgd_at_another_rate_starts_from_sgd_at_that_rate():
    """The SGD choice's block says learn_rate 0.1, but the learning rate is a parameter of its own: a config
    on SGD at 0.03 is the SGD choice at 0.03 (it was read as Adam, so trial 0 was not the base config)."""
    from thinc.api import Config

    space = load_space(STUDY_CONFIGS / "tuned" / "space.yml")
    sgd = space.params[0].set_by_choice["sgd"]["training.optimizer"]
    for rate in (0.03, 0.1, 0.3):
        config = Config().from_disk(ROOT / "configs" / "crf1.cfg", interpolate=False)
        config["training"]["optimizer"] = {**sgd, "learn_rate": rate}
        base = space.baseline("crf1", config, "crf")
        assert base["optimizer"] == "sgd" and base["sgd_learn_rate"] == rate and "adam_learn_rate" not in base
        assert space.overrides(base, "crf")["training.optimizer"] == config["training"]["optimizer"]
    config["training"]["optimizer"] = {**sgd, "learn_rate": 0.3, "grad_clip": 1.0}  # another SGD: not the choice
    assert space.baseline("crf1", config, "crf")["optimizer"] == "adam"


@pytest.mark.parametrize("params, message", [
    ({"x": {"type": "float", "low": 1, "high": 0, "set": "a.b"}}, "must be below"),
    ({"x": {"type": "gauss", "set": "a.b"}}, "`type` must be one of"),
    ({"x": {"type": "float", "low": 0, "high": 1}}, "needs `set:`"),
    ({"x": {"choices": [1, 2], "set": "a.b", "colour": 1}}, "unknown key(s) colour"),
    ({"x": {"choices": [1], "set": "a.b", "when": {"y": 1}}}, "refers to 'y'"),
    ({"x": {"type": "float", "low": 0, "high": 1, "log": True, "set": "a.b"}}, "low > 0"),
    ({"x": {"choices": ["a"], "set_by_choice": {"b": {"c.d": 1}}}}, "not one of the choices"),
])
def test_bad_spaces_are_refused_with_the_reason(params, message):
    with pytest.raises(SpaceError) as err:
        parse_space({"parameters": params}, "space.yml")
    assert message in str(err.value) and "space.yml: parameter 'x'" in str(err.value)


def test_a_path_missing_from_the_config_is_refused_before_any_trial(spec, launches):
    space = parse_space({"parameters": {"k": {"type": "int", "low": 2, "high": 4,
                                              "set": "components.{component}.model.max_dist"}}}, "space.yml")
    with pytest.raises(SpaceError, match="sets 'components.tagger.model.max_dist', which .*softmax.cfg does not"):
        run_study(spec, space, 1, train_command=FAKE_TRAIN, echo=lambda m: None)
    assert read_launches(launches) == []


def test_progress_table_reads_the_metric_column_of_spacy_rows():
    table = ProgressTable("tag_acc")
    lines = ["ℹ Pipeline: ['transformer', 'nldm']",
             "E    #       LOSS TRANS...  LOSS NLDM  TAG_ACC  SCORE ",
             "---  ------  -------------  ---------  -------  ------",
             "  0       0          12.00     480.18    40.97    0.41",
             "  3     200         100.50     300.00    85.12    0.85",
             "✔ Saved pipeline to output directory"]
    assert [table.feed(line) for line in lines] == [None, None, None, (0, 0, 40.97), (3, 200, 85.12), None]


# ---------------------------------------------------------------- studies (stand-in trainer)


def test_resumed_study_does_not_rerun_finished_trials(spec, launches):
    space = parse_space(DROPOUT_SPACE)
    lines = []
    run_study(spec, space, 2, train_command=FAKE_TRAIN, echo=lines.append)
    assert len(read_launches(launches)) == 2 and lines  # it logs what it runs
    trials = load(spec).trials
    assert [t.state.name for t in trials] == ["COMPLETE", "COMPLETE"]
    # trial 0 is the base config's own value (dropout 0.2), scored as the trainer printed it
    assert trials[0].user_attrs["baseline"] and trials[0].params == {"dropout": 0.2}
    assert trials[0].value == fake_score(0.2, 4)

    run_study(spec, space, 2, train_command=FAKE_TRAIN, echo=lines.append)  # already done: nothing runs
    assert len(read_launches(launches)) == 2 and len(load(spec).trials) == 2

    run_study(spec, space, 3, train_command=FAKE_TRAIN, echo=lines.append)  # one more
    assert len(read_launches(launches)) == 3
    assert [t.state.name for t in load(spec).trials] == ["COMPLETE"] * 3


def test_trial_left_running_by_a_dead_process_is_rerun_with_the_same_parameters(spec, launches):
    space = parse_space(DROPOUT_SPACE)
    study, _, _ = open_study(spec, space)
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    import socket

    crashed = study.ask()  # the queued baseline trial, as a tuner that was killed mid-trial leaves it
    crashed.set_user_attr("owner", {"host": socket.gethostname(), "pid": dead.pid})
    crashed.suggest_float("dropout", 0.0, 0.5)
    assert not pid_alive(dead.pid)

    run_study(spec, space, 1, train_command=FAKE_TRAIN, echo=lambda m: None)
    trials = load(spec).trials
    assert [t.state.name for t in trials] == ["FAIL", "COMPLETE"]
    assert trials[1].params == trials[0].params == {"dropout": 0.2}
    assert trials[1].user_attrs["retry_of"] == 0 and trials[1].user_attrs["baseline"]
    assert [ln["overrides"]["training.dropout"] for ln in read_launches(launches)] == ["0.2"]


def test_ctrl_c_during_a_trial_queues_it_again(spec, launches, monkeypatch):
    from projects.paper.tuning import study as study_module

    space = parse_space(DROPOUT_SPACE)

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(study_module, "run_training", interrupted)
    with pytest.raises(KeyboardInterrupt):
        run_study(spec, space, 2, train_command=FAKE_TRAIN, echo=lambda m: None)
    monkeypatch.undo()
    monkeypatch.setenv("TUNE_FAKE_LAUNCHES", str(launches))
    run_study(spec, space, 2, train_command=FAKE_TRAIN, echo=lambda m: None)
    trials = load(spec).trials
    assert [t.state.name for t in trials] == ["FAIL", "COMPLETE", "COMPLETE"]
    assert trials[0].user_attrs["interrupted"] and trials[1].params == trials[0].params


def test_pruned_trial_subprocess_is_killed(spec, launches, monkeypatch):
    # the stand-in sleeps 60 s after each row: only a kill ends it before its 3 evaluations
    monkeypatch.setenv("TUNE_FAKE_SLEEP", "60")
    pruner = optuna.pruners.ThresholdPruner(lower=101.0)  # an accuracy in % is always below: prune at once
    run_study(spec, parse_space(DROPOUT_SPACE), 1, pruner=pruner, train_command=FAKE_TRAIN,
              echo=lambda m: None)
    (trial,) = load(spec).trials
    assert trial.state.name == "PRUNED" and trial.user_attrs["killed"]
    assert trial.intermediate_values == {0: fake_score(0.2, 0)}  # one evaluation, then killed
    assert trial.user_attrs["returncode"] == -signal.SIGTERM
    (launch,) = read_launches(launches)
    assert launch["pid"] == trial.user_attrs["pid"] and not pid_alive(launch["pid"])


def test_failing_trials_stop_the_study_with_the_log(spec, launches, monkeypatch):
    monkeypatch.setenv("TUNE_FAKE_FAIL", "1")
    with pytest.raises(TuneError, match="2 trials failed in this run; last log: .*trial1.log"):
        run_study(spec, parse_space(DROPOUT_SPACE), 3, max_failures=2, train_command=FAKE_TRAIN,
                  echo=lambda m: None)
    trials = load(spec).trials
    assert [t.state.name for t in trials] == ["FAIL", "FAIL"] and "exit status 3" in trials[0].user_attrs["error"]
    monkeypatch.delenv("TUNE_FAKE_FAIL")
    run_study(spec, parse_space(DROPOUT_SPACE), 1, train_command=FAKE_TRAIN, echo=lambda m: None)
    last = load(spec).trials[-1]  # the failed baseline is queued again by the next run
    assert last.state.name == "COMPLETE" and last.user_attrs["baseline"] and last.params == {"dropout": 0.2}


def test_resuming_with_another_budget_is_refused(spec, launches):
    run_study(spec, parse_space(DROPOUT_SPACE), 1, train_command=FAKE_TRAIN, echo=lambda m: None)
    spec.steps = 6
    with pytest.raises(TuneError, match="steps: 4 then, 6 now"):
        run_study(spec, parse_space(DROPOUT_SPACE), 2, train_command=FAKE_TRAIN, echo=lambda m: None)


def test_missing_data_is_a_clear_error(spec):
    spec.dev = spec.dev.parent / "nope.spacy"
    with pytest.raises(TuneError, match="dev data not found: .*nope.spacy"):
        run_study(spec, parse_space(DROPOUT_SPACE), 1, train_command=FAKE_TRAIN, echo=lambda m: None)


# ---------------------------------------------------------------- end to end: real spacy train, CLI


def test_cli_end_to_end_writes_a_trainable_tuned_config_and_the_table(tmp_path):
    from spacy.tokens import DocBin
    from typer.testing import CliRunner

    import spacy
    from projects.paper.cli import app
    from spacy_nldm.corpora.ark import ark_to_docs

    nlp = spacy.blank("en")
    docs, _ = ark_to_docs([FIXTURES / "tune_twitter.txt"], nlp.vocab)
    data = tmp_path / "corpus" / "tiny"
    data.mkdir(parents=True)
    DocBin(docs=docs[:30]).to_disk(data / "train.spacy")
    DocBin(docs=docs[30:]).to_disk(data / "dev.spacy")
    space = tmp_path / "space.yml"
    space.write_text(json.dumps({"parameters": {  # JSON is YAML
        "dropout": {"type": "float", "low": 0.0, "high": 0.5, "set": "training.dropout"},
        "hidden_size": {"choices": [8, 16], "scale": 2, "set": ["components.{component}.model.tok2vec.embed.width",
                                                                "components.{component}.model.tok2vec.encode.width"]},
    }}))
    args = ["tune", "--datasets", "tiny", "--systems", "softmax", "--trials", "2", "--steps", "2",
            "--eval-frequency", "1", "--space", str(space), "--configs", str(ROOT / "configs"),
            "--corpus", str(tmp_path / "corpus"), "--study-dir", str(tmp_path / "studies"),
            "--tuned-dir", str(tmp_path / "tuned"), "--table", str(tmp_path / "tuning.md"), "--pruner", "none"]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output

    tuned = tmp_path / "tuned" / "tiny-softmax.cfg"
    table = (tmp_path / "tuning.md").read_text()
    assert "| tiny | softmax |" in table and "| hidden_size | one of {8, 16} |" in table
    study = optuna.load_study(study_name="tiny-softmax", storage=f"sqlite:///{tmp_path / 'studies' / 'tiny-softmax.db'}")
    assert [t.state.name for t in study.trials] == ["COMPLETE"] * 2
    best = study.best_trial
    # each row names the config its trials started from (--configs/<system>.cfg)
    assert f"| tiny | softmax | `{ROOT / 'configs' / 'softmax.cfg'}` | {best.value:.2f} |" in table

    # the tuned config is a full config that spacy train accepts: the best trial's values, the dataset's paths
    from spacy.training.initialize import init_nlp
    from spacy.util import load_config

    config = load_config(tuned, interpolate=False)
    assert config["training"]["dropout"] == best.params["dropout"]
    assert config["components"]["tagger"]["model"]["tok2vec"]["encode"]["width"] == 2 * best.params["hidden_size"]
    assert config["paths"]["train"] == str(data / "train.spacy")
    trained = init_nlp(load_config(tuned, interpolate=True))
    assert trained.pipe_names == ["tagger"] and len(trained.get_pipe("tagger").labels) > 5

    res = CliRunner().invoke(app, args)  # resumed: nothing left to do, no trial run again
    assert res.exit_code == 0, res.output
    assert len(optuna.load_study(study_name="tiny-softmax", storage=f"sqlite:///{tmp_path / 'studies' / 'tiny-softmax.db'}").trials) == 2


# ---------------------------------------------------------------- sharing the best trials between systems


def test_a_shared_proposal_takes_the_peers_values_and_fills_the_rest_from_the_study():
    from thinc.api import Config

    from projects.paper.tuning.sharing import proposal

    space = load_space(STUDY_CONFIGS / "glove_bilstm" / "space.yml")
    config = Config().from_disk(STUDY_CONFIGS / "glove_bilstm" / "nldm.cfg", interpolate=False)
    # a softmax trial: no label_dim or max_dist, and a D_h this space does not have
    peer = {"optimizer": "sgd", "sgd_learn_rate": 0.3, "dropout": 0.1, "word_dropout": 0.2, "embed_width": 100,
            "hidden_size": 300}
    own = {"optimizer": "adam", "adam_learn_rate": 0.001, "normalize_loss": True, "dropout": 0.3,
           "word_dropout": 0.5, "embed_width": 200, "hidden_size": 200, "label_dim": 50, "max_dist": 4}
    values = proposal(space, "nldm", config, "nldm", [peer, own, space.baseline("nldm", config, "nldm")])
    # sgd_summed_loss: neither the peer, the study's best (Adam) nor the base config (Adam) has it: drawn later
    assert values == {**peer, "hidden_size": 200, "label_dim": 50, "max_dist": 4}
    assert "normalize_loss" not in values and "adam_learn_rate" not in values  # Adam's, not under SGD


def test_each_study_runs_the_other_systems_best_trial_once_on_top_of_its_trials(spec, launches):
    import dataclasses

    from projects.paper.tuning.report import load_summaries, render
    from projects.paper.tuning.sharing import SHARED, best_trials, share_best
    from projects.paper.tuning.study import write_best_config

    space = parse_space(DROPOUT_SPACE)
    quiet = lambda m: None  # noqa: E731
    peer = dataclasses.replace(spec, system="crf1", config=ROOT / "configs" / "crf1.cfg")
    peer_study, _, _ = open_study(peer, space)
    peer_study.enqueue_trial({"dropout": 0.25})  # the stand-in trainer's best value: the peer's best trial
    run_study(peer, space, 2, train_command=FAKE_TRAIN, echo=quiet)
    run_study(spec, space, 2, train_command=FAKE_TRAIN, echo=quiet)
    assert 0.25 not in [t.params["dropout"] for t in load(spec).trials]

    peers = best_trials(spec.study_dir, spec.dataset, ["softmax", "crf1", "crf2"])  # no crf2 study: left out
    assert peers == {"softmax": (f"tiny-softmax#{load(spec).best_trial.number}", load(spec).best_trial.params),
                     "crf1": ("tiny-crf1#1", {"dropout": 0.25})}
    study, config, component = open_study(spec, space)
    assert share_best(study, space, "softmax", config, component, peers, echo=quiet) == [{"dropout": 0.25}]
    assert share_best(study, space, "softmax", config, component, peers, echo=quiet) == []  # queued once

    n_launches = len(read_launches(launches))
    prune_all = optuna.pruners.ThresholdPruner(lower=101.0)  # would stop any other trial at its first score
    run_study(spec, space, 2, pruner=prune_all, train_command=FAKE_TRAIN, echo=quiet)  # only the shared runs
    assert [ln["overrides"]["training.dropout"] for ln in read_launches(launches)[n_launches:]] == ["0.25"]
    trials = load(spec).trials
    assert [t.state.name for t in trials] == ["COMPLETE"] * 3
    assert trials[2].user_attrs[SHARED] == "tiny-crf1#1" and load(spec).best_trial.number == 2

    # sharing again: crf1's best is already shared; the softmax's best is now crf1's own trial 1: not queued
    peers = best_trials(spec.study_dir, spec.dataset, ["softmax", "crf1"])
    study, config, component = open_study(spec, space)
    assert share_best(study, space, "softmax", config, component, peers, echo=quiet) == []
    msgs = []
    peer_study, config, component = open_study(peer, space)
    assert share_best(peer_study, space, "crf1", config, component, peers, echo=msgs.append) == []
    assert len(msgs) == 1 and "tiny-softmax#2" in msgs[0]  # the log names the trial it did not queue

    # two peers whose best trials are the same point: queued once, for the first of them
    twins = {"crf1": ("tiny-crf1#7", {"dropout": 0.4}), "crf2": ("tiny-crf2#3", {"dropout": 0.4})}
    msgs = []
    study, config, component = open_study(spec, space)
    assert share_best(study, space, "softmax", config, component, twins, echo=msgs.append) == [{"dropout": 0.4}]
    assert "tiny-crf2#3" in msgs[1] and "tiny-crf1#7" in msgs[1]  # the twin not queued, and the one queued

    out = write_best_config(load(spec), spec, spec.study_dir / "best.cfg")
    assert "tiny-crf1#1" in out.read_text()  # the best config names the peer's trial its settings came from
    table = render(load_summaries(spec.study_dir))
    assert "| tiny | softmax | " in table and " | 2 + 1 shared | 0 | 0 | 4 (2) | " in table
    assert " | 2 (tiny-crf1#1's) | dropout=0.25 |" in table

    # a shared trial queued while the study is short of --trials does not count towards them
    n_launches = len(read_launches(launches))
    run_study(spec, space, 3, train_command=FAKE_TRAIN, echo=quiet)  # the twins' point, then one own trial
    assert len(read_launches(launches)) == n_launches + 2
    assert [t.user_attrs.get(SHARED) for t in load(spec).trials[3:]] == ["tiny-crf1#7", None]


def test_an_unknown_share_mode_is_refused():
    from typer.testing import CliRunner

    from projects.paper.cli import app

    res = CliRunner().invoke(app, ["tune", "--share", "all"])
    assert res.exit_code != 0 and "'all'" in res.output


def test_the_median_within_an_optimizer_judges_a_slow_starter_by_its_own_kind():
    from projects.paper.tuning.pruning import MedianPrunerWithin

    def study_with(pruner):
        study = optuna.create_study(direction="maximize", pruner=pruner)
        for optimizer, scores in (("adam", [88.0, 89.0, 90.0]), ("sgd", [80.0, 81.0, 82.0])):
            for score in scores:  # completed trials: dev at step 200, then their final score
                study.enqueue_trial({"optimizer": optimizer})
                trial = study.ask()
                trial.suggest_categorical("optimizer", ["adam", "sgd"])
                trial.report(score, 200)
                study.tell(trial, score + 1)
        return study

    def judged(study, optimizer, score, step=200):
        study.enqueue_trial({"optimizer": optimizer})
        trial = study.ask()
        trial.suggest_categorical("optimizer", ["adam", "sgd"])
        trial.report(score, step)
        return trial.should_prune()

    plain = study_with(optuna.pruners.MedianPruner(n_startup_trials=3))
    assert judged(plain, "sgd", 81.5)  # below the median of all six (85): stopped
    within = study_with(MedianPrunerWithin("optimizer", n_startup_trials=3, n_warmup_steps=100))
    assert not judged(within, "sgd", 81.5)  # above SGD's median (81)
    assert judged(within, "sgd", 80.5) and judged(within, "adam", 88.5) and not judged(within, "adam", 89.5)
    assert not judged(within, "sgd", 10.0, step=50)  # before the warmup
    few = study_with(MedianPrunerWithin("optimizer", n_startup_trials=4))
    assert not judged(few, "sgd", 10.0)  # 3 completed SGD trials < 4: not judged yet


def test_pruned_trials_the_fairer_pruner_would_keep_are_queued_again_once():
    from projects.paper.tuning.pruning import REJUDGED, MedianPrunerWithin, rejudge_pruned
    from projects.paper.tuning.study import queued_on_top

    study = optuna.create_study(direction="maximize")
    for optimizer, score, state in (("adam", 88.0, "C"), ("adam", 89.0, "C"), ("adam", 90.0, "C"),
                                    ("sgd", 80.0, "C"), ("sgd", 82.0, "C"), ("sgd", 81.5, "P"), ("sgd", 79.0, "P"),
                                    ("adam", 88.5, "P")):
        study.enqueue_trial({"optimizer": optimizer, "dropout": score / 1000})
        trial = study.ask()
        trial.suggest_categorical("optimizer", ["adam", "sgd"])
        trial.suggest_float("dropout", 0.0, 0.5)
        trial.report(score, 200)
        study.tell(trial, score + 1 if state == "C" else None,
                   state=optuna.trial.TrialState.COMPLETE if state == "C" else optuna.trial.TrialState.PRUNED)
    fairer = MedianPrunerWithin("optimizer", n_startup_trials=2)
    # trial 5 (SGD, 81.5 > SGD's median 81) passes now; trial 6 (79.0) and trial 7 (Adam, 88.5 < 89) do not
    assert rejudge_pruned(study, fairer, echo=lambda m: None) == [5]
    assert queued_on_top(study) == 1
    again = study.ask()
    assert again.user_attrs[REJUDGED] == 5
    assert again.suggest_float("dropout", 0.0, 0.5) == study.trials[5].params["dropout"]
    assert rejudge_pruned(study, fairer, echo=lambda m: None) == []  # once per pruned trial
