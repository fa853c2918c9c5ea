"""Parameter importances of a job's completed trials (Optuna's fANOVA), keyed by parameterId."""

from __future__ import annotations

import functools
import random
import warnings
from collections.abc import Collection, Mapping, Sequence
from typing import Any

import optuna
from optuna.distributions import BaseDistribution, json_to_distribution

from trials.study.space import parameter_id_of

# Optuna's fANOVA defaults (64 trees, depth 64) cost ~1 ms of pure Python per tree and trial here
# (a 1,000-trial report spent 30 s of its 64 in them): the report's forest is smaller, on a sample
MAX_TRIALS = 200  # more completed trials than this: a random sample of them (seeded: the same each time)
N_TREES = 16
MAX_DEPTH = 8


def param_importances(trials: Sequence[Any], *, directions: Sequence[bool], metric_index: int = 0,
                      leave_out: Collection[int] = (),
                      max_trials: int = MAX_TRIALS) -> tuple[dict[str, float], int, int]:
    """Importance of each parameter for one metric, over the COMPLETE trials not in ``leave_out``
    (at most ``max_trials`` of them, a seeded random sample: see ``sample``), by fANOVA with
    ``N_TREES`` trees of depth at most ``MAX_DEPTH``.

    Args:
        trials: the job's trials (Optuna's ``FrozenTrial`` or the journal's ``StoredTrial``, whose
            distributions are Optuna's JSON), read only.
        directions: per metric, whether it is maximized.
        metric_index: which of the trials' values.
        leave_out: trial numbers (Optuna's, from 0) whose value is not a result (stopped early).

    Returns:
        ``{parameterId: importance}``, summing the Optuna names one parameterId may have
        (``id#2`` for a conditional branch, ``id:reverse_log``), empty when no parameter is shared;
        the number of trials it is computed over, and of those it could have been.
    """
    complete = [t for t in trials if t.state.name == "COMPLETE" and t.number not in leave_out]
    kept = sample(complete, max_trials)
    optuna.logging.set_verbosity(optuna.logging.WARNING)  # no "A new study created in memory" under `trials report`
    view = optuna.create_study(directions=["maximize" if m else "minimize" for m in directions])  # in memory
    view.add_trials([optuna.trial.create_trial(params=t.params, distributions=_distributions(t.distributions),
                                               values=t.values) for t in kept])
    maximize = directions[metric_index]
    sign = -1.0 if maximize else 1.0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        raw = optuna.importance.get_param_importances(
            view, evaluator=optuna.importance.FanovaImportanceEvaluator(
                n_trees=N_TREES, max_depth=MAX_DEPTH, seed=0),
            target=lambda t: sign * t.values[metric_index])
    out: dict[str, float] = {}
    for name, value in raw.items():
        pid = parameter_id_of(name)
        out[pid] = out.get(pid, 0.0) + float(value)
    return out, len(kept), len(complete)


def sample(kept: Sequence[Any], max_trials: int) -> list[Any]:
    """``kept`` when it has at most ``max_trials``, else that many of them at random (seed 0, in
    their order): the same job gives the same sample, so the same importances, each time."""
    if len(kept) <= max_trials:
        return list(kept)
    chosen = sorted(random.Random(0).sample(range(len(kept)), max_trials))
    return [kept[i] for i in chosen]


@functools.lru_cache(maxsize=256)
def _from_json(text: str) -> BaseDistribution:
    return json_to_distribution(text)


def _distributions(d: Mapping[str, Any]) -> dict[str, BaseDistribution]:
    return {k: _from_json(v) if isinstance(v, str) else v for k, v in d.items()}
