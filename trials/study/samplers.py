"""Which Optuna sampler a study gets, building it, and what it learns from a trial stopped early."""

from __future__ import annotations

import copy
import math
import warnings
from collections.abc import Sequence

import optuna
from optuna.study import StudyDirection
from optuna.trial import FrozenTrial, TrialState

# (the choice itself imports no Optuna: the command line makes it before loading Optuna)
from trials.study.choice import CHOICES, MAX_STARTUP, check_choice, choose_sampler_name, gp_available
from trials.study.optuna_internals import constraints_func


def make_sampler(name: str, *, seed: int | None, n_startup: int = MAX_STARTUP) -> optuna.samplers.BaseSampler:
    """The sampler named by :func:`choose_sampler_name`, or ``gp`` (plain GPSampler: jobs created before
    ``gp-warped`` was the default keep it), ``cmaes`` or ``vizier`` (OSS Vizier's default designer)."""
    if name in ("random", "grid"):
        # Grid points are enqueued as fixed params; the sampler only fills nothing.
        return optuna.samplers.RandomSampler(seed=seed)
    if name == "gp":
        return optuna.samplers.GPSampler(seed=seed, n_startup_trials=n_startup)
    if name == "gp-warped":
        from trials.study.warped_gp import WarpedGPSampler

        return WarpedGPSampler(seed=seed, n_startup_trials=n_startup)
    if name == "vizier":
        from trials.study.vizier import VizierSampler

        return VizierSampler(seed=seed)
    if name == "cmaes":
        return optuna.samplers.CmaEsSampler(seed=seed, n_startup_trials=n_startup)
    with warnings.catch_warnings():  # `group` is marked experimental in Optuna; it is what we want
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        return optuna.samplers.TPESampler(
            seed=seed, multivariate=True, group=True, constant_liar=True,
            n_startup_trials=n_startup,
        )


def acts_after_trial(sampler: optuna.samplers.BaseSampler) -> bool:
    """Whether the sampler does something when told a trial finished: Optuna's samplers only do for
    constraints (``constraints_func``), which no sampler of :func:`make_sampler` has."""
    return constraints_func(sampler) is not None


def model_ready(name: str, counts: dict[TrialState, int], n_startup: int) -> bool:
    """Whether the sampler ``name`` suggests from its model now (else at random: its start-up), by its own
    rule over the study's trial ``counts``: TPE, the GP of :mod:`trials.study.npgp` and OSS Vizier's count
    the trials stopped early (PRUNED) with the completed ones; Optuna's GPSampler and CMA-ES the completed
    only (CMA-ES's generations need whole values: a stopped trial has none to give)."""
    if name in ("random", "grid"):
        return False
    done = counts.get(TrialState.COMPLETE, 0)
    if name in ("tpe", "gp-warped", "vizier"):
        done += counts.get(TrialState.PRUNED, 0)
    return done >= (1 if name == "vizier" else n_startup)


def _pruned_score(trial: FrozenTrial, maximize: bool) -> tuple[float, float]:
    """Optuna TPE's ``_get_pruned_trial_score`` (optuna/samplers/_tpe/sampler.py), lower is better: a trial
    that got further first, then its value at its last step (NaN: the worst at that step)."""
    if not trial.intermediate_values:
        return 1.0, 0.0
    step, value = max(trial.intermediate_values.items())
    if math.isnan(value):
        return -step, math.inf
    return -step, -value if maximize else value


def stopped_as_values(completed: Sequence[FrozenTrial], stopped: Sequence[FrozenTrial],
                      direction: StudyDirection) -> list[FrozenTrial]:
    """The trials stopped early (PRUNED) as completed trials with a value a model can fit: copies, each
    valued below every completed trial, in Optuna TPE's order of pruned trials.

    Optuna's TPE (``_split_trials``, optuna/samplers/_tpe/sampler.py) ranks every completed trial above
    every pruned one, and pruned trials among themselves by how far they got (a later last step first),
    then by their value at that step. A GP needs numbers, not an order: the stopped trials get values
    spaced below the worst completed value by the completed values' mean gap (equal scores, equal
    values), so that order is exactly what the model sees; a sampler that warps its values by rank
    (:mod:`trials.study.warped_gp`, as OSS Vizier's half-rank warp does) then sees the stopped trials as
    the bottom of its ranking, whatever the gap. With no completed trial yet, the stopped trials' order
    alone is their value. Why below and not at the last value: a trial is stopped because it was behind
    the trials that completed at the same step, and what its value there says of its end is only that it
    would rank low; its early value read as a final one would rank it above completed trials that ended
    poorly but ran to their end (issue 48)."""
    maximize = direction == StudyDirection.MAXIMIZE
    sign = 1.0 if maximize else -1.0
    finals = [sign * t.values[0] for t in completed if t.values and math.isfinite(t.values[0])]
    if finals:
        worst = min(finals)
        gap = (max(finals) - worst) / max(1, len(finals) - 1)
        if not gap > 0:
            gap = max(abs(worst) * 0.01, 1e-3)
    else:
        worst, gap = 0.0, 1.0
    scores = sorted({_pruned_score(t, maximize) for t in stopped})
    rank = {score: i for i, score in enumerate(scores)}
    out = []
    for t in stopped:
        shadow = copy.copy(t)
        shadow.values = [sign * (worst - gap * (1 + rank[_pruned_score(t, maximize)]))]
        out.append(shadow)
    return out


__all__ = ["CHOICES", "acts_after_trial", "check_choice", "choose_sampler_name", "gp_available", "make_sampler",
           "model_ready", "stopped_as_values"]
