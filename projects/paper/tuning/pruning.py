"""A median pruner that compares a trial only with trials that took the same value of one parameter.

Optuna's ``MedianPruner`` stops a trial whose dev score at a step is below the median of the study's
completed trials at that step. When the space mixes optimisers that learn at different speeds this judges one
against the other: in the GloVe search (projects/paper/results/diagnosis.md section 32) SGD trials were still 2.7-7 points
(median) below their final dev score at step 200, Adam trials 0.2, so at step 200 the median was the Adam
trials' and most SGD trials were stopped, among them some on course to beat the study's best.
``MedianPrunerWithin("optimizer", ...)`` takes the median over the completed trials on the same optimiser, and
:func:`rejudge_pruned` queues again the trials an earlier, plainer pruner stopped that it would have kept.
"""
from __future__ import annotations

import statistics
from typing import List

import optuna
from optuna.trial import FrozenTrial, TrialState


class MedianPrunerWithin(optuna.pruners.BasePruner):
    """Prune when the trial's score at its last reported step is below the median, at that step, of the
    completed trials whose parameter ``param`` has the trial's value; not before ``n_warmup_steps`` nor
    before that group has ``n_startup_trials`` completed trials (maximised studies only)."""

    def __init__(self, param: str, n_startup_trials: int = 5, n_warmup_steps: int = 0):
        self.param = param
        self.n_startup_trials = n_startup_trials
        self.n_warmup_steps = n_warmup_steps

    def prune(self, study: optuna.Study, trial: FrozenTrial) -> bool:
        step = trial.last_step
        if step is None or step < self.n_warmup_steps or self.param not in trial.params:
            return False
        group = [t.intermediate_values[step] for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
                 if t.params.get(self.param) == trial.params[self.param] and step in t.intermediate_values]
        if len(group) < self.n_startup_trials:
            return False
        return trial.intermediate_values[step] < statistics.median(group)


#: user attribute of a pruned trial queued again: the number of the trial it repeats
REJUDGED = "rejudge_of"


def rejudge_pruned(study, pruner: optuna.pruners.BasePruner, echo=print) -> List[int]:
    """Queue again (same parameters) every pruned trial that ``pruner`` would have let go on at the step where
    it was stopped, judged against the study's completed trials as they are now; once per pruned trial.
    Returns the numbers of the trials queued again."""
    trials = study.get_trials(deepcopy=False)
    done = {t.user_attrs.get(REJUDGED) for t in trials}
    queued = []
    for t in trials:
        if t.state != TrialState.PRUNED or t.number in done or t.last_step is None:
            continue
        if pruner.prune(study, t):
            continue
        study.enqueue_trial(dict(t.params), user_attrs={REJUDGED: t.number})
        queued.append(t.number)
        echo(f"[tune {study.study_name}] trial {t.number} (pruned at step {t.last_step}, dev "
             f"{t.intermediate_values[t.last_step]:.2f}) passes the pruner now: queued again")
    return queued
