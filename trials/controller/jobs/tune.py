"""In-process mode: the job loop of ``trials sweep`` (claim, run, measure, stop early, select, record)
over the in-process replica backend, each trial a function call instead of a set of processes — for
unit tests and notebooks.

Trials run one after another in this process (the loop has one slot): Python threads would fight
over the GIL for CPU-bound objectives (measured here: ``study.optimize(n_jobs=2)`` with a pure-Python
objective is ×0.63 *slower*), so a ``parallelTrialCount`` above 1 is not used, and ``tune`` says so
when it starts (a ``UserWarning``); use ``trials sweep`` for parallel trials (``--warm-start`` for an
import-heavy trainer: the warm part of benchmarks/README.md). The spec's ``args`` (its first worker
pool's, as Vertex gives them to the chief) come first in every trial's flags, then ``tune``'s own
``args``. There are no restarts either: an exception fails the trial at once, as exit code 1 would
(``trials.controller.inprocess.backend.exit_status``).
"""

from __future__ import annotations

import functools
import os
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from trials import protocol
from trials.errors import TuneError
from trials.job_meta import JobMeta
from trials.records import JobState, TrialState
from trials.spec import JobSpec


@dataclass(repr=False)
class TuneResult:
    """What :func:`tune` returns: the finished job, readable like ``trials describe``.

    Example:
        >>> result = trials.tune(objective, "space.yaml", Config)  # doctest: +SKIP
        >>> result.best_value, result.best_parameters  # doctest: +SKIP
        (0.9733, {'learning_rate': 0.027, 'hidden_units': 64})
    """

    job_id: str
    job_dir: str | None  # None when it was a temporary folder, removed when tune returned
    state: str
    trials: list[dict[str, Any]] = field(default_factory=list)  # Vertex REST trial shape
    best: dict[str, Any] | None = None  # the best SUCCEEDED trial (first metric), or None
    store: Any = None  # the trials.study.JobStore (Optuna study: ``result.store.study``)
    metric_ids: tuple[str, ...] = ()  # the spec's metrics, the first one decides "best"
    error: str | None = None  # why the job failed

    @property
    def best_parameters(self) -> dict[str, Any]:
        """The best trial's parameter values by parameter id ({} when no trial succeeded)."""
        if self.best is None:
            return {}
        return {p["parameterId"]: p["value"] for p in self.best["parameters"]}

    @property
    def best_values(self) -> dict[str, float]:
        """Every metric of the best trial's final measurement."""
        if self.best is None:
            return {}
        return {m["metricId"]: m["value"] for m in self.best["finalMeasurement"]["metrics"]}

    @property
    def best_value(self) -> float | None:
        """The best trial's value of the first (objective) metric."""
        return self.best_values.get(self.metric_ids[0]) if self.metric_ids else None

    @property
    def best_trial_id(self) -> str | None:
        return self.best["id"] if self.best is not None else None

    def __repr__(self) -> str:
        return (f"TuneResult(job_id={self.job_id!r}, state={self.state!r}, n_trials={len(self.trials)}, "
                f"best_trial_id={self.best_trial_id!r}, best_value={self.best_value!r}, "
                f"best_parameters={self.best_parameters!r})")


def tune(
    objective: Callable[..., Any],
    spec: str | os.PathLike[str] | JobSpec,
    Config: type | None = None,
    *,
    max_trial_count: int | None = None,
    storage: str | None = None,
    job_id: str = "tune",
    directory: str | None = None,
    seed: int | None = None,
    args: tuple[str, ...] = (),
    on_trial: Callable[[dict[str, Any]], None] | None = None,
    checkpoint_format: Any = None,
) -> TuneResult:
    """Tune ``objective(config, ctx)`` in this process over the spec's search space.

    Args:
        objective: called as ``objective(config, ctx)`` or ``objective(ctx)``, exactly as under
            ``trials.main`` (``ctx.report`` goes through the real hypertune library).
        spec: a spec/search-space path or a loaded :class:`trials.spec.JobSpec`.
        Config: the dataclass of hyperparameters (optional when the spec defines them all).
        max_trial_count: overrides the spec's count.
        storage: an Optuna storage URL (default: in memory).
        job_id: the study name.
        directory: where trial directories go (models, checkpoints, logs), kept afterwards.
            Default: a temporary directory, removed when ``tune`` returns or raises.
        seed: sampler seed.
        args: extra flags given to every trial, after the spec's own ``args`` (its first worker pool's
            ``containerSpec``/``pythonPackageSpec`` ``args``), as Vertex orders them.
        on_trial: called with each finished trial (Vertex REST shape).
        checkpoint_format: as in :func:`trials.main`: ``"auto"`` (default), ``"json"``, ``"npz"``,
            ``"torch"``, ``"pickle"`` or a CheckpointFormat.

    Returns:
        A :class:`TuneResult`: ``best_value``, ``best_parameters``, ``best_values``, every trial.

    Raises:
        TuneError: the job failed (the first failed trial's exception is its ``__cause__``) or no
            trial succeeded; ``err.result`` holds the finished job.

    Example:
        >>> result = trials.tune(objective, "search_spaces/digits_mlp.yaml", Config,
        ...                      max_trial_count=20)  # doctest: +SKIP
        >>> result.best_value, result.best_parameters  # doctest: +SKIP
    """
    if not isinstance(spec, JobSpec):
        from trials.spec.load import load_spec

        source = os.fspath(spec)
        spec = load_spec(spec)
    else:
        source = "the spec"
    if spec.parallel_trial_count > 1:
        import warnings

        warnings.warn(f"trials.tune runs one trial at a time in this process: parallelTrialCount "
                      f"{spec.parallel_trial_count} in {source} is not used (`trials sweep` runs that many at a "
                      f"time, each trial a process)", UserWarning, stacklevel=2)
    run = functools.partial(_tune, objective, spec, Config, max_trial_count=max_trial_count,
                            storage=storage, job_id=job_id, seed=seed, args=args, on_trial=on_trial,
                            checkpoint_format=checkpoint_format)
    if directory is not None:
        result, first_error = run(job_dir=directory)
    else:
        with tempfile.TemporaryDirectory(prefix="trials-tune-", ignore_cleanup_errors=True) as tmp:
            result, first_error = run(job_dir=tmp)
        result.job_dir = None
    return _checked(result, first_error)


def _checked(result: TuneResult, first_error: BaseException | None) -> TuneResult:
    """The result, or TuneError when there is none to give."""
    if result.state != JobState.SUCCEEDED:
        cause = f" ({type(first_error).__name__}: {first_error})" if first_error is not None else ""
        raise TuneError(f"trials.tune: job {result.job_id} {result.state}: {result.error}{cause}",
                        result) from first_error
    if result.best is None:
        reasons = [t.get("infeasibleReason", "") for t in result.trials if t.get("infeasibleReason")]
        detail = f"; trial {result.trials[0]['id']}: {reasons[0]}" if reasons else ""
        raise TuneError(f"trials.tune: no trial of job {result.job_id} succeeded "
                        f"({len(result.trials)} run){detail}", result)
    return result


def _tune(objective: Callable[..., Any], spec: str | os.PathLike[str] | JobSpec, Config: type | None, *,
          job_dir: str, max_trial_count: int | None, storage: str | None, job_id: str, seed: int | None,
          args: tuple[str, ...], on_trial: Callable[[dict[str, Any]], None] | None,
          checkpoint_format: Any) -> tuple[TuneResult, BaseException | None]:
    """Run the job in ``job_dir`` through the job loop; (result, the first failed trial's exception)."""
    from trials.controller.inprocess.backend import COMMAND, InProcessBackend
    from trials.controller.inprocess.signals import CallerSignals
    from trials.controller.jobs.describe import trial_to_rest
    from trials.controller.loop import events
    from trials.controller.loop.runner import JobRunner
    from trials.controller.loop.state import LoopOptions
    from trials.controller.policy.ranking import best_of
    from trials.runtime.context import RunOptions
    from trials.spec.export import to_rest
    from trials.study.samplers import choose_sampler_name
    from trials.study.space import values_from_optuna
    from trials.study.storage import in_memory_storage, open_storage
    from trials.study.store import JobStore

    if not isinstance(spec, JobSpec):
        from trials.spec.load import load_spec

        spec = load_spec(spec)
    spec_args = _spec_args(spec)
    job = spec if max_trial_count is None else replace(spec, max_trial_count=max_trial_count)
    protocol.check_job_id(job_id)
    run_options = RunOptions(install_signals=False, tensorboard=False, checkpoint_format=checkpoint_format)
    job_dir = os.path.abspath(job_dir)
    os.makedirs(job_dir, exist_ok=True)
    study = job.study
    store_backend = open_storage(storage) if storage else in_memory_storage()
    store = JobStore.create(store_backend, job_id, job, to_rest(job) if job.trial_job else {},
                            JobMeta(state=JobState.RUNNING, job_dir=job_dir),
                            sampler_name=choose_sampler_name(study, n_trials=job.max_trial_count), seed=seed)
    # a stopping rule decides at every step: the objective takes turns with the loop, from its own thread;
    # without one, nothing is decided while a trial runs: each is a whole call in this thread
    backend = InProcessBackend(objective, Config, study=study, options=run_options, turns=study.stopping is not None)
    # One trial at a time (see the module's docstring), a replica that is a call: its command is the
    # backend's placeholder and the flags: the spec's args, ``args``, then the trial's parameters
    from trials.controller.jobs.registry import resolve_base_output

    # AIP_* only when the spec has a base output directory, as for a sweep and on Vertex
    options = LoopOptions(job_dir=job_dir, base_output=resolve_base_output(job, None),
                          gcs_root=os.path.join(job_dir, "gcs"),
                          project_number=protocol.DEFAULT_PROJECT_NUMBER, cwd=os.getcwd(),
                          local_command=(COMMAND, *spec_args, *args), slots=1, poll_interval_s=0.0, seed=seed)
    results: list[dict[str, Any]] = []
    first_error: BaseException | None = None

    def emit(event: events.Event) -> None:
        nonlocal first_error
        if not isinstance(event, events.TrialDone):
            return
        error = backend.take_error(event.trial_id)
        frozen = store.trial(int(event.trial_id) - 1)
        if frozen.user_attrs.get("failed") and first_error is None:
            first_error = error
        rest = trial_to_rest(frozen, values_from_optuna(study, frozen.params), study.metric_ids)
        results.append(rest)
        if on_trial is not None:
            on_trial(rest)

    # the trials' own job is not emulated in-process (no worker pools, no container): each is one call
    runner = JobRunner(store, replace(job, trial_job=None), options, backend=backend, emit=emit,
                       signals=CallerSignals())
    state = runner.run()
    error = store.meta().error or {}
    primary = study.metrics[0]
    best = best_of([t for t in results if t["state"] == TrialState.SUCCEEDED],
                   lambda t: _final_value(t, primary.metric_id), maximize=primary.maximize)
    result = TuneResult(job_id=job_id, job_dir=job_dir, state=state, trials=results, best=best,
                        store=store, metric_ids=tuple(study.metric_ids), error=error.get("message"))
    return result, first_error


def _spec_args(job: JobSpec) -> tuple[str, ...]:
    """The args Vertex gives the trial's chief: its first worker pool's (none without a trial job)."""
    if job.trial_job is None:
        return ()
    pool = next((p for p in job.trial_job.worker_pools if p is not None), None)
    return pool.args if pool is not None else ()


def _final_value(trial: Mapping[str, Any], metric_id: str) -> float | None:
    """A REST trial's final value of ``metric_id`` (None without one)."""
    for m in trial.get("finalMeasurement", {}).get("metrics", []):
        if m["metricId"] == metric_id:
            return float(m["value"])
    return None
