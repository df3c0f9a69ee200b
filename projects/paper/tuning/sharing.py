"""Each system's study also tries the other systems' best settings (``tune --share best``).

A search of a few trials per system leaves each study in its own corner of the space: in the GloVe search
(projects/paper/results/diagnosis.md section 31) the CRF2's best settings, run by hand on the NLDM, tested 0.4 above the
NLDM's own best, which its study never sampled. Sharing is the same for every system: each study of a
dataset runs, once, the best complete trial of every other system's study of that dataset, proposed as

* the peer's value for every parameter this system searches and the peer has;
* for the others (say ``max_dist`` for the NLDM from a CRF, ``label_dim`` from softmax): this study's own best
  trial's value, else the base config's value (:meth:`Space.baseline`); a parameter none of them has is
  drawn by the sampler, as for any trial.

A proposal is skipped when this study already has a trial with exactly these values (e.g. two studies whose
samplers drew the same point). A shared trial is marked with the user attribute ``shared_from``
(``<study>#<trial>``); it is queued once per peer trial, so sharing again after the peers have moved on adds
only their new best trials. Shared trials run on top of ``--trials`` (see :func:`.study.run_study`), and to
the full budget: the pruner does not stop them. A median pruner compares a trial with the study's earlier
trials at the same step, and in the GloVe search every shared trial on SGD was stopped at step 200, where
SGD is still behind the Adam trials that made most of the median (SGD's best trials end ahead of them).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Dict, List, Mapping, Sequence, Tuple

from .space import Space, format_value

SHARED = "shared_from"


def best_trials(study_dir: Path, dataset: str, systems: Sequence[str]) -> Dict[str, Tuple[str, Dict[str, Any]]]:
    """``{system: ("<study>#<trial>", params)}``: the best complete trial of each existing study of ``dataset``
    in ``study_dir`` (studies named ``<dataset>-<system>``, one SQLite file each)."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    out: Dict[str, Tuple[str, Dict[str, Any]]] = {}
    for system in systems:
        name = f"{dataset}-{system}"
        db = Path(study_dir) / f"{name}.db"
        if not db.exists():
            continue
        try:
            study = optuna.load_study(study_name=name, storage=f"sqlite:///{db.resolve()}")
            best = study.best_trial
        except (KeyError, ValueError):  # no such study in the file, or no complete trial yet
            continue
        out[system] = (f"{name}#{best.number}", dict(best.params))
    return out


def proposal(space: Space, system: str, config: Mapping, component: str,
             sources: Sequence[Mapping[str, Any]]) -> Dict[str, Any]:
    """The values of the parameters searched for ``system``, each from the first of ``sources`` that has a
    valid value for it (parameters in file order; a conditional one only where its ``when`` holds)."""
    values: Dict[str, Any] = {}
    for p in space.for_system(system, config, component):
        if not p.applies_given(values):
            continue
        for source in sources:
            if p.name in source and p.contains(source[p.name]):
                values[p.name] = source[p.name]
                break
    return values


def share_best(study, space: Space, system: str, config: Mapping, component: str,
               peers: Mapping[str, Tuple[str, Dict[str, Any]]],
               echo: Callable[[str], None] = print) -> List[Dict[str, Any]]:
    """Queue in ``study`` the best trial of each peer (``peers`` as :func:`best_trials`, the study's own
    system left out) that it has not had yet; return the queued parameter sets."""
    trials = study.get_trials(deepcopy=False)
    shared = {t.user_attrs.get(SHARED) for t in trials}
    tried = [(f"tried as trial {t.number}", _params(t)) for t in trials if t.state.name != "FAIL"]
    own_best = _best_params(study)
    baseline = space.baseline(system, config, component)
    queued = []
    for peer, (tag, params) in sorted(peers.items()):
        if peer == system or tag in shared:
            continue
        values = proposal(space, system, config, component, [params, own_best, baseline])
        match = next((what for what, v in tried if v == values), None)
        if match is not None:
            echo(f"[tune {study.study_name}] {tag}'s settings: already {match}")
            continue
        study.enqueue_trial(values, user_attrs={SHARED: tag})
        tried.append((f"queued as {tag}'s", values))
        queued.append(values)
        echo(f"[tune {study.study_name}] queued {tag}'s settings: "
             + " ".join(f"{k}={format_value(v)}" for k, v in values.items()))
    return queued


def _params(trial) -> Dict[str, Any]:
    """A trial's parameter values; a queued trial's are its fixed parameters."""
    if trial.state.name == "WAITING":
        return dict(trial.system_attrs.get("fixed_params", {}))
    return dict(trial.params)


def _best_params(study) -> Dict[str, Any]:
    try:
        return dict(study.best_trial.params)
    except ValueError:
        return {}
