"""What the job loop records of a trial: its first attributes when claimed, and its end (back to the
queue, or finished with its outcome), with the warnings its metrics gave."""

from __future__ import annotations

from typing import Any

from trials.controller.loop.metrics import TrialMetrics
from trials.controller.loop.running import RunningTrial
from trials.controller.loop.state import JobProgress
from trials.controller.policy import exits as policy
from trials.controller.policy.outcome import finished_trial, record_finished
from trials.controller.trial import launch
from trials.records import StopReason, TrialState, measurement_to_dict
from trials.study.store import Claimed
from trials.timefmt import rfc3339


def active_attrs(loop: JobProgress, claimed: Claimed) -> dict[str, Any]:
    """A claimed trial's first attributes: ACTIVE on this worker, its folder, its start time."""
    paths = launch.trial_paths(loop.opt.job_dir, loop.opt.base_output, claimed.trial_id)
    return {"state": TrialState.ACTIVE.value, "trial_id": claimed.trial_id, "worker": loop.worker_name,
            "trial_dir": paths.trial_dir, "start_time": rfc3339(loop.clock.wall())}


def record_trial(loop: JobProgress, metrics: TrialMetrics, run: RunningTrial) -> None:
    """Record a trial that ended here: back to the queue, or finished with its outcome."""
    run.reader.poll(final=True)
    metrics.warn_unknown_tags(run)
    metrics.report_new(run)
    measurements = [m.with_elapsed(run.reader.start_time) for m in run.reader.measurements()]
    if run.stopped_early and not metrics.ended_early(measurements):
        run.stopped_early, run.predicted = False, None  # it reached its end while being stopped
    loop.conflicts_total += run.reader.conflicts
    if run.injected:
        loop.lost_steps_total += policy.missing_steps([m.step for m in measurements])
    sid = run.claimed.storage_id
    extra: dict[str, Any] = {"attempts": run.attempts}
    if run.failure and run.failure_detail:
        extra["error_detail"] = list(run.failure_detail)
    if run.reader.unknown_tags:
        extra["unknown_tags"] = sorted(run.reader.unknown_tags)
    if run.reader.missing_steps_warning:
        extra["metrics_warning"] = run.reader.missing_steps_warning
        loop.progress("warning", {"trial_id": run.trial_id,
                                  "message": f"trial {run.trial_id}: {run.reader.missing_steps_warning}"})
    repeated = run.reader.repeated_steps_warning
    if repeated:
        extra["metrics_warning"] = "; ".join(filter(None, (extra.get("metrics_warning"), repeated)))
        if not loop.warned_repeated_steps:  # once per job: every trial of a trainer does it
            loop.warned_repeated_steps = True
            loop.progress("warning", {"trial_id": run.trial_id, "message": f"trial {run.trial_id}: {repeated}"})
    if run.injected:
        extra["injected_restarts"] = run.injected
    if run.stop_reason is not None and run.stop_reason.requeues:
        # Not the trial's fault: it goes back to the queue and runs again on resume.
        # ACTIVE -> REQUESTED: a trial not yet run again has no start time and no measurements
        # (what this run reported stays in its folder and in previous_measurements)
        loop.store.set_trial_attrs(sid, **extra, state=TrialState.REQUESTED.value, end_time=None,
                                   start_time=None, measurements=None, requeued=True,
                                   previous_measurements=[measurement_to_dict(m) for m in measurements])
        loop.store.requeue(sid)
        if loop.shared is not None:
            loop.shared.release(sid)
        loop.progress("trial_requeued", {"trial_id": run.trial_id})
        return
    # its end: when its last replica exited, even if the loop was busy then (a suggestion, a slow write);
    # its length from the monotonic clock, its end time its start's wall time plus that length
    ended_mono = run.ended_mono if run.ended_mono is not None else loop.clock.monotonic()
    ended = run.wall_at(ended_mono)
    # ACTIVE -> INFEASIBLE when the job failed while it ran: a FAILED job is over (`trials resume
    # --max-failed-trial-count N` runs its trials not yet started), so it does not wait as REQUESTED
    stopped_by_job = (f"The trial was stopped because the job failed: {loop.first_failure or loop.job_error}"
                      if run.stop_reason is StopReason.JOB_END else None)
    outcome = finished_trial(
        measurements, loop.job.study, failure=run.failure, reported_tags=run.reader.reported_tags,
        end_time=rfc3339(ended), stopped_early=run.stopped_early,
        stop_detail=run.stop_detail, predicted=run.predicted, stopped_by_job=stopped_by_job)
    record_finished(loop.store, number=run.claimed.number, storage_id=sid, outcome=outcome, extra=extra)
    if outcome.succeeded and not run.stopped_early:
        metrics.forget_curves()
    if loop.shared is not None:
        loop.shared.release(sid)
    loop.count_finished_trial(run.trial_id, succeeded=outcome.succeeded, failure=run.failure)
    loop.progress("trial_done", {
        "trial_id": run.trial_id, "state": outcome.state.value, "reason": outcome.reason,
        "values": outcome.values, "stopped_early": run.stopped_early, "steps": len(outcome.measurements),
        "seconds": max(0.0, ended_mono - run.start_mono), "params": run.claimed.params,
        **({"detail": list(run.failure_detail)} if run.failure and run.failure_detail else {}),
        "last_step": measurements[-1].step if measurements else None,  # reported, not predicted
        # ended without the spec's metric: the progress says once what to do about it
        "missing_metric": not outcome.succeeded and not run.failure and "final_measurement" not in outcome.attrs,
        "reported_tags": sorted(run.reader.reported_tags), "metrics_source": run.reader.source,
    })
