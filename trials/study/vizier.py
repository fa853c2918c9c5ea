"""OSS Vizier's default designer as an Optuna sampler: ``trials sweep --sampler vizier`` (``trials[vizier]``).

Vertex's ALGORITHM_UNSPECIFIED is Google Vizier's Bayesian optimisation; Google publishes it as OSS
Vizier, where DEFAULT maps to ``VizierGPUCBPEBandit`` (GP-UCB with pure-exploration batches). This
sampler asks that designer for each trial's parameters, so a local job searches as the Vertex job would.

Each suggestion runs in a child process (``python -m trials.study.vizier``) that rebuilds the designer
from the study's trials (completed ones, and the running ones as pending), as Vizier's own service does:

- JAX stays out of the controller: one designer process that ran a 100-trial study grew past 7 GB
  here (``benchmarks/README.md`` part 3), and its threads and compilation would share the job loop's
  process;
- the suggestion depends only on the study's trials and the seed, so a resumed job and a second
  worker on a shared storage suggest as the first would.

It costs seconds per suggestion (5-25 s on this machine kind, more as the study grows), made ahead
of time while trials run (:mod:`trials.study.ahead`: the sampler lives in the suggestion worker, which
starts this child), so a slot waits only when a suggestion takes longer than a trial: for trials of
minutes and more. Flat search spaces only (the designer has no conditional
parameters) and one metric. The first trial, before any result, is random (Vizier's would be the centre
of the space). If the child process fails, the trial is sampled at random, a warning says why, and the
trial carries the system attribute ``trials:vizier_error``.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import math
import os
import subprocess
import sys
from collections.abc import Sequence
from typing import Any

import optuna
from optuna.distributions import BaseDistribution, CategoricalDistribution, FloatDistribution, IntDistribution
from optuna.search_space import IntersectionSearchSpace
from optuna.study import StudyDirection
from optuna.trial import FrozenTrial, TrialState

from trials.study import optuna_internals as internals

logger = logging.getLogger(__name__)

MODULES = ("vizier", "jax")  # google-vizier[jax]
TIMEOUT_S = 900.0
ERROR_ATTR = "trials:vizier_error"


def available() -> bool:
    """Whether OSS Vizier's designer can run (google-vizier and jax installed)."""
    return all(importlib.util.find_spec(m) is not None for m in MODULES)


# --- the request: a JSON description of the search space and the trials -----------------------------
def _param(name: str, d: BaseDistribution) -> dict[str, Any]:
    if isinstance(d, FloatDistribution):
        if d.step is not None:
            n = int(round((d.high - d.low) / d.step))
            return {"name": name, "kind": "discrete", "values": [d.low + i * d.step for i in range(n + 1)]}
        return {"name": name, "kind": "float", "low": d.low, "high": d.high, "log": d.log}
    if isinstance(d, IntDistribution):
        if d.step != 1:
            return {"name": name, "kind": "discrete", "values": [float(v) for v in range(d.low, d.high + 1, d.step)]}
        return {"name": name, "kind": "int", "low": d.low, "high": d.high, "log": d.log}
    if isinstance(d, CategoricalDistribution):
        if all(isinstance(c, (int, float)) and not isinstance(c, bool) for c in d.choices):
            return {"name": name, "kind": "discrete",
                    "values": sorted({float(c) for c in d.choices if isinstance(c, (int, float))})}
        return {"name": name, "kind": "categorical", "values": [str(c) for c in d.choices]}
    raise ValueError(f"parameter {name!r}: OSS Vizier cannot take a {type(d).__name__}")


def _encode(value: Any, d: BaseDistribution) -> Any:
    if isinstance(d, CategoricalDistribution):
        return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else str(value)
    return value


def _decode(value: Any, d: BaseDistribution) -> Any:
    """The designer's value as the distribution's own (a category by name, an integer, a numeric choice)."""
    if isinstance(d, CategoricalDistribution):
        for c in d.choices:
            if (isinstance(c, (int, float)) and not isinstance(c, bool) and isinstance(value, (int, float))
                    and math.isclose(float(c), float(value), rel_tol=1e-9, abs_tol=1e-12)) or str(c) == value:
                return c
        raise ValueError(f"OSS Vizier suggested {value!r}, not one of {list(d.choices)}")
    if isinstance(d, IntDistribution):
        return min(max(int(round(float(value))), d.low), d.high)
    if isinstance(d, FloatDistribution):
        return min(max(float(value), d.low), d.high)
    return value


def request(space: dict[str, BaseDistribution], direction: StudyDirection, completed: Sequence[FrozenTrial],
            running: Sequence[FrozenTrial], seed: int) -> dict[str, Any]:
    """What the child process needs: the space, the goal, the trials (values as reported) and the seed."""
    names = sorted(space)
    done = []
    for t in completed:
        value = t.values[0] if t.values else None
        done.append({"params": {n: _encode(t.params[n], space[n]) for n in names},
                     "value": value if value is not None and math.isfinite(value) else None})
    return {"params": [_param(n, space[n]) for n in names],
            "maximize": direction == StudyDirection.MAXIMIZE,
            "completed": done,
            "active": [{"params": {n: _encode(t.params[n], space[n]) for n in names}} for t in running],
            "seed": seed}


# --- the sampler (in the controller) -----------------------------------------------------------------
class VizierSampler(optuna.samplers.BaseSampler):
    """Parameters from OSS Vizier's default designer, one child process per suggestion."""

    def __init__(self, *, seed: int | None = None, timeout: float = TIMEOUT_S) -> None:
        self._seed = seed if seed is not None else int.from_bytes(os.urandom(4), "little")
        self._random = optuna.samplers.RandomSampler(seed=seed)
        self._intersection = IntersectionSearchSpace()
        self._timeout = timeout

    def reseed_rng(self) -> None:
        self._random.reseed_rng()

    def infer_relative_search_space(self, study: optuna.Study, trial: FrozenTrial) -> dict[str, BaseDistribution]:
        return {n: d for n, d in self._intersection.calculate(study).items() if not d.single()}

    def sample_relative(self, study: optuna.Study, trial: FrozenTrial,
                        search_space: dict[str, BaseDistribution]) -> dict[str, Any]:
        if not search_space or len(study.directions) != 1:
            return {}
        trials = internals.study_trials(study, (TrialState.COMPLETE, TrialState.RUNNING, TrialState.PRUNED))
        completed = [t for t in trials if t.state == TrialState.COMPLETE and search_space.keys() <= t.params.keys()]
        stopped = [t for t in trials if t.state == TrialState.PRUNED and search_space.keys() <= t.params.keys()]
        # trials stopped early count too, below every completed one (as for the GP: npgp.stopped_as_values)
        from trials.study.npgp import stopped_as_values

        completed = completed + stopped_as_values(completed, stopped, study.direction)
        if not completed:
            return {}
        running = [t for t in trials if t.state == TrialState.RUNNING and t.number != trial.number
                   and search_space.keys() <= t.params.keys()]
        req = request(search_space, study.direction, completed, running, self._seed + len(completed) + len(running))
        try:
            suggested = suggest_in_child(req, timeout=self._timeout)
            return {n: _decode(suggested[n], d) for n, d in search_space.items()}
        except (RuntimeError, ValueError, KeyError, OSError, subprocess.TimeoutExpired) as e:
            reason = _one_line(str(e))
            logger.warning("trial %d: OSS Vizier failed (%s); its parameters are random", trial.number, reason)
            internals.study_storage(study).set_trial_system_attr(internals.storage_id(trial), ERROR_ATTR, reason)
            return {}

    def sample_independent(self, study: optuna.Study, trial: FrozenTrial, param_name: str,
                           param_distribution: BaseDistribution) -> Any:
        return self._random.sample_independent(study, trial, param_name, param_distribution)


def _one_line(text: str, limit: int = 300) -> str:
    line = " ".join(text.split())
    printable = "".join(c if c.isprintable() else "?" for c in line)
    return printable[:limit]


def suggest_in_child(req: dict[str, Any], *, timeout: float = TIMEOUT_S) -> dict[str, Any]:
    """Run the designer in ``python -m trials.study.vizier``; its parameters, or RuntimeError with its last line."""
    env = dict(os.environ)
    env.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    env.setdefault("JAX_PLATFORMS", "cpu")
    env["PYTHONSAFEPATH"] = "1"  # Python 3.11+: a trials/ folder in the job's working directory is not imported
    proc = subprocess.run([sys.executable, "-m", "trials.study.vizier"], input=json.dumps(req).encode(),
                          capture_output=True, timeout=timeout, env=env, check=False)
    if proc.returncode != 0:
        lines = [ln for ln in proc.stderr.decode(errors="replace").splitlines() if ln.strip()]
        raise RuntimeError(f"exit {proc.returncode}: {lines[-1] if lines else 'no output'}")
    out: dict[str, Any] = json.loads(proc.stdout.decode().strip().splitlines()[-1])
    return out


# --- the child process ---------------------------------------------------------------------------------
def _compilation_cache() -> None:
    """float64 (Vizier's GP gives NaN acquisitions in float32) and JAX's on-disk compilation cache, so a
    suggestion reuses what an earlier child compiled for the same sizes."""
    import tempfile

    import jax

    path = (os.environ.get("TRIALS_VIZIER_JAX_CACHE")
            or os.path.join(tempfile.gettempdir(), f"trials-jax-cache-{os.getuid()}"))
    jax.config.update("jax_enable_x64", True)
    jax.config.update("jax_compilation_cache_dir", path)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.5)


def child_suggest(req: dict[str, Any]) -> dict[str, Any]:
    """Rebuild the designer from the request's trials and ask it for one suggestion (in the child)."""
    import jax
    from vizier import algorithms as vza
    from vizier import pyvizier as vz
    from vizier._src.algorithms.designers import gp_ucb_pe

    _compilation_cache()
    problem = vz.ProblemStatement()
    root = problem.search_space.root
    for p in req["params"]:
        if p["kind"] == "float":
            root.add_float_param(p["name"], p["low"], p["high"],
                                 scale_type=vz.ScaleType.LOG if p["log"] else vz.ScaleType.LINEAR)
        elif p["kind"] == "int":
            root.add_int_param(p["name"], p["low"], p["high"],
                               scale_type=vz.ScaleType.LOG if p["log"] else vz.ScaleType.LINEAR)
        elif p["kind"] == "discrete":
            root.add_discrete_param(p["name"], p["values"])
        else:
            root.add_categorical_param(p["name"], p["values"])
    goal = vz.ObjectiveMetricGoal.MAXIMIZE if req["maximize"] else vz.ObjectiveMetricGoal.MINIMIZE
    problem.metric_information.append(vz.MetricInformation(name="objective", goal=goal))
    designer = gp_ucb_pe.VizierGPUCBPEBandit(problem, rng=jax.random.PRNGKey(req["seed"] % (2**31)))
    completed = []
    for i, t in enumerate(req["completed"], start=1):
        trial = vz.Trial(id=i, parameters=t["params"])
        if t["value"] is None:
            trial.complete(vz.Measurement(), infeasibility_reason="no finite value")
        else:
            trial.complete(vz.Measurement(metrics={"objective": float(t["value"])}))
        completed.append(trial)
    active = [vz.Trial(id=len(completed) + j, parameters=t["params"]) for j, t in enumerate(req["active"], start=1)]
    designer.update(vza.CompletedTrials(completed), vza.ActiveTrials(active))
    (suggestion,) = designer.suggest(1)
    return {k: v.value for k, v in suggestion.parameters.items()}


def main() -> int:
    req = json.loads(sys.stdin.read())
    print(json.dumps(child_suggest(req)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
