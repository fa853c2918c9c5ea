"""Parameter importances of a job's completed trials (Optuna's fANOVA), keyed by parameterId."""

from __future__ import annotations

import functools
import warnings
from collections.abc import Collection, Mapping, Sequence
from typing import Any

import optuna
from optuna.distributions import BaseDistribution, json_to_distribution

from trials.study.space import parameter_id_of


def param_importances(trials: Sequence[Any], *, directions: Sequence[bool], metric_index: int = 0,
                      leave_out: Collection[int] = ()) -> dict[str, float]:
    """Importance of each parameter for one metric, over the COMPLETE trials not in ``leave_out``.

    Args:
        trials: the job's trials (Optuna's ``FrozenTrial`` or the journal's ``StoredTrial``, whose
            distributions are Optuna's JSON), read only.
        directions: per metric, whether it is maximized.
        metric_index: which of the trials' values.
        leave_out: trial numbers (Optuna's, from 0) whose value is not a result (stopped early).

    Returns:
        ``{parameterId: importance}``, summing the Optuna names one parameterId may have
        (``id#2`` for a conditional branch, ``id:reverse_log``); empty when no parameter is shared.
    """
    kept = [t for t in trials if t.state.name == "COMPLETE" and t.number not in leave_out]
    view = optuna.create_study(directions=["maximize" if m else "minimize" for m in directions])  # in memory
    view.add_trials([optuna.trial.create_trial(params=t.params, distributions=_distributions(t.distributions),
                                               values=t.values) for t in kept])
    maximize = directions[metric_index]
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


@functools.lru_cache(maxsize=256)
def _from_json(text: str) -> BaseDistribution:
    return json_to_distribution(text)


def _distributions(d: Mapping[str, Any]) -> dict[str, BaseDistribution]:
    return {k: _from_json(v) if isinstance(v, str) else v for k, v in d.items()}
