"""OSS Vizier's default designer (what Vertex's ALGORITHM_UNSPECIFIED is) driven on a StudySpec.

``google-vizier`` maps ``DEFAULT``/``ALGORITHM_UNSPECIFIED`` to ``VizierGPUCBPEBandit`` (GP-UCB with
pure-exploration batches). It needs a flat search space, so a conditional space is flattened: every
child parameter is in every suggestion and the objective reads only the active ones (how a user
would have to pose it to this designer). Needs the ``vizier`` extra (google-vizier[jax]).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def available() -> bool:
    import importlib.util

    return importlib.util.find_spec("vizier") is not None and importlib.util.find_spec("jax") is not None


def problem_statement(spec: Any):
    """The pyvizier problem of a StudySpec (conditional children flattened)."""
    from vizier import pyvizier as vz

    from trials.spec import ParameterType, ScaleType

    scales = {ScaleType.UNIT_LOG_SCALE: vz.ScaleType.LOG, ScaleType.UNIT_REVERSE_LOG_SCALE: vz.ScaleType.REVERSE_LOG}
    problem = vz.ProblemStatement()
    root = problem.search_space.root
    for p in spec.all_parameters():
        scale = scales.get(p.scale_type, vz.ScaleType.LINEAR)
        if p.type is ParameterType.DOUBLE:
            root.add_float_param(p.parameter_id, float(p.min_value), float(p.max_value), scale_type=scale)
        elif p.type is ParameterType.INTEGER:
            root.add_int_param(p.parameter_id, int(p.min_value), int(p.max_value), scale_type=scale)
        elif p.type is ParameterType.DISCRETE:
            root.add_discrete_param(p.parameter_id, [float(v) for v in p.values])
        else:
            root.add_categorical_param(p.parameter_id, [str(v) for v in p.values])
    metric = spec.metrics[0]
    goal = vz.ObjectiveMetricGoal.MAXIMIZE if metric.maximize else vz.ObjectiveMetricGoal.MINIMIZE
    problem.metric_information.append(vz.MetricInformation(name=metric.metric_id, goal=goal))
    return problem


def _compilation_cache() -> None:
    """float64, and JAX's on-disk compilation cache so runs of one size reuse compiled code."""
    import os
    import tempfile

    import jax

    path = os.environ.get("TRIALS_BENCH_JAX_CACHE") or os.path.join(tempfile.gettempdir(), "trials-bench-jax-cache")
    jax.config.update("jax_enable_x64", True)  # Vizier's GP needs float64: float32 gives NaN acquisitions
    jax.config.update("jax_compilation_cache_dir", path)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.5)


class Designer:
    """suggest(count) -> parameter dicts; complete(values) -> tells the designer the last batch."""

    def __init__(self, spec: Any, seed: int):
        import jax
        from vizier import pyvizier as vz
        from vizier._src.algorithms.designers import gp_ucb_pe

        _compilation_cache()
        self._vz = vz
        self._metric = spec.metrics[0].metric_id
        self._designer = gp_ucb_pe.VizierGPUCBPEBandit(problem_statement(spec), rng=jax.random.PRNGKey(seed))
        self._pending: list[Any] = []
        self._next_id = 1

    def suggest(self, count: int) -> list[dict[str, Any]]:
        suggestions = self._designer.suggest(count)
        self._pending = []
        out = []
        for s in suggestions:
            trial = s.to_trial(self._next_id)
            self._next_id += 1
            self._pending.append(trial)
            out.append({k: v.value for k, v in trial.parameters.items()})
        return out

    def complete(self, values: Sequence[float]) -> None:
        from vizier import algorithms as vza

        done = []
        for trial, value in zip(self._pending, values, strict=True):
            trial.complete(self._vz.Measurement(metrics={self._metric: float(value)}))
            done.append(trial)
        self._designer.update(vza.CompletedTrials(done), vza.ActiveTrials())
        self._pending = []
