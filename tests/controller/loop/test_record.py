"""Unit tests of what the loop records of a trial that ended: its outcome in the store, and what it
changes in the job (returned as a TrialRecorded for the runner to apply; nothing else is written)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.controller.loop.backendkit import FakeBackend, FakeClock, Script
from trials.controller.jobs import registry
from trials.controller.jobs import run as job_run
from trials.controller.loop import events
from trials.controller.loop.launcher import TrialLauncher
from trials.controller.loop.metrics import TrialMetrics
from trials.controller.loop.record import active_attrs, record_trial
from trials.controller.loop.running import RunningTrial
from trials.controller.loop.state import LoopState, TrialRecorded
from trials.records import StopReason, TrialState
from trials.spec.load import loads_spec

SPEC = """\
metrics: {loss: minimize}
parameters:
  x: {type: double, min: 0.0, max: 1.0}
command: [python, train.py]
max_trial_count: 3
max_failed_trial_count: 2
"""


class Job:
    def __init__(self, tmp_path: Path):
        self.h = registry.create_job(loads_spec(SPEC, source="t.yaml"), root=str(tmp_path / "jobs"), job_id="rec",
                                     spec_path=None, storage=None, base_output_dir=None, project_number=None,
                                     local_command=None, seed=1)
        self.options = job_run.run_options(self.h, echo=False, grace_period_s=2.0, memory_limit_mb=None,
                                           inject_restarts=0.0, slots=None, seed=1)
        self.clock = FakeClock()
        self.said: list[events.Event] = []
        self.metrics = TrialMetrics(self.h.store, self.h.job, self.said.append)
        backend = FakeBackend(self.clock, lambda t, a: Script())
        self.launcher = TrialLauncher(self.h.job, "rec", self.options, backend=backend, clock=self.clock,
                                      trial_job_rest={}, alloc=None)

    def trial(self, *losses: float) -> RunningTrial:
        claimed = self.h.store.claim(self.h.job.study)
        assert claimed is not None
        self.h.store.set_trial_attrs(claimed.storage_id, **active_attrs(
            claimed, job_dir=self.options.job_dir, base_output=self.options.base_output, worker="w",
            wall=self.clock.wall()))
        run = self.launcher.prepare(claimed, self.clock.monotonic(), [])
        lines = [json.dumps({"loss": str(v), "global_step": str(i + 1), "timestamp": self.clock.wall() + i,
                             "trial": claimed.trial_id}) for i, v in enumerate(losses)]
        Path(run.launches[0].metric_file).write_text("".join(line + "\n" for line in lines))
        run.ended_mono = run.start_mono + 4.0
        return run

    def record(self, run: RunningTrial, job_failure: str | None = None) -> TrialRecorded:
        return record_trial(self.h.store, self.h.job, self.metrics, run, shared=None, clock=self.clock,
                            job_failure=job_failure)

    def attrs(self, run: RunningTrial) -> dict[str, Any]:
        return self.h.store.storage.get_trial(run.claimed.storage_id).user_attrs


def test_a_trial_that_reported_its_metric_succeeds_with_its_last_measurement(tmp_path):
    job = Job(tmp_path)
    run = job.trial(0.5, 0.4, 0.3)
    rec = job.record(run)
    assert (rec.succeeded, rec.failure, rec.requeued) == (True, None, False)
    assert isinstance(rec.final, events.TrialDone)
    assert (rec.final.state, rec.final.values, rec.final.steps, rec.final.seconds) == (
        TrialState.SUCCEEDED, (0.3,), 3, 4.0)
    attrs = job.attrs(run)
    assert attrs["state"] == "SUCCEEDED" and attrs["final_measurement"]["step"] == 3
    assert job.said == []  # what it says comes back in the record, for the runner to say in order


def test_a_failed_trial_is_infeasible_with_its_failure_for_the_jobs_failure_rule(tmp_path):
    job = Job(tmp_path)
    run = job.trial(0.5)
    run.failure, run.failure_detail = "The replica workerpool0-0 exited with a non-zero status of 1.", ("E: x",)
    rec = job.record(run)
    assert not rec.succeeded and rec.failure == run.failure
    assert isinstance(rec.final, events.TrialDone) and rec.final.detail == ("E: x",)
    assert job.attrs(run)["state"] == "INFEASIBLE" and job.attrs(run)["error_detail"] == ["E: x"]


def test_a_trial_the_job_stopped_when_it_failed_says_why(tmp_path):
    job = Job(tmp_path)
    run = job.trial(0.5)
    run.stop_reason = StopReason.JOB_END
    rec = job.record(run, job_failure="Trial 1: boom")
    assert isinstance(rec.final, events.TrialDone) and rec.final.state is TrialState.INFEASIBLE
    assert rec.final.reason == "The trial was stopped because the job failed: Trial 1: boom"
    assert rec.failure is None  # it is not counted as one more failure


def test_a_cancelled_trial_goes_back_to_the_queue_and_keeps_what_it_reported(tmp_path):
    job = Job(tmp_path)
    run = job.trial(0.5, 0.4)
    run.stop_reason = StopReason.CANCEL
    rec = job.record(run)
    assert rec.requeued and rec.final == events.TrialRequeued(trial_id=run.trial_id)
    attrs = job.attrs(run)
    # what it did stays (never REQUESTED, "not yet suggested"): SUCCEEDED with the last of its steps
    assert attrs["state"] == "SUCCEEDED" and attrs["start_time"] and attrs["end_time"] and attrs["requeued"] is True
    assert [m["step"] for m in attrs["measurements"]] == [1, 2] and attrs["final_measurement"]["step"] == 2
    assert [r["why"] for r in attrs["previous_runs"]] == ["The trial was stopped because the job was cancelled."]
    assert job.h.store.waiting_trials()  # it runs again on resume


def test_the_job_applies_a_record_its_failure_rule_once(tmp_path):
    job = Job(tmp_path)
    state = LoopState(job.h.store, job.h.job, job.options, emit=job.said.append, clock=job.clock)
    ok = TrialRecorded(succeeded=True, conflicts=1, lost_steps=2, repeated_steps="trial 1: repeats")
    assert state.trial_recorded(ok, "1") == "trial 1: repeats"  # said once per job
    assert state.trial_recorded(ok, "2") == ""
    assert (state.n_succeeded, state.conflicts_total, state.lost_steps_total) == (2, 2, 4)
    bad = TrialRecorded(failure="exit 1")
    state.trial_recorded(bad, "3")
    assert state.job_error is None  # max_failed_trial_count 2
    state.trial_recorded(TrialRecorded(requeued=True, failure="not counted"), "4")
    assert state.n_failed == 1
    state.trial_recorded(bad, "5")
    assert state.n_failed == 2 and state.job_error and "Trial 3: exit 1" in state.job_error


def test_a_trial_prepared_slowly_ends_when_its_replica_exited_not_later(tmp_path):
    """The run's start is the pass's moment, in wall time too: a start read after the folder was made
    (0.7 s on this fake clock) moved the recorded endTime 0.7 s past the exit, past the next trial's
    startTime (seen as 3 trials overlapping in a 2-slot job on a loaded machine)."""
    job = Job(tmp_path)
    claimed = job.h.store.claim(job.h.job.study)
    assert claimed is not None
    now = job.clock.monotonic()
    job.clock.t += 0.7  # making the trial's folder and files took this long
    run = job.launcher.prepare(claimed, now, [])
    assert run.start_wall == 1_800_000_000.0 + now
    assert run.wall_at(now + 4.0) == 1_800_000_000.0 + now + 4.0
