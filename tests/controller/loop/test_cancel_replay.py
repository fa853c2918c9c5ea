"""A cancelled job's trials replayed: what they did stays shown (start, end, measurements, a final
measurement where the job's rule picks one), and ``trials resume`` runs them again as new attempts of
the same trials without rewriting the stopped run's record. Fake replicas on a fake clock, a real
journal storage, no subprocess (the replay style of test_runner.py)."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

import pytest

from tests.controller.loop.backendkit import FakeBackend, FakeClock, FakeSignals, Script
from trials.controller.jobs import admin, describe, registry
from trials.controller.jobs import run as job_run
from trials.controller.loop.runner import JobRunner
from trials.controller.policy import exits, rerun
from trials.records import JobState
from trials.spec.load import loads_spec

SPEC = """\
metrics: {{loss: minimize}}
parameters:
  x: {{type: double, min: 0.0, max: 1.0}}
command: [python, train.py]
max_trial_count: {n}
parallel_trial_count: {parallel}
{extra}
"""


class Job:
    """One job, run by as many controllers (replayed loops) as a test asks, one after the other."""

    def __init__(self, tmp_path: Path, *, n: int = 3, parallel: int = 2, extra: str = ""):
        spec = loads_spec(SPEC.format(n=n, parallel=parallel, extra=extra), source="t.yaml")
        self.h = registry.create_job(spec, root=str(tmp_path / "jobs"), job_id="cancel", spec_path=None,
                                     storage=None, base_output_dir=None, project_number=None, local_command=None,
                                     seed=1)
        self.clock = FakeClock()
        self.started: list[str] = []

    def run(self, plan: Any, *, at: list[tuple[float, Any]] | None = None, resume: bool = False) -> str:
        h = registry.open_job(self.h.job_id, root=str(Path(self.h.job_dir).parent), storage=None)
        options = job_run.run_options(h, echo=False, grace_period_s=2.0, memory_limit_mb=None, inject_restarts=0.0,
                                      slots=None, seed=1)
        options.suggest_ahead = False
        backend = FakeBackend(self.clock, plan)
        signals = FakeSignals(self.clock, [(self.clock.t - 1000.0 + t, what) for t, what in at or []])
        runner = JobRunner(h.store, h.job, options, emit=lambda e: None, clock=self.clock, backend=backend,
                           signals=signals)
        if resume:
            runner.state.resume_running()
        state = runner.run()
        self.started += [r.env["CLOUD_ML_TRIAL_ID"] for r in backend.started]
        self.h = h
        return state

    def trials(self) -> list[Any]:
        return sorted(self.h.store.frozen_trials(), key=lambda t: t.number)

    def rest(self) -> list[dict[str, Any]]:
        return [describe.trial_to_rest(t, {}, ["loss"]) for t in self.trials() if describe.shown(t)]


def test_a_cancel_keeps_what_the_running_trials_did_and_shows_no_trial_as_requested(tmp_path: Path) -> None:
    job = Job(tmp_path)
    state = job.run(lambda trial, attempt: Script(steps=50), at=[(3.5, signal.SIGINT)])
    assert state == JobState.CANCELLED
    shown = job.rest()
    assert [t["id"] for t in shown] == ["1", "2"]  # trial 3 never started: not shown, as before
    for t in shown:
        # ACTIVE -> STOPPING -> SUCCEEDED: the final measurement the job's rule (LAST) picks of what it reported
        assert t["state"] == "SUCCEEDED", t
        assert {"startTime", "endTime", "measurements", "finalMeasurement"} <= set(t), t
        steps = [int(m["stepCount"]) for m in t["measurements"]]
        assert steps == list(range(1, len(steps) + 1)) and len(steps) >= 3
        assert t["finalMeasurement"]["stepCount"] == str(steps[-1])
        assert t["startTime"] < t["endTime"]
    for t in job.trials()[:2]:
        assert t.state.name == "WAITING"  # the storage: it runs again on resume
        assert exits.waits_to_rerun(t.user_attrs)
        (stopped,) = t.user_attrs[rerun.PREVIOUS_RUNS_ATTR]
        assert stopped["why"] == rerun.CANCELLED and stopped["end_time"] == t.user_attrs["end_time"]
    local = describe.local_details(job.trials())
    assert local["1"]["stopped_early"] and local["1"]["stop_reason"] == rerun.CANCELLED
    _, rows = describe.trial_rows(job.trials(), lambda t: {}, ["loss"])
    assert [r[-1] for r in rows] == [rerun.CANCELLED] * 2


def test_a_trial_cancelled_before_it_reported_is_infeasible_saying_so(tmp_path: Path) -> None:
    job = Job(tmp_path, n=1, parallel=1)
    assert job.run(lambda trial, attempt: Script(steps=5, step_s=10.0), at=[(2.0, signal.SIGTERM)]) == \
        JobState.CANCELLED
    (t,) = job.rest()
    assert t["state"] == "INFEASIBLE" and "startTime" in t and "endTime" in t and "finalMeasurement" not in t
    assert t["infeasibleReason"].startswith(rerun.CANCELLED + " It had not reported the objective metric loss")


def test_resume_runs_cancelled_trials_again_as_new_attempts_keeping_the_stopped_run(tmp_path: Path) -> None:
    job = Job(tmp_path)
    job.run(lambda trial, attempt: Script(steps=50), at=[(3.5, signal.SIGINT)])
    before = {t.number: dict(t.user_attrs) for t in job.trials()[:2]}
    assert job.run(lambda trial, attempt: Script(steps=5, first_step=4)) == JobState.SUCCEEDED
    assert job.started == ["1", "2", "1", "2", "3"]  # the same trials again (same ids), then the one not run
    for t in job.trials()[:2]:
        a = t.user_attrs
        assert a["state"] == "SUCCEEDED" and t.state.name == "COMPLETE"
        assert not exits.waits_to_rerun(a)
        old = before[t.number]
        (stopped,) = a[rerun.PREVIOUS_RUNS_ATTR]  # the stopped run, as it was recorded
        assert stopped == old[rerun.PREVIOUS_RUNS_ATTR][0]
        assert stopped["start_time"] == old["start_time"] and stopped["final_measurement"] == old["final_measurement"]
        assert a["end_time"] > stopped["end_time"] and a["start_time"] >= stopped["end_time"]
        steps = [m["step"] for m in a["measurements"]]
        assert steps[:3] == [1, 2, 3] and steps[-1] == 8  # carried on from the stopped run's steps
    local = describe.local_details(job.trials())
    assert "stopped_early" not in local["1"]


def test_a_new_attempt_shows_nothing_of_the_stopped_runs_end(tmp_path: Path) -> None:
    job = Job(tmp_path, n=1, parallel=1)
    job.run(lambda trial, attempt: Script(steps=50), at=[(3.5, signal.SIGINT)])
    seen: list[dict[str, Any]] = []
    job.run(lambda trial, attempt: Script(steps=50, first_step=4),
            at=[(6.5, lambda: seen.extend(job.rest())), (7.0, signal.SIGINT)])
    (live,) = seen
    # ACTIVE again: nothing of the stopped run's end (its end time, its final measurement) is shown as
    # the new attempt's; its steps are the trial's as the storage holds them live (the new attempt's
    # join them as they are read: a replay's metric file is never "settled" in real time, so not here)
    assert live["state"] == "ACTIVE" and not {"endTime", "finalMeasurement", "infeasibleReason"} & set(live)
    assert [int(m["stepCount"]) for m in live["measurements"]][:3] == [1, 2, 3]
    (t,) = job.trials()
    assert [r["why"] for r in t.user_attrs[rerun.PREVIOUS_RUNS_ATTR]] == [rerun.CANCELLED] * 2


def test_trials_cancelled_without_reports_do_not_stop_their_resume(tmp_path: Path) -> None:
    # three trials stopped alike before they reported: not "the first trials infeasible for one reason"
    job = Job(tmp_path, n=4, parallel=3)
    job.run(lambda trial, attempt: Script(steps=5, step_s=10.0), at=[(2.0, signal.SIGINT)])
    assert [t["state"] for t in job.rest()] == ["INFEASIBLE"] * 3
    admin.check_failure_budget(job.h)  # raises when the job would fail again at once
    assert job.run(lambda trial, attempt: Script(steps=2)) == JobState.SUCCEEDED
    assert [t["state"] for t in job.rest()] == ["SUCCEEDED"] * 4


def test_a_dead_controllers_trials_cancelled_keep_what_it_stored(tmp_path: Path) -> None:
    job = Job(tmp_path, n=2, parallel=2)

    def die() -> None:  # the controller vanishes: its trials stay RUNNING with the steps it stored
        raise SystemExit(9)

    with pytest.raises(SystemExit):
        job.run(lambda trial, attempt: Script(steps=50), at=[(4.5, die)])
    assert len(job.h.store.running_trials()) == 2
    state, _ = admin.cancel(job.h)
    assert state == JobState.CANCELLED
    for t in job.rest():
        assert t["state"] == "SUCCEEDED" and "startTime" in t and "endTime" in t, t
        assert int(t["finalMeasurement"]["stepCount"]) >= 3
    for t in job.trials():
        assert t.state.name == "WAITING" and t.user_attrs[rerun.PREVIOUS_RUNS_ATTR][-1]["why"] == \
            rerun.CANCELLED_ORPHAN
    assert job.run(lambda trial, attempt: Script(steps=2)) == JobState.SUCCEEDED


def test_a_dead_controllers_trials_not_run_again_before_a_cancel_are_shown_as_they_stopped(tmp_path: Path) -> None:
    """A resume that is cancelled before it runs a dead controller's trials again records them as stopped (start,
    stored steps, end), never REQUESTED, and queues them again."""
    job = Job(tmp_path, n=2, parallel=2)

    def die() -> None:
        raise SystemExit(9)

    with pytest.raises(SystemExit):
        job.run(lambda trial, attempt: Script(steps=50), at=[(4.5, die)])
    # Ctrl-C as the resume starts: before its first pass runs them again
    assert job.run(lambda trial, attempt: Script(steps=50), resume=True, at=[(0.0, signal.SIGINT)]) == \
        JobState.CANCELLED
    assert job.started == ["1", "2"]  # (the first controller's): none started again
    rest = job.rest()
    assert [t["state"] for t in rest] == ["SUCCEEDED", "SUCCEEDED"]
    assert all("startTime" in t and "endTime" in t and int(t["finalMeasurement"]["stepCount"]) >= 3 for t in rest)
    for t in job.trials():
        assert t.state.name == "WAITING" and t.user_attrs[rerun.PREVIOUS_RUNS_ATTR][-1]["why"] in (
            rerun.CANCELLED, rerun.CANCELLED_ORPHAN)
    # resumed again, they run to their end; their stopped runs count once, when these end
    assert job.run(lambda trial, attempt: Script(steps=2)) == JobState.SUCCEEDED
    assert [t["state"] for t in job.rest()] == ["SUCCEEDED", "SUCCEEDED"]


@pytest.mark.parametrize("cancel", [True, False])
def test_a_job_ending_before_it_runs_a_dead_controllers_trials_again_shows_them_as_they_stopped(tmp_path, cancel):
    """LoopState.finish_job with trials reclaimed from a dead controller and not run again (a cancel, or a job that
    ended otherwise): recorded as stopped with the steps stored, never REQUESTED, and queued again."""
    from trials.controller.loop.state import LoopState

    job = Job(tmp_path, n=2, parallel=2)

    def die() -> None:
        raise SystemExit(9)

    with pytest.raises(SystemExit):
        job.run(lambda trial, attempt: Script(steps=50), at=[(4.5, die)])
    h = registry.open_job(job.h.job_id, root=str(Path(job.h.job_dir).parent), storage=None)
    options = job_run.run_options(h, echo=False, grace_period_s=2.0, memory_limit_mb=None, inject_restarts=0.0,
                                  slots=None, seed=1)
    state = LoopState(h.store, h.job, options, emit=lambda e: None, clock=job.clock)
    assert state.resume_running() == 2
    state.cancel_requested = cancel
    state.finish_job()
    job.h = h
    for t in job.rest():
        assert t["state"] == "SUCCEEDED" and "startTime" in t and "endTime" in t, t
    why = rerun.CANCELLED_ORPHAN if cancel else rerun.ENDED_ORPHAN
    for t in job.trials():
        assert t.state.name == "WAITING" and t.user_attrs[rerun.PREVIOUS_RUNS_ATTR][-1]["why"] == why
    # the stopped runs waiting to run again are not yet successes for the failure rules (they count when rerun)
    fresh = LoopState(h.store, h.job, options, emit=lambda e: None, clock=job.clock)
    fresh._count_finished()
    assert fresh.n_succeeded == 0
