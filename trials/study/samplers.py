"""Which Optuna sampler a study gets, building it, and what it learns from a trial stopped early."""

from __future__ import annotations

import warnings

import optuna
from optuna.trial import TrialState

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


__all__ = ["CHOICES", "acts_after_trial", "check_choice", "choose_sampler_name", "gp_available", "make_sampler",
           "model_ready"]
