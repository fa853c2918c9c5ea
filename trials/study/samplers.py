"""Which Optuna sampler a study gets, and building it."""

from __future__ import annotations

import importlib.util
import warnings

import optuna

from trials.spec import Algorithm, StudySpec


def gp_available() -> bool:
    """Whether GPSampler can run (it needs torch)."""
    return importlib.util.find_spec("torch") is not None


def choose_sampler_name(study: StudySpec, *, n_trials: int) -> str:
    """The documented rule for ALGORITHM_UNSPECIFIED.

    GP (Optuna's GPSampler) when torch is installed, the study has one metric, no conditional
    parameters and at most 300 trials (GP costs ~0.6 s per trial here and grows cubically);
    otherwise multivariate TPE (grouped for conditional spaces, constant liar for parallel trials).
    """
    if study.algorithm is Algorithm.RANDOM_SEARCH:
        return "random"
    if study.algorithm is Algorithm.GRID_SEARCH:
        return "grid"
    conditional = any(p.conditionals for p in study.parameters)
    if gp_available() and len(study.metrics) == 1 and not conditional and n_trials <= 300:
        return "gp"
    return "tpe"


def make_sampler(name: str, *, seed: int | None, n_startup: int = 10) -> optuna.samplers.BaseSampler:
    """The sampler named by :func:`choose_sampler_name` (or ``cmaes``)."""
    if name in ("random", "grid"):
        # Grid points are enqueued as fixed params; the sampler only fills nothing.
        return optuna.samplers.RandomSampler(seed=seed)
    if name == "gp":
        return optuna.samplers.GPSampler(seed=seed, n_startup_trials=n_startup)
    if name == "cmaes":
        return optuna.samplers.CmaEsSampler(seed=seed, n_startup_trials=n_startup)
    with warnings.catch_warnings():  # `group` is marked experimental in Optuna; it is what we want
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        return optuna.samplers.TPESampler(
            seed=seed, multivariate=True, group=True, constant_liar=True,
            n_startup_trials=n_startup,
        )
