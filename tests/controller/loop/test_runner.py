"""The job loop replayed: fake replicas on a fake clock, a real journal storage, no subprocess.

Each test is a history (what every replica attempt does, when signals come) and what the job must
record from it. Modelled on honcho's tests/test_manager.py.
"""

from __future__ import annotations

import signal
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jobkit import write_meta

from tests.controller.loop.backendkit import FakeBackend, FakeClock, FakeSignals, Script
from trials import protocol
from trials.controller.jobs import registry
from trials.controller.jobs import run as job_run
from trials.controller.loop.runner import JobRunner
from trials.records import JobState
from trials.spec.load import loads_spec
from trials.timefmt import rfc3339

SPEC = """\
metrics: {{loss: minimize}}
parameters:
  x: {{type: double, min: 0.0, max: 1.0}}
command: [python, train.py]
max_trial_count: {n}
parallel_trial_count: {parallel}
max_failed_trial_count: {max_failed}
{extra}
"""


@dataclass
class Run:
    state: str
    trials: list[Any]
    factory: FakeBackend
    events: list[tuple[str, dict[str, Any]]]
    runner: JobRunner
    job_dir: Path

    def attempts(self, n: int) -> list[int]:
        return [a["exitStatus"] for a in self.trials[n].user_attrs.get("attempts", []) if "exitStatus" in a]

    def steps(self, n: int) -> list[int]:
        return [m["step"] for m in self.trials[n].user_attrs["measurements"]]


def replay(tmp_path: Path, plan: Callable[[str, int], Script], *, n: int = 1, parallel: int = 1,
           max_failed: int = 0, extra: str = "", at: list[tuple[float, Any]] | None = None,
           inject: float = 0.0, seed: int = 1, shared: Any = None,
           hooks: Callable[[JobRunner], list[Any]] | None = None,
           suggestions: Any = None) -> Run:
    job = loads_spec(SPEC.format(n=n, parallel=parallel, max_failed=max_failed, extra=extra), source="t.yaml")
    h = registry.create_job(job, root=str(tmp_path / "jobs"), job_id="replay", spec_path=None, storage=None,
                              base_output_dir=None, project_number=None, local_command=None, seed=seed)
    options = job_run.run_options(h, echo=False, grace_period_s=2.0, memory_limit_mb=None,
                                  inject_restarts=inject, slots=None, seed=seed, shared=shared)
    options.suggest_ahead = False  # no sampler process beside a replay; ``suggestions`` scripts one
    clock = FakeClock()
    factory = FakeBackend(clock, plan)
    events: list[tuple[str, dict[str, Any]]] = []
    signals = FakeSignals(clock, at)
    runner = JobRunner(h.store, h.job, options, emit=lambda event: events.append((event.name, event.fields())),
                       clock=clock,
                       backend=factory, signals=signals,
                       suggestions=suggestions(clock, h.store) if suggestions is not None else None)
    if hooks is not None:
        signals.at = sorted(signals.at + hooks(runner), key=lambda item: item[0])
    state = runner.run()
    trials = sorted(h.store.frozen_trials(), key=lambda t: t.number)
    return Run(state=state, trials=trials, factory=factory, events=events, runner=runner,
               job_dir=Path(h.job_dir))


def test_a_replica_that_crashes_once_is_restarted_and_the_trial_succeeds(tmp_path: Path) -> None:
    run = replay(tmp_path, lambda trial, attempt: Script(steps=5, crash_at_step=3 if attempt == 0 else None))
    assert run.state == JobState.SUCCEEDED
    t = run.trials[0]
    assert t.user_attrs["state"] == "SUCCEEDED"
    assert run.steps(0) == [1, 2, 3, 4, 5]
    assert run.attempts(0) == [139, 0]
    assert "exited with a non-zero status of 139" in t.user_attrs["attempts"][0]["reason"]
    assert [r.env[protocol.ENV_ATTEMPT] for r in run.factory.started] == ["0", "1"]


def test_a_replica_that_keeps_crashing_uses_five_restarts_then_three_job_retries(tmp_path: Path) -> None:
    run = replay(tmp_path, lambda trial, attempt: Script(steps=5, crash_at_step=2, crash_code=3))
    assert run.state == JobState.FAILED
    t = run.trials[0]
    assert t.user_attrs["state"] == "INFEASIBLE" and t.user_attrs["failed"]
    assert run.attempts(0) == [3] * 24  # 4 runs of the CustomJob, each the first start and 5 restarts
    assert "exited with a non-zero status of 3" in t.user_attrs["infeasible_reason"]
    assert "restarted 5 times, the limit" in t.user_attrs["error_detail"][-1]
    assert "retried 3 times" in t.user_attrs["error_detail"][-1]
    worker = [f"worker restart {i} of 5" for i in range(1, 6)]
    assert [a.get("budget") for a in t.user_attrs["attempts"][:23]] == [
        *worker, "job retry 1 of 3, after 5 worker restarts", *worker, "job retry 2 of 3, after 5 worker restarts",
        *worker, "job retry 3 of 3, after 5 worker restarts", *worker]
    assert len(run.factory.started) == 24


def test_a_worker_budget_used_up_after_a_transient_retry_shares_the_three_job_retries(tmp_path: Path) -> None:
    # the first run dies of SIGSEGV (job retry 1), every later one exits 3: restarts, then retries 2 and 3
    run = replay(tmp_path, lambda trial, attempt: Script(steps=5, crash_at_step=2,
                                                         crash_code=139 if attempt == 0 else 3))
    budgets = [a.get("budget") for a in run.trials[0].user_attrs["attempts"] if a.get("budget")]
    assert budgets[0] == "job retry 1 of 3"
    assert budgets.count("job retry 2 of 3, after 5 worker restarts") == 1
    assert budgets.count("job retry 3 of 3, after 5 worker restarts") == 1
    assert run.attempts(0) == [139] + [3] * 18


def test_a_transient_exit_retries_the_custom_job_three_times(tmp_path: Path) -> None:
    run = replay(tmp_path, lambda trial, attempt: Script(steps=5, crash_at_step=2))  # SIGSEGV: 139
    t = run.trials[0]
    assert t.user_attrs["state"] == "INFEASIBLE"
    assert run.attempts(0) == [139] * 4  # the first run and 3 job retries
    assert [a.get("budget") for a in t.user_attrs["attempts"][:3]] == [
        f"job retry {i} of 3" for i in range(1, 4)]
    assert "the limit for transient exits" in t.user_attrs["error_detail"][-1]


def test_an_exit_between_two_polls_is_classified_on_the_next_pass(tmp_path: Path) -> None:
    # The bug of issue 11 §1: the replica is running at the pass's poll, then exits before a later
    # poll of the same pass. Its exit must be classified (a restart), never judged unrecorded.
    run = replay(tmp_path, lambda trial, attempt: Script(steps=4, exit_on_poll=2 if attempt == 0 else None))
    t = run.trials[0]
    assert t.user_attrs["state"] == "SUCCEEDED"
    assert run.attempts(0) == [139, 0]
    assert run.steps(0) == [1, 2, 3, 4]


def test_a_trial_that_ends_while_the_loop_waits_on_a_suggestion_is_recorded_at_its_exit(tmp_path: Path) -> None:
    # Trial 2 exits at 10 s while the loop is inside trial 3's suggestion (20 s, as OSS Vizier's can
    # take): its end time is its exit's, not the time the loop came back (before: 23 s).
    def slow_third_claim(runner: JobRunner) -> list[Any]:
        claim, calls = runner.state.next_claim, []

        def next_claim(now: float, *rest: Any) -> Any:
            calls.append(now)
            if len(calls) == 3:
                runner.clock.sleep(20.0)  # type: ignore[attr-defined]
            return claim(now, *rest)

        runner.state.next_claim = next_claim  # type: ignore[method-assign]
        return []

    # the timeout counts from a trial's start: trial 3's (12 s to run) starts after its 20 s suggestion
    run = replay(tmp_path, lambda trial, attempt: Script(steps={"1": 3, "2": 10}.get(trial, 12)), n=3,
                 parallel=2, hooks=slow_third_claim, extra="timeout: 15")
    assert run.state == JobState.SUCCEEDED, [t.user_attrs.get("infeasible_reason") for t in run.trials]
    ends = {t.number + 1: t.user_attrs["end_time"] for t in run.trials}
    assert ends[2] == rfc3339(1_800_000_000.0 + 1000.0 + 10.0), ends
    assert run.trials[1].user_attrs["attempts"][-1]["time"] == ends[2]
    assert ends[3] == rfc3339(1_800_000_000.0 + 1000.0 + 23.0 + 12.0), ends  # it started after the suggestion
    seconds = {d["trial_id"]: round(d["seconds"], 6) for e, d in run.events if e == "trial_done"}
    assert seconds == {"1": 3.0, "2": 10.0, "3": 12.0}, seconds  # the progress line's "after 10.0s"


def test_chaos_injection_during_start_up_restarts_the_replica(tmp_path: Path) -> None:
    # The trainer dies at once on SIGTERM, before it reported anything: every injection must end
    # an attempt that is restarted, and every trial ends with all its steps.
    run = replay(tmp_path, lambda trial, attempt: Script(steps=3, step_s=1.0), n=4, parallel=2,
                 inject=2.0, seed=3)
    assert run.runner.injected_total > 0
    for i, t in enumerate(run.trials):
        assert t.user_attrs["state"] == "SUCCEEDED", t.user_attrs
        assert run.steps(i) == [1, 2, 3]
        exits = run.attempts(i)
        assert exits[-1] == 0 and set(exits[:-1]) <= {143}
        assert len(exits) - 1 == t.user_attrs.get("injected_restarts", 0)
    assert any(e == "injected_restart" for e, _ in run.events)
    assert run.runner.state.lost_steps_total == 0


def test_an_exit_during_a_stop_is_recorded_not_restarted(tmp_path: Path) -> None:
    # A cancel stops the trial; the replica crashes (exit 1) while stopping: not a failure, no
    # restart; the trial goes back to the queue and the job is CANCELLED.
    run = replay(tmp_path, lambda trial, attempt: Script(steps=10, term_code=1), at=[(2.5, signal.SIGTERM)])
    assert run.state == JobState.CANCELLED
    t = run.trials[0]
    assert t.user_attrs["state"] == "SUCCEEDED"  # with the steps it reported (see test_cancel_replay.py)
    assert t.state.name == "WAITING"
    assert run.attempts(0) == [1]
    assert len(run.factory.started) == 1
    assert run.factory.started[0].signals[0] == signal.SIGTERM


def test_cancel_stops_every_replica_and_requeues_the_trials(tmp_path: Path) -> None:
    run = replay(tmp_path, lambda trial, attempt: Script(steps=50, on_term="ignore"), n=3, parallel=2,
                 at=[(1.5, signal.SIGINT)])
    assert run.state == JobState.CANCELLED
    started = run.factory.started
    assert len(started) == 2
    for r in started:
        assert r.signals[:2] == [signal.SIGTERM, signal.SIGKILL]  # the grace period ran out
    assert [t.user_attrs.get("state") for t in run.trials[:2]] == ["SUCCEEDED", "SUCCEEDED"]  # what they did
    assert all(t.state.name == "WAITING" for t in run.trials)
    assert ("job_cancelling", {}) in run.events


def test_a_trial_over_its_timeout_is_stopped_and_fails(tmp_path: Path) -> None:
    run = replay(tmp_path, lambda trial, attempt: Script(steps=100), extra="timeout: 5")
    t = run.trials[0]
    assert t.user_attrs["state"] == "INFEASIBLE"
    assert "maximum running time of 5s" in t.user_attrs["infeasible_reason"]
    assert run.attempts(0) == [143]
    assert run.state == JobState.FAILED
    assert (run.job_dir / "1" / protocol.STOP_FILE).exists()


def test_early_stopping_stops_a_worse_trial(tmp_path: Path) -> None:
    # the median rule waits for 5 trials (MEDIAN_MIN_TRIALS); each of trials 1-10 runs ahead of every trial
    # before it, trial 11 behind all of them
    offsets = {str(k): -float(k) for k in range(1, 11)} | {"11": 10.0}
    run = replay(tmp_path, lambda trial, attempt: Script(steps=10, offset=offsets.get(trial, 0.0)),
                 n=11, extra="stopping: {type: median}")
    assert run.state == JobState.SUCCEEDED
    *completed, worse = run.trials
    assert [t.state.name for t in completed] == ["COMPLETE"] * 10
    assert worse.user_attrs["stopped_early"] and worse.user_attrs["state"] == "SUCCEEDED"
    assert worse.state.name == "PRUNED"
    assert len(run.steps(10)) < 10
    assert run.attempts(10) == [143]
    assert run.factory.started[10].signals[0] == signal.SIGTERM
    assert (run.job_dir / "11" / protocol.STOP_FILE).exists()


class FakeShared:
    """The worker's view of a database job, minimal: one worker, the lease lost at a set time."""

    me = "host:1"
    heartbeat_s = 1.0
    n_waiting = n_running = 0

    def __init__(self) -> None:
        self.store: Any = None
        self.lose: set[int] = set()
        self.released: list[int] = []

    def claim(self, study: Any, *, cap: int, **suggested: Any) -> Any:
        return self.store.claim(study, **suggested)

    def beat_due(self) -> bool:
        return True

    def beat(self, ids: list[int]) -> list[int]:
        return [i for i in ids if i in self.lose]

    def owns(self, storage_id: int) -> bool:
        return storage_id not in self.lose

    def release(self, storage_id: int) -> None:
        self.released.append(storage_id)

    def counts(self) -> tuple[int, int]:
        return (0, 0)

    def others_active(self) -> int:
        return 0

    def requeue_stale(self) -> int:
        return 0


def test_a_worker_that_lost_its_lease_stops_the_replicas_and_writes_nothing(tmp_path: Path) -> None:
    shared = FakeShared()

    def hooks(runner: JobRunner) -> list[Any]:
        shared.store = runner.store
        return [(2.5, lambda: shared.lose.add(runner.running["1"].claimed.storage_id))]

    run = replay(tmp_path, lambda trial, attempt: Script(steps=10), shared=shared, hooks=hooks)
    t = run.trials[0]
    assert ("trial_requeued", {"trial_id": "1", "lost": True}) in run.events
    assert run.factory.started[0].signals[0] == signal.SIGTERM
    assert "end_time" not in t.user_attrs and t.user_attrs["state"] == "ACTIVE"  # the new owner records it
    assert len(t.intermediate_values) <= 3  # nothing written after the lease was lost
    assert not (run.job_dir / "1" / protocol.STOP_FILE).exists()  # its folder is the new owner's
    assert not any(e == "trial_done" for e, _ in run.events)


# --- issue 23: the job's record and its states ------------------------------------------------------
def test_a_trial_stopped_because_the_job_failed_ends_infeasible_and_does_not_count_as_failed(tmp_path: Path) -> None:
    run = replay(tmp_path, lambda trial, attempt: Script(steps=2, crash_at_step=2, crash_code=1) if trial == "1"
                 else Script(steps=50), n=4, parallel=2)
    assert run.state == JobState.FAILED
    stopped = run.trials[1].user_attrs
    assert stopped["state"] == "INFEASIBLE" and stopped["stopped_by_job"] and not stopped.get("failed")
    assert stopped["infeasible_reason"].startswith("The trial was stopped because the job failed: Trial 1: ")
    assert run.trials[1].state.name == "FAIL"  # over: not WAITING to run again
    assert [t.state.name for t in run.trials[2:]] == ["WAITING", "WAITING"]


def test_a_job_resumed_with_its_failures_over_the_budget_fails_again_at_once(tmp_path: Path) -> None:
    first = replay(tmp_path, lambda trial, attempt: Script(steps=2, crash_at_step=1, crash_code=1), n=3)
    assert first.state == JobState.FAILED
    clock = FakeClock()
    factory = FakeBackend(clock, lambda trial, attempt: Script(steps=2))
    again = JobRunner(first.runner.store, first.runner.job, first.runner.opt, clock=clock, backend=factory,
                      signals=FakeSignals(clock, None))
    assert again.run() == JobState.FAILED  # not SUCCEEDED because nothing more failed
    assert factory.started == []


def test_a_cancel_seen_at_the_end_cancels_only_what_is_left(tmp_path: Path) -> None:
    run = replay(tmp_path, lambda trial, attempt: Script(steps=2), n=1)
    assert run.state == JobState.SUCCEEDED
    store = run.runner.store
    write_meta(store, state=JobState.CANCELLING.value)  # a `trials cancel` after the last trial finished
    assert run.runner.state.finish_job() == JobState.SUCCEEDED
    store.add_trials(1, run.runner.job)
    write_meta(store, state=JobState.CANCELLING.value)  # ... and with a trial that never ran
    assert run.runner.state.finish_job() == JobState.CANCELLED


def test_the_end_time_follows_the_start_whatever_the_wall_clock_does(tmp_path: Path) -> None:
    class JumpingClock(FakeClock):
        def wall(self) -> float:  # set back 2 h once the trial runs
            return super().wall() - (7200.0 if self.t > 1000.5 else 0.0)

    job = loads_spec(SPEC.format(n=1, parallel=1, max_failed=0, extra=""), source="t.yaml")
    h = registry.create_job(job, root=str(tmp_path / "jobs"), job_id="clock", spec_path=None, storage=None,
                              base_output_dir=None, project_number=None, local_command=None)
    options = job_run.run_options(h, echo=False, grace_period_s=2.0, memory_limit_mb=None, inject_restarts=0.0,
                                  slots=None, seed=1)
    clock = JumpingClock()
    events: list[tuple[str, dict[str, Any]]] = []
    runner = JobRunner(h.store, h.job, options, emit=lambda event: events.append((event.name, event.fields())),
                       clock=clock,
                       backend=FakeBackend(clock, lambda trial, attempt: Script(steps=3)),
                       signals=FakeSignals(clock, None))
    assert runner.run() == JobState.SUCCEEDED
    from trials.timefmt import parse_rfc3339

    meta = h.store.meta()
    assert meta.end_time is not None and meta.start_time is not None
    assert parse_rfc3339(meta.end_time) >= parse_rfc3339(meta.start_time)
    trial = h.store.frozen_trials()[0].user_attrs
    assert parse_rfc3339(trial["end_time"]) >= parse_rfc3339(trial["start_time"])
    done = next(d for e, d in events if e == "trial_done")
    assert 3.0 <= done["seconds"] < 10.0  # the fake clock's own seconds, not -7200


def _count_journal_writes(monkeypatch: Any, job_dir_name: str = "journal.log") -> list[int]:
    """Every fsync of the journal file (one a journal write) is counted."""
    import os

    real = os.fsync
    count = [0]

    def fsync(fd: int) -> None:
        if os.readlink(f"/proc/self/fd/{fd}").endswith(job_dir_name):
            count[0] += 1
        real(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    return count


def test_the_running_trials_steps_are_read_on_one_clock_and_written_together(tmp_path: Path, monkeypatch: Any) -> None:
    writes = _count_journal_writes(monkeypatch)
    run = replay(tmp_path, lambda trial, attempt: Script(steps=12, step_s=1.0), n=2, parallel=2)
    assert run.state == JobState.SUCCEEDED
    assert run.steps(0) == run.steps(1) == list(range(1, 13))  # every step of both recorded
    # 12 s of both trials reporting a step a second: a write a second for both (a trial's own clock
    # wrote each trial's step alone: 24), beside the job's creation, start and end and each trial's claim
    # and record
    assert writes[0] <= 12 + 7, writes[0]


def test_the_metrics_clock_ticks_on_multiples_of_its_period() -> None:
    from trials.controller.loop.runner import next_tick

    assert next_tick(1000.3, 1.0) == 1001.0
    assert next_tick(1001.0, 1.0) == 1002.0  # a read due now: the next one a period later
    assert next_tick(0.1, 0.25) == 0.25


def test_a_metrics_file_found_in_the_middle_of_a_rewrite_is_read_again_on_the_next_pass(tmp_path: Path) -> None:
    # 20 reports a second into a file that keeps the last 100 (cloudml-hypertune) and is torn whenever
    # the one-second clock reads it (the first 0.12 s of every second): waiting for the next tick found
    # it torn again until the trial ended, and only its last 100 steps were recorded
    run = replay(tmp_path, lambda trial, attempt: Script(steps=130, step_s=0.05, cap=100, torn_s=0.12))
    assert run.state == JobState.SUCCEEDED
    assert run.steps(0) == list(range(1, 131))
    assert "metrics_warning" not in run.trials[0].user_attrs


def test_a_trial_reporting_faster_than_its_file_keeps_is_read_on_a_faster_clock(
        tmp_path: Path, monkeypatch: Any) -> None:
    # 200 reports a second into a file that keeps the last 100: read once a second, half of every
    # second's reports were gone before the read; a trial that reports slowly stays on the slow clock
    writes = _count_journal_writes(monkeypatch)
    run = replay(tmp_path, lambda trial, attempt: Script(steps=300, step_s=0.005, cap=100))
    assert run.state == JobState.SUCCEEDED
    assert run.steps(0) == list(range(1, 301))
    assert "metrics_warning" not in run.trials[0].user_attrs
    assert writes[0] <= 30, writes[0]  # 1.5 s of reads every 1/8 s (25 reports each), not every pass


def test_the_metrics_clock_halves_for_a_trial_that_reports_fast() -> None:
    from trials.controller.loop.runner import metrics_period

    assert metrics_period(1.0, 0, 1.0) == 1.0
    assert metrics_period(1.0, 25, 1.0) == 1.0  # a quarter of the file a read: as slow as it gets
    assert metrics_period(1.0, 26, 1.0) == 0.5
    assert metrics_period(1.0, 66, 1.0) == 0.25  # two metrics a step, 33 steps a second
    assert metrics_period(1.0, 20, 0.1) == 0.125  # the rate, not the count: 200 a second
    assert metrics_period(1.0, 10_000, 1.0) == 0.0625  # never faster than a sixteenth
    assert metrics_period(1.0, 5, 0.0) == 0.0625  # (no time between two reads: as fast as it gets)


def test_a_trials_record_and_the_next_trials_claim_are_one_write_made_before_it_starts(
        tmp_path: Path, monkeypatch: Any) -> None:
    import json

    from tests.controller.loop.backendkit import FakeBackend

    writes = _count_journal_writes(monkeypatch)
    seen: list[tuple[str, bool]] = []
    real_start = FakeBackend.start

    def start(self: FakeBackend, request: Any) -> Any:  # what the journal file holds when a trial starts
        trial = request.env[protocol.ENV_TRIAL_ID]
        records = [json.loads(line) for line in (tmp_path / "jobs" / "replay" / "journal.log").read_text().splitlines()]
        seen.append((trial, any(r.get("user_attr", {}).get("trial_id") == trial for r in records)))
        return real_start(self, request)

    monkeypatch.setattr(FakeBackend, "start", start)
    run = replay(tmp_path, lambda trial, attempt: Script(steps=2, step_s=1.0), n=4, parallel=1)
    assert run.state == JobState.SUCCEEDED
    assert [t.state.name for t in run.trials] == ["COMPLETE"] * 4
    assert seen == [("1", True), ("2", True), ("3", True), ("4", True)]  # claimed in the file before it started
    # the job's creation, its start and its end; trial 1's claim; each record with the next claim (the
    # last alone), and each trial's one metric read of its 2 steps: 3 + 1 + 4 + 4 (each claim alone: 15)
    assert writes[0] <= 12, writes[0]
    told = [name for name, _ in run.events if name in ("trial_started", "trial_done")]
    assert told == ["trial_started", "trial_done"] * 4  # each trial is told started after the last one's end
