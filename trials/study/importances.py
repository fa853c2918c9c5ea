"""Parameter importances of a job's completed trials (Optuna's fANOVA), keyed by parameterId."""

from __future__ import annotations

import warnings
from collections.abc import Collection

import optuna
from optuna.trial import TrialState

from trials.study.space import parameter_id_of


def param_importances(study: optuna.Study, *, metric_index: int = 0, maximize: bool = False,
                      leave_out: Collection[int] = ()) -> dict[str, float]:
    """Importance of each parameter for one metric, over the COMPLETE trials not in ``leave_out``.

    Args:
        study: the job's Optuna study (read only).
        metric_index: which of the study's values.
        maximize: that metric's goal (the evaluator assumes lower is better: the sign is flipped).
        leave_out: trial numbers (Optuna's, from 0) whose value is not a result (stopped early).

    Returns:
        ``{parameterId: importance}``, summing the Optuna names one parameterId may have
        (``id#2`` for a conditional branch, ``id:reverse_log``); empty when no parameter is shared.
    """
    kept = [t for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
            if t.number not in leave_out]
    view = optuna.create_study(directions=study.directions)  # in memory, params and values only
    view.add_trials([optuna.trial.create_trial(params=t.params, distributions=t.distributions, values=t.values)
                     for t in kept])
    sign = -1.0 if maximize else 1.0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        raw = optuna.importance.get_param_importances(
            view, evaluator=optuna.importance.FanovaImportanceEvaluator(seed=0),
            target=lambda t: sign * t.values[metric_index])
    out: dict[str, float] = {}
    for name, value in raw.items():
        pid = parameter_id_of(name)
        out[pid] = out.get(pid, 0.0) + float(value)
    return out
