"""One Optuna study per (dataset, system), in its own SQLite file, resumable.

* A finished trial (complete or pruned) is never run again: rerunning tops the study up to ``n_trials``.
* A trial left running by a process that is gone (killed, machine restarted) is marked failed and queued again
  with the same parameters; so is a trial interrupted with Ctrl-C.
* The study stores its settings (base config, data, budget, space); resuming with other settings is refused, so
  that every trial of a study is measured the same way.
* The first trial of a new study is the base config's own values (see :meth:`Space.baseline`).
* With sharing (:mod:`.sharing`), the other systems' best trials are queued and run on top of ``n_trials``.
* When done, the best trial's config is written as a full config (``projects/paper/configs/tuned/<dataset>-<system>.cfg``).
"""
from __future__ import annotations

import hashlib
import json
import os
import shlex
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence

from thinc.api import Config

from .pruning import REJUDGED
from .sharing import SHARED
from .space import Space, format_value
from .trial import CONSOLE_LOGGER, SPACY_TRAIN, build_command, pid_alive, run_training, training_env

FINISHED = ("COMPLETE", "PRUNED")


class TuneError(RuntimeError):
    """A study that cannot go on (the message says why and what to do)."""


@dataclass
class StudySpec:
    """Everything one study needs; the fields in :meth:`settings` must match when a study is resumed."""

    dataset: str
    system: str
    config: Path
    train: Path
    dev: Path
    lang: str = "en"
    steps: int = 320
    eval_frequency: int = 40
    seed: int = 0
    threads: int = 1
    gpu_id: int = -1
    metric: str = "tag_acc"
    study_dir: Path = Path("training/tune")

    @property
    def name(self) -> str:
        return f"{self.dataset}-{self.system}"

    @property
    def storage(self) -> str:
        return f"sqlite:///{(self.study_dir / f'{self.name}.db').resolve()}"

    @property
    def trials_dir(self) -> Path:
        return self.study_dir / self.name


def base_config(path: Path) -> Config:
    """The system's config, not interpolated (so that ``${paths.train}`` stays a reference)."""
    if not Path(path).exists():
        raise TuneError(f"config not found: {path}")
    return Config().from_disk(path, interpolate=False)


def tagging_component(config: Config, path: Path) -> str:
    """The component that is tuned: the last entry of ``[nlp] pipeline``."""
    pipeline = config.get("nlp", {}).get("pipeline") or []
    if not pipeline:
        raise TuneError(f"{path}: [nlp] pipeline is empty")
    return pipeline[-1]


def settings(spec: StudySpec, config: Config, space: Space) -> Dict[str, Any]:
    """What a study is measured with (stored in the study; compared on resume)."""
    canon = config.to_str()
    return {
        "dataset": spec.dataset, "system": spec.system, "config": str(spec.config),
        "config_sha1": hashlib.sha1(canon.encode("utf8")).hexdigest()[:12],
        "train": str(spec.train), "dev": str(spec.dev), "lang": spec.lang,
        "steps": spec.steps, "eval_frequency": spec.eval_frequency, "seed": spec.seed, "metric": spec.metric,
        "space_sha1": hashlib.sha1(space.fingerprint().encode("utf8")).hexdigest()[:12],
    }


def fixed_overrides(spec: StudySpec) -> Dict[str, Any]:
    """The overrides every trial of a study shares: data, language, seed, budget, the console logger."""
    return {
        "paths.train": str(spec.train),
        "paths.dev": str(spec.dev),
        "nlp.lang": spec.lang,
        "system.seed": spec.seed,
        "training.max_steps": spec.steps,
        "training.max_epochs": 0,
        "training.eval_frequency": spec.eval_frequency,
        "training.patience": 0,  # the same budget for every trial; the pruner stops the bad ones
        "training.logger": CONSOLE_LOGGER,
    }


def check_spec(spec: StudySpec, config: Config) -> None:
    """Clear errors for a spec that cannot give a score."""
    for what, path in (("train", spec.train), ("dev", spec.dev)):
        if not Path(path).exists():
            raise TuneError(f"{spec.name}: {what} data not found: {path} (run `spacy project run corpora`, then `spacy project run ud-corpora projects/paper`?)")
    if spec.steps < 1 or spec.eval_frequency < 1:
        raise TuneError(f"{spec.name}: steps and eval_frequency must be >= 1")
    if spec.steps < spec.eval_frequency:
        raise TuneError(f"{spec.name}: steps ({spec.steps}) < eval_frequency ({spec.eval_frequency}): "
                        "a trial would never be scored")
    weights = config.get("training", {}).get("score_weights", {})
    if weights.get(spec.metric) is None:
        raise TuneError(f"{spec.config}: [training.score_weights] gives no weight to {spec.metric}, so spaCy "
                        f"does not print it during training")


def open_study(spec: StudySpec, space: Space, pruner=None, sampler_seed: Optional[int] = None):
    """Create or load the study, check its settings, and queue the baseline and any interrupted trials."""
    import optuna

    config = base_config(spec.config)
    component = tagging_component(config, spec.config)
    space.check_against(spec.system, config, component, str(spec.config))
    check_spec(spec, config)
    spec.study_dir.mkdir(parents=True, exist_ok=True)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    # a new sampler seed per session: a resumed study must not replay the first session's random proposals
    storage = optuna.storages.RDBStorage(spec.storage)
    n_before = _n_trials(storage, spec.name)
    sampler = optuna.samplers.TPESampler(seed=(spec.seed if sampler_seed is None else sampler_seed) + n_before)
    study = optuna.create_study(storage=storage, study_name=spec.name, direction="maximize", sampler=sampler,
                                pruner=pruner if pruner is not None else optuna.pruners.NopPruner(),
                                load_if_exists=True)
    wanted = settings(spec, config, space)
    stored = study.user_attrs.get("settings")
    if stored is None:
        study.set_user_attr("settings", wanted)
        study.set_user_attr("space", json.loads(space.fingerprint()))
    elif stored != wanted:
        diff = {k: (stored.get(k), wanted.get(k)) for k in wanted if stored.get(k) != wanted.get(k)}
        raise TuneError(
            f"study {spec.name} ({spec.storage}) was run with other settings: "
            + "; ".join(f"{k}: {a} then, {b} now" for k, (a, b) in diff.items())
            + ". Resume with the same settings, or move the .db file away to start a new study."
        )
    requeue_interrupted(study)
    if not any(t.user_attrs.get("baseline") and t.state.name != "FAIL" for t in study.get_trials(deepcopy=False)):
        # the base config's own values: queued until it has run once (a failed baseline is queued again)
        study.enqueue_trial(space.baseline(spec.system, config, component), user_attrs={"baseline": True})
    return study, config, component


def _n_trials(storage, name: str) -> int:
    try:
        study_id = storage.get_study_id_from_name(name)
    except KeyError:
        return 0
    return len(storage.get_all_trials(study_id, deepcopy=False))


def requeue_interrupted(study, echo: Callable[[str], None] = print) -> List[int]:
    """Mark trials left running by a dead process as failed and queue them again with the same parameters."""
    from optuna.trial import TrialState

    host = socket.gethostname()
    requeued = []
    for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        owner = t.user_attrs.get("owner") or {}
        if owner.get("host") == host and owner.get("pid") and pid_alive(int(owner["pid"])):
            continue  # another tuner process is running it now
        if owner.get("host") not in (None, host):
            continue  # owned by another machine: cannot tell; leave it
        study.tell(t.number, state=TrialState.FAIL)
        _retry(study, t.number, t.params, t.user_attrs)
        echo(f"[tune {study.study_name}] trial {t.number} was interrupted: queued again with the same parameters")
        requeued.append(t.number)
    return requeued


def _retry(study, number: int, params: Dict[str, Any], user_attrs: Dict[str, Any]) -> None:
    """Queue an interrupted trial again (same parameters; a baseline trial stays the baseline)."""
    attrs: Dict[str, Any] = {"retry_of": number}
    for kept in ("baseline", SHARED, REJUDGED):  # a retried baseline stays the baseline, and so on
        if user_attrs.get(kept) is not None:
            attrs[kept] = user_attrs[kept]
    study.enqueue_trial(dict(params), user_attrs=attrs)


def count_states(study) -> Dict[str, int]:
    counts: Dict[str, int] = {}
    for t in study.get_trials(deepcopy=False):
        counts[t.state.name] = counts.get(t.state.name, 0) + 1
    return counts


def run_study(spec: StudySpec, space: Space, n_trials: int, *, pruner=None, max_failures: int = 3,
              train_command: Sequence[str] = SPACY_TRAIN, echo: Callable[[str], None] = print,
              sampler_seed: Optional[int] = None):
    """Run trials until ``n_trials`` have finished (complete or pruned) and no shared or re-judged trial is queued
    (those run on top of ``n_trials``: :mod:`.sharing`, :func:`.pruning.rejudge_pruned`); return the study."""
    from optuna.trial import TrialState

    study, config, component = open_study(spec, space, pruner, sampler_seed)
    done = sum(1 for t in study.get_trials(deepcopy=False) if t.state.name in FINISHED and not _on_top(t))
    searched = ", ".join(p.name for p in space.for_system(spec.system, config, component))
    extra = queued_on_top(study)
    echo(f"[tune {spec.name}] {done}/{n_trials} trials finished before this run"
         + (f", {extra} shared or re-judged trials queued on top" if extra else "")
         + f"; {spec.steps} steps each, dev {spec.metric} every {spec.eval_frequency}; searching: {searched}")
    failures = 0
    while done < n_trials or queued_on_top(study):
        trial = study.ask()
        trial.set_user_attr("owner", {"host": socket.gethostname(), "pid": os.getpid()})
        values = space.sample(trial, spec.system, config, component)
        overrides = space.overrides(values, component)
        trial.set_user_attr("overrides", overrides)
        cmd = build_command(spec.config, {**fixed_overrides(spec), **overrides}, gpu_id=spec.gpu_id,
                            train_command=train_command)
        trial.set_user_attr("command", shlex.join(cmd))
        log_path = spec.trials_dir / f"trial{trial.number}.log"

        shared = _marked(trial, SHARED)  # another search's best: never pruned (see .sharing)
        own = not _on_top(trial)  # counts towards n_trials
        label = f"{done + 1}/{n_trials}" if own else ("shared" if shared else "re-judged")

        def on_score(step: int, score: float) -> bool:
            trial.report(score, step)
            return not shared and trial.should_prune()

        try:
            run = run_training(cmd, log_path=log_path, metric=spec.metric, on_score=on_score,
                               env=training_env(spec.threads))
        except KeyboardInterrupt:
            trial.set_user_attr("interrupted", True)
            study.tell(trial, state=TrialState.FAIL)
            _retry(study, trial.number, trial.params, trial.user_attrs)
            echo(f"[tune {spec.name}] interrupted: trial {trial.number} will be run again on resume")
            raise
        trial.set_user_attr("seconds", round(run.seconds, 1))
        trial.set_user_attr("returncode", run.returncode)
        trial.set_user_attr("pid", run.pid)
        trial.set_user_attr("log", str(log_path))
        if run.stopped:
            trial.set_user_attr("killed", True)
            trial.set_user_attr("best_dev", run.best)
            study.tell(trial, state=TrialState.PRUNED)
            done += own
            step, score = run.scores[-1]
            echo(_line(spec, study, trial.number, label,
                       f"PRUNED at step {step} (dev {score:.2f})", run.seconds, values))
            continue
        if run.returncode != 0 or run.best is None:
            why = (f"exit status {run.returncode}" if run.returncode != 0 else
                   f"no {spec.metric} column in spaCy's table" if run.metric_missing else "no dev score printed")
            trial.set_user_attr("error", why)
            study.tell(trial, state=TrialState.FAIL)
            failures += 1
            echo(f"[tune {spec.name}] trial {trial.number} FAILED ({why}); log: {log_path}")
            if failures >= max_failures:
                raise TuneError(f"{spec.name}: {failures} trials failed in this run; last log: {log_path}")
            continue
        study.tell(trial, run.best)
        done += own
        echo(_line(spec, study, trial.number, label, f"dev {run.best:.2f}", run.seconds, values))
    return study


def _line(spec: StudySpec, study, number: int, label: str, what: str, seconds: float,
          values: Dict[str, Any]) -> str:
    try:
        best = f"best {study.best_value:.2f} (#{study.best_trial.number})"
    except ValueError:
        best = "no complete trial yet"
    params = " ".join(f"{k}={format_value(v)}" for k, v in values.items())
    return (f"[tune {spec.name}] {label} trial {number}: {what}, {seconds:.0f} s; {best} | {params}")


def write_best_config(study, spec: StudySpec, output: Path, command: str = "") -> Optional[Path]:
    """Write the best trial's full config (the base config with the trial's overrides, the dataset's paths and
    language). The training budget stays the base config's: the tuning budget was only for comparing trials."""
    try:
        best = study.best_trial
    except ValueError:
        return None
    overrides = {"paths.train": str(spec.train), "paths.dev": str(spec.dev), "nlp.lang": spec.lang,
                 **best.user_attrs.get("overrides", {})}
    config = Config().from_str(base_config(spec.config).to_str(), interpolate=False, overrides=overrides)
    counts = count_states(study)
    origin = f", the settings of {best.user_attrs[SHARED]}" if _marked(best, SHARED) else ""
    header = [
        f"# Tuned on dev: {spec.system} on {spec.dataset}, the best of "
        f"{sum(counts.get(s, 0) for s in FINISHED)} trials (study {spec.name}, trial {best.number}{origin}; "
        f"{counts.get('PRUNED', 0)} pruned, {n_finished(study, SHARED)} shared from other systems' studies).",
        f"# Base config {spec.config}; dev {spec.metric} {best.value:.2f} after at most {spec.steps} steps "
        f"(dev scored every {spec.eval_frequency}), seed {spec.seed}.",
        "# Parameters: " + ", ".join(f"{k}={format_value(v)}" for k, v in best.params.items()),
    ]
    if command:
        header.append(f"# Written by: {command}")
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text("\n".join(header) + "\n" + config.to_str() + "\n", encoding="utf8")
    return output


def _marked(trial, mark: str) -> bool:
    """Whether a trial carries ``mark`` (:data:`.sharing.SHARED` or :data:`.pruning.REJUDGED`)."""
    return trial.user_attrs.get(mark) is not None


def _on_top(trial) -> bool:
    """Whether a trial runs on top of ``n_trials`` (shared or re-judged)."""
    return _marked(trial, SHARED) or _marked(trial, REJUDGED)


def queued_on_top(study) -> int:
    """Queued trials that run on top of ``n_trials``: another system's best (:mod:`.sharing`) or a pruned trial
    queued again (:func:`.pruning.rejudge_pruned`)."""
    return sum(1 for t in study.get_trials(deepcopy=False) if t.state.name == "WAITING" and _on_top(t))


def n_finished(study, mark: str) -> int:
    """Finished trials that carry ``mark``: SHARED (another system's best settings, :mod:`.sharing`) or
    REJUDGED (a pruned trial run again, :func:`.pruning.rejudge_pruned`)."""
    return sum(1 for t in study.get_trials(deepcopy=False) if t.state.name in FINISHED and _marked(t, mark))


def summary(study) -> Dict[str, Any]:
    """The study in numbers, for the report."""
    counts = count_states(study)
    out: Dict[str, Any] = {
        "name": study.study_name,
        "settings": study.user_attrs.get("settings", {}),
        "finished": sum(counts.get(s, 0) for s in FINISHED),
        "complete": counts.get("COMPLETE", 0),
        "pruned": counts.get("PRUNED", 0),
        "failed": counts.get("FAIL", 0),
        "shared": n_finished(study, SHARED),
        "rejudged": n_finished(study, REJUDGED),
        "best_shared_from": None,
        "best_value": None, "best_params": {}, "best_number": None, "baseline_value": None,
        "minutes": round(sum(t.user_attrs.get("seconds", 0) for t in study.get_trials(deepcopy=False)) / 60, 1),
    }
    try:
        best = study.best_trial
        out.update(best_value=best.value, best_params=best.params, best_number=best.number,
                   best_shared_from=best.user_attrs.get(SHARED))
    except ValueError:
        pass
    for t in study.get_trials(deepcopy=False):
        if t.user_attrs.get("baseline") and t.state.name == "COMPLETE":
            out["baseline_value"] = t.value
    return out
