"""What the job loop records of a trial: its first attributes when claimed, and its end (back to the
queue, or finished with its outcome), with the warnings its metrics gave.

Both write only to the store; what a finished trial changes in the job comes back as a
:class:`~trials.controller.loop.state.TrialRecorded` for the runner to apply."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from trials.controller.loop import events
from trials.controller.loop.effects import Clock
from trials.controller.loop.metrics import TrialMetrics
from trials.controller.loop.running import RunningTrial
from trials.controller.loop.state import TrialRecorded
from trials.controller.policy import exits, rerun
from trials.controller.policy.outcome import finished_trial, record_finished
from trials.controller.trial import launch
from trials.records import StopReason, TrialState
from trials.spec import JobSpec
from trials.study.store import Claimed, JobStore

if TYPE_CHECKING:
    from trials.study.database.leases import SharedJob
from trials.timefmt import rfc3339


def active_attrs(claimed: Claimed, *, job_dir: str, base_output: str | None, worker: str,
                 wall: float) -> dict[str, Any]:
    """A claimed trial's first attributes: ACTIVE on this worker, its folder, its start time."""
    paths = launch.trial_paths(job_dir, base_output, claimed.trial_id)
    return {"state": TrialState.ACTIVE.value, "trial_id": claimed.trial_id, "worker": worker,
            "trial_dir": paths.trial_dir, "start_time": rfc3339(wall)}


def record_trial(store: JobStore, job: JobSpec, metrics: TrialMetrics, run: RunningTrial, *,
                 shared: SharedJob | None, clock: Clock, job_failure: str | None) -> TrialRecorded:
    """Record a trial that ended here: back to the queue, or finished with its outcome.

    ``job_failure``: why the job failed, for a trial it stopped (None: the job did not fail).
    """
    run.reader.poll(final=True)
    metrics.warn_unknown_tags(run)
    metrics.report_new(run)
    measurements = [m.with_elapsed(run.reader.start_time) for m in run.reader.measurements()]
    ran_to_end = run.stopped_early and not run.stopped_by_study and not metrics.ended_early(measurements)
    if ran_to_end:
        run.stopped_early, run.predicted = False, None  # it reached its end while being stopped
    conflicts = run.reader.conflicts
    lost_steps = exits.missing_steps([m.step for m in measurements]) if run.injected else 0
    warnings: list[events.JobWarning] = []
    sid = run.claimed.storage_id
    extra: dict[str, Any] = {"attempts": run.attempts}
    if run.failure and run.failure_detail:
        extra["error_detail"] = list(run.failure_detail)
    if run.reader.unknown_tags:
        extra["unknown_tags"] = sorted(run.reader.unknown_tags)
    if run.reader.missing_steps_warning:
        extra["metrics_warning"] = run.reader.missing_steps_warning
        warnings.append(events.JobWarning(trial_id=run.trial_id,
                                          message=f"trial {run.trial_id}: {run.reader.missing_steps_warning}"))
    repeated = run.reader.repeated_steps_warning
    if repeated:
        extra["metrics_warning"] = "; ".join(filter(None, (extra.get("metrics_warning"), repeated)))
    if run.injected:
        extra["injected_restarts"] = run.injected
    if run.stop_reason is not None and run.stop_reason.requeues:
        # Not the trial's fault: it goes back to the queue and runs again on resume, as a new attempt of
        # the same trial; what this run did stays shown (never REQUESTED: "not yet suggested")
        if run.stop_reason is StopReason.CANCEL:
            # ACTIVE -> STOPPING -> SUCCEEDED | INFEASIBLE, as a trial the service stopped ends
            ended_mono = run.ended_mono if run.ended_mono is not None else clock.monotonic()
            stored = run.claimed.stored.user_attrs if run.claimed.stored is not None else \
                store.storage.get_trial(sid).user_attrs
            outcome = rerun.stopped_outcome(measurements, job.study, reported_tags=run.reader.reported_tags,
                                            end_time=rfc3339(run.wall_at(ended_mono)), why=rerun.CANCELLED)
            store.set_trial_attrs(sid, **extra, **rerun.rerun_attrs(
                outcome, why=rerun.CANCELLED, start_time=stored.get("start_time"),
                previous_runs=stored.get(rerun.PREVIOUS_RUNS_ATTR), attempts=run.attempts))
        else:  # a worker left the job: another one carries the trial on, ACTIVE (suggested, not ended)
            store.set_trial_attrs(sid, **extra, requeued=True)
        store.requeue(sid)
        if shared is not None:
            shared.release(sid)
        return TrialRecorded(requeued=True, conflicts=conflicts, lost_steps=lost_steps,
                             repeated_steps=f"trial {run.trial_id}: {repeated}" if repeated else "",
                             warnings=tuple(warnings), final=events.TrialRequeued(trial_id=run.trial_id))
    # its end: when its last replica exited, even if the loop was busy then (a suggestion, a slow write);
    # its length from the monotonic clock, its end time its start's wall time plus that length
    ended_mono = run.ended_mono if run.ended_mono is not None else clock.monotonic()
    ended = run.wall_at(ended_mono)
    # ACTIVE -> INFEASIBLE when the job failed while it ran: a FAILED job is over (`trials resume
    # --max-failed-trial-count N` runs its trials not yet started), so it does not wait as REQUESTED
    stopped_by_job = (f"The trial was stopped because the job failed: {job_failure}"
                      if run.stop_reason is StopReason.JOB_END else None)
    outcome = finished_trial(
        measurements, job.study, failure=run.failure, reported_tags=run.reader.reported_tags,
        end_time=rfc3339(ended), stopped_early=run.stopped_early,
        stop_detail=run.stop_detail, predicted=run.predicted, stopped_by_job=stopped_by_job,
        custom_job=job.local.custom_job)
    if outcome.succeeded and "final_measurement" not in outcome.attrs:
        extra["final_measurement"] = None  # (a CustomJob's: none of an earlier, stopped run of it shows)
    record_finished(store, number=run.claimed.number, storage_id=sid, outcome=outcome, extra=extra)
    if outcome.succeeded and not run.stopped_early:
        metrics.forget_curves()
    if shared is not None:
        shared.release(sid)
    done = events.TrialDone(
        trial_id=run.trial_id, state=outcome.state, reason=outcome.reason, values=tuple(outcome.values),
        stopped_early=run.stopped_early, steps=len(outcome.measurements),
        seconds=max(0.0, ended_mono - run.start_mono), params=run.claimed.params,
        detail=tuple(run.failure_detail) if run.failure else (),
        last_step=measurements[-1].step if measurements else None,  # reported, not predicted
        final_step=_final_step(outcome.attrs.get("final_measurement")),
        # ended without the spec's metric on its own (not stopped by the job's end): the progress says once what
        # to do about it
        missing_metric=(not outcome.succeeded and not run.failure and not stopped_by_job
                        and "final_measurement" not in outcome.attrs),
        reported_tags=tuple(sorted(run.reader.reported_tags)), metrics_source=run.reader.source,
        ran_to_end=ran_to_end and run.failure is None,
    )
    infeasible = outcome.reason if not outcome.succeeded and not run.failure and not stopped_by_job else None
    return TrialRecorded(succeeded=outcome.succeeded, failure=run.failure, infeasible=infeasible,
                         conflicts=conflicts,
                         lost_steps=lost_steps, repeated_steps=f"trial {run.trial_id}: {repeated}" if repeated else "",
                         warnings=tuple(warnings), final=done)


def _final_step(final: object) -> int | None:
    """The step of a final measurement as recorded (a dict), else None."""
    step = final.get("step") if isinstance(final, dict) else None
    return step if isinstance(step, int) and not isinstance(step, bool) else None
