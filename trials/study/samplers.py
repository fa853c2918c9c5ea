"""Which Optuna sampler a study gets, and building it."""

from __future__ import annotations

import importlib.util
import warnings

import optuna

from trials.errors import ConfigError
from trials.spec import Algorithm, StudySpec

# What --sampler accepts (a local choice for ALGORITHM_UNSPECIFIED; Vertex has no such field).
CHOICES = ("gp-warped", "gp", "tpe", "cmaes", "random", "vizier")


def gp_available(name: str = "gp-warped") -> bool:
    """Whether the GP sampler ``name`` can run: ``gp-warped`` (:mod:`trials.study.npgp`) needs scipy,
    ``gp`` (Optuna's GPSampler) torch and scipy."""
    needs = ("scipy",) if name == "gp-warped" else ("torch", "scipy")
    return all(importlib.util.find_spec(m) is not None for m in needs)


def choose_sampler_name(study: StudySpec, *, n_trials: int) -> str:
    """The documented rule for ALGORITHM_UNSPECIFIED.

    ``gp-warped`` (Optuna's GPSampler's model and search fitted to Vizier-style warped values,
    :mod:`warped_gp`, computed with NumPy and SciPy, :mod:`npgp`) when scipy is installed, the study
    has one metric, no conditional parameters and at most 300 trials (a GP's cost grows cubically with
    the trials); otherwise multivariate TPE (grouped for conditional spaces, constant liar for parallel
    trials). Chosen on ``benchmarks/README.md`` part 3.
    """
    if study.algorithm is Algorithm.RANDOM_SEARCH:
        return "random"
    if study.algorithm is Algorithm.GRID_SEARCH:
        return "grid"
    conditional = any(p.conditionals for p in study.parameters)
    if gp_available() and len(study.metrics) == 1 and not conditional and n_trials <= 300:
        return "gp-warped"
    return "tpe"


def check_choice(name: str, study: StudySpec, *, source: str = "--sampler") -> str:
    """``name`` when the study can use it; otherwise a ConfigError naming the flag and what is wrong."""
    if name not in CHOICES:
        raise ConfigError(f"{source}: expected one of {', '.join(CHOICES)}, got {name!r}")
    if study.algorithm is not Algorithm.ALGORITHM_UNSPECIFIED:
        raise ConfigError(f"{source} {name}: only for algorithm ALGORITHM_UNSPECIFIED, the spec's is "
                          f"{study.algorithm.name}")
    if name == "gp-warped" and not gp_available(name):
        raise ConfigError(f"{source} {name}: needs scipy, which is not installed: pip install 'trials[gp]'")
    if name == "gp" and not gp_available(name):
        raise ConfigError(f"{source} {name}: needs torch and scipy, which are not installed: "
                          f"pip install 'trials[gp]' torch")
    if name == "vizier":
        from trials.study import vizier

        if not vizier.available():
            raise ConfigError(f"{source} vizier: needs google-vizier and jax, which are not installed: "
                              f"pip install 'trials[vizier]'")
        if len(study.metrics) > 1:
            raise ConfigError(f"{source} vizier: expected one metric, got {len(study.metrics)}")
        conditional = [p.parameter_id for p in study.parameters if p.conditionals]
        if conditional:
            raise ConfigError(f"{source} vizier: expected a flat search space (OSS Vizier's designer has no "
                              f"conditional parameters), got conditional parameters under {conditional[0]!r}")
    if name == "cmaes":
        if importlib.util.find_spec("cmaes") is None:
            raise ConfigError(f"{source} cmaes: needs the cmaes package, which is not installed: "
                              f"pip install 'trials[cmaes]'")
        if len(study.metrics) > 1:
            raise ConfigError(f"{source} cmaes: expected one metric (CMA-ES is single-objective), "
                              f"got {len(study.metrics)}")
    return name


def make_sampler(name: str, *, seed: int | None, n_startup: int = 10) -> optuna.samplers.BaseSampler:
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
    return getattr(sampler, "_constraints_func", None) is not None
