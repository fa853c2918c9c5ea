"""In-process mode: the same job (claim, run, measure, stop early, select, record) with each trial a
function call instead of a set of processes — for unit tests and notebooks.

Trials run one after another in this process: Python threads would fight over the GIL for
CPU-bound objectives (measured here: ``study.optimize(n_jobs=2)`` with a pure-Python objective is
×0.63 *slower*), so ``parallelTrialCount`` is ignored; use ``trials sweep`` for parallel trials.
There are no restarts either: an exception fails the trial at once, as exit code 1 would.
"""

from __future__ import annotations

import functools
import os
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from trials import protocol
from trials.controller.policy import exits, stopping
from trials.controller.trial import launch
from trials.errors import TuneError
from trials.records import JobState, TrialState
from trials.spec import JobSpec
from trials.timefmt import wall_after


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
        args: extra flags given to every trial (like a container spec's ``args``).
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
    """Run the job in ``job_dir``; (result, the first failed trial's exception)."""
    from trials.controller.jobs.describe import trial_to_rest
    from trials.controller.policy.outcome import finished_trial, record_finished
    from trials.controller.trial.metrics_reader import TrialMetricsReader
    from trials.runtime import entrypoint
    from trials.runtime.context import RunOptions
    from trials.study.samplers import choose_sampler_name
    from trials.study.space import values_from_optuna
    from trials.study.storage import in_memory_storage, open_storage
    from trials.study.store import Claimed, JobStore

    if not isinstance(spec, JobSpec):
        from trials.spec.load import load_spec

        spec = load_spec(spec)
    job = spec if max_trial_count is None else replace(spec, max_trial_count=max_trial_count)
    protocol.check_job_id(job_id)
    run_options = RunOptions(install_signals=False, tensorboard=False, checkpoint_format=checkpoint_format)
    job_dir = os.path.abspath(job_dir)
    os.makedirs(job_dir, exist_ok=True)
    study_spec = job.study
    store_backend = open_storage(storage) if storage else in_memory_storage()
    from trials.spec.export import to_rest

    store = JobStore.create(store_backend, job_id, job, to_rest(job) if job.trial_job else {},
                            {"state": JobState.RUNNING.value, "job_dir": job_dir},
                            sampler_name=choose_sampler_name(study_spec, n_trials=job.max_trial_count),
                            seed=seed)
    primary = study_spec.metrics[0]
    completed: list[list[tuple[float, float]]] = []
    results: list[dict[str, Any]] = []
    n_failed = n_succeeded = 0
    first_failure: str | None = None
    first_error: BaseException | None = None
    job_error: str | None = None
    base_env = launch.clean_base_env(os.environ)

    while job_error is None and (claimed := store.claim(study_spec)) is not None:
        paths = launch.trial_paths(job_dir, job_dir, claimed.trial_id)
        os.makedirs(paths.trial_dir, exist_ok=True)
        (replica,) = launch.build_replicas(
            job=replace(job, trial_job=None), job_id=job_id, trial_id=claimed.trial_id,
            params=claimed.params, paths=paths, project_number="000000000000", local_command=("-",),
            base_env=base_env, ports=[2222], gcs_root=os.path.join(job_dir, "gcs"),
        )
        flags = [*args, *launch.trial_flags(study_spec, claimed.params)]
        start, start_mono = time.time(), time.monotonic()
        state: dict[str, Any] = {"stopped": False, "detail": "", "curve": []}

        def on_report(ctx: Any, step: int, metrics: Mapping[str, float], claimed: Claimed = claimed,
                      state: dict[str, Any] = state) -> None:
            if primary.metric_id not in metrics:
                return
            value = metrics[primary.metric_id]
            store.report(claimed.storage_id, step, value)
            state["curve"].append((float(step), stopping.orient(value, primary.maximize)))
            if study_spec.stopping is not None and not state["stopped"]:
                decision = stopping.decide(study_spec.stopping, state["curve"], completed,
                                           maximize=primary.maximize)
                if decision.stop:
                    state["stopped"], state["detail"] = True, decision.reason
                    ctx.request_stop("early stopping")  # ACTIVE -> STOPPING

        def hook(ctx: Any, on_report: Callable[..., None] = on_report) -> None:
            ctx.on_report = on_report

        store.set_trial_attrs(claimed.storage_id, state=TrialState.ACTIVE.value, trial_id=claimed.trial_id,
                              start_time=_rfc(start))
        outcome = entrypoint.run(objective, Config, spec=study_spec, argv=flags, environ=replica.env,
                                 options=run_options,
                                 prog=f"trial {claimed.trial_id}", on_context=hook)
        reader = TrialMetricsReader(replica.metric_file, os.path.join(paths.trial_dir, protocol.METRICS_LOG),
                                    study_spec.reported_metric_ids, start_time=start)
        reader.poll()
        measurements = [m.with_elapsed(start) for m in reader.measurements()]
        failure = None
        if outcome.exit_code not in (protocol.EXIT_OK, protocol.EXIT_STOPPED):
            err = outcome.error
            detail = f"{type(err).__name__}: {err}" if err is not None else "Error"
            failure = exits.exit_message(replica.name, outcome.exit_code)
        # Told to stop but ran to the end anyway (it ignored should_stop): not stopped early.
        stopped = bool(state["stopped"]) and stopping.ended_early(state["curve"], completed)
        end = wall_after(start, start_mono, time.monotonic())  # after its start, whatever the wall clock did
        finished = finished_trial(measurements, study_spec, failure=failure, reported_tags=reader.reported_tags,
                                  end_time=_rfc(end), stopped_early=stopped, stop_detail=state["detail"])
        record_finished(store, number=claimed.number, storage_id=claimed.storage_id, outcome=finished,
                        extra={"error_detail": [detail]} if failure else None)
        if finished.succeeded:
            n_succeeded += 1
            if not stopped and state["curve"]:
                completed.append(list(state["curve"]))
        if failure:
            n_failed += 1
            first_error = first_error or outcome.error
            first_failure = first_failure or f"Trial {claimed.trial_id}: {failure}"
            job_error = exits.job_failure(job, n_failed=n_failed, n_succeeded=n_succeeded,
                                           first_failure=first_failure)
        frozen = store.storage.get_trial(claimed.storage_id)
        params = values_from_optuna(study_spec, frozen.params)
        rest = trial_to_rest(frozen, params, study_spec.metric_ids)
        results.append(rest)
        if on_trial is not None:
            on_trial(rest)

    state_name = (JobState.FAILED if job_error else JobState.SUCCEEDED).value
    store.set_meta(state=state_name,
                   error={"code": exits.JOB_FAILED_CODE, "message": job_error} if job_error else None)
    best = None
    ok = [t for t in results if t["state"] == TrialState.SUCCEEDED]
    if ok:
        sign = 1 if primary.maximize else -1

        def key(t: Mapping[str, Any]) -> float:
            return sign * float(next(m["value"] for m in t["finalMeasurement"]["metrics"]
                                     if m["metricId"] == primary.metric_id))

        best = max(ok, key=key)
    result = TuneResult(job_id=job_id, job_dir=job_dir, state=state_name, trials=results, best=best,
                        store=store, metric_ids=tuple(study_spec.metric_ids), error=job_error)
    return result, first_error


def _rfc(epoch: float) -> str:
    from trials.timefmt import rfc3339

    return rfc3339(epoch)
