"""Unit tests of the loop's pure exit decision (``decide_exit``) and of one running trial's bookkeeping
(``RunningTrial``: exits booked once, restart budgets, what a chaos injection may stop)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.controller.loop.backendkit import FakeClock, FakeReplica, Script
from trials.controller.backend.protocol import ReplicaExit
from trials.controller.loop.running import ExitAction, RunningTrial, decide_exit
from trials.controller.trial import launch
from trials.controller.trial.metrics_reader import TrialMetricsReader
from trials.records import StopReason
from trials.study.store import Claimed


def decide(status: int, **kw: object):
    args: dict[str, object] = dict(replica="workerpool0-0", is_primary=True, oom_killed=False, told_to_stop=False,
                                   trial_stop=None, restart_pending=False, n_crash_restarts=0)
    args.update(kw)
    return decide_exit(status, **args)  # type: ignore[arg-type]


def test_the_primary_exiting_zero_ends_the_trial_and_another_replica_waits_for_it():
    assert decide(0).action is ExitAction.SUCCESS
    assert decide(0, is_primary=False, replica="workerpool1-0").action is ExitAction.WAIT


@pytest.mark.parametrize("why", [StopReason.EARLY, StopReason.CANCEL, StopReason.TIMEOUT, StopReason.FAILED,
                                 StopReason.SUCCESS, StopReason.JOB_END, StopReason.LEAVE])
def test_an_exit_the_loop_asked_for_is_recorded_not_judged(why):
    for status in (0, 1, 137, 143, 139):
        assert decide(status, trial_stop=why, told_to_stop=True).action is ExitAction.RECORD


def test_a_replica_stopped_to_be_restarted_is_recorded_whatever_its_status():
    assert decide(1, restart_pending=True).action is ExitAction.RECORD


def test_user_errors_fail_at_once_with_vertex_words_and_the_exception_as_detail():
    tail = ["Traceback (most recent call last):", '  File "t.py", line 3, in <module>', "ValueError: lr", ""]
    d = decide(1, stderr_tail=tail)
    assert d.action is ExitAction.FAIL
    assert d.message == "The replica workerpool0-0 exited with a non-zero status of 1. Termination reason: Error."
    assert d.detail[0] == "ValueError: lr"


def test_other_exits_restart_the_replica_within_its_budget_then_fail():
    d = decide(3, n_crash_restarts=0)
    assert (d.action, d.budget) == (ExitAction.RESTART, "worker restart 1 of 5")
    assert d.message and "status of 3" in d.message  # the restarted attempt's reason
    assert decide(3, n_crash_restarts=5).action is ExitAction.RETRY_JOB  # the job runs again
    assert decide(3, n_crash_restarts=5, n_job_retries=3).action is ExitAction.FAIL


def test_a_transient_signal_retries_the_whole_trial_three_times():
    d = decide(139)
    assert (d.action, d.budget) == (ExitAction.RETRY_JOB, "job retry 1 of 3")
    assert decide(139, n_job_retries=3).action is ExitAction.FAIL


def test_an_oom_kill_fails_the_trial_even_when_a_restart_would_be_allowed():
    d = decide(137, oom_killed=True)
    assert d.action is ExitAction.FAIL and d.message and "ran out of memory" in d.message


def test_a_chaos_injection_restarts_without_using_the_budget():
    d = decide(143, told_to_stop=True, n_crash_restarts=5)  # SIGTERM'd by an injection, not by the trial
    assert (d.action, d.injected, d.budget) == (ExitAction.RESTART, True, "")
    # a non-primary replica that exits 0 on the injected SIGTERM is restarted too (it was not done)
    assert decide(0, told_to_stop=True, is_primary=False).action is ExitAction.RESTART
    # but a user error on the way out is still a failure
    assert decide(1, told_to_stop=True).action is ExitAction.FAIL


def _run(tmp_path: Path, names: tuple[str, ...] = ("workerpool0-0", "workerpool1-0")) -> RunningTrial:
    paths = launch.trial_paths(str(tmp_path), str(tmp_path / "out"), "1")
    reader = TrialMetricsReader(str(tmp_path / "m"), str(tmp_path / "j"), ("loss",), start_time=0.0)
    launches = [launch.ReplicaLaunch(name=n, pool=i, index=0, argv=("t",), env={}, metric_file="", is_primary=i == 0)
                for i, n in enumerate(names)]
    run = RunningTrial(claimed=Claimed(number=0, storage_id=0, trial_id="1", params={}, resumed=False), paths=paths,
                       launches=launches, reader=reader, start_wall=1_800_000_000.0, start_mono=100.0)
    clock = FakeClock()
    for n in names:
        run.replicas[n] = FakeReplica(clock, n, {}, Script())
    return run


def test_each_exit_is_seen_once_and_the_trial_ends_when_every_exit_is_booked(tmp_path):
    run = _run(tmp_path)
    primary, other = run.replicas.values()
    assert isinstance(primary, FakeReplica) and isinstance(other, FakeReplica)
    assert run.new_exits() == {} and not run.all_exits_classified()
    primary.returncode = 0
    assert {name: e.status for name, e in run.new_exits().items()} == {"workerpool0-0": 0}
    entry = run.record_exit("workerpool0-0", ReplicaExit(status=0, exited_mono=102.5))
    assert entry["exitStatus"] == 0 and entry["time"] == "2027-01-15T08:00:02.500000Z"
    assert run.new_exits() == {}  # booked: not seen again
    other.returncode = 143
    run.record_exit("workerpool1-0", ReplicaExit(status=143, exited_mono=101.0))
    assert run.all_exits_classified()
    assert run.ended_mono == 102.5  # the trial ends with its last replica, not its last booking


def test_restart_budgets_count_only_a_replicas_own_crashes(tmp_path):
    run = _run(tmp_path)
    run.schedule_restart(["workerpool0-0"], 1.0, injected=False, cause="workerpool0-0")
    run.restart_at.clear()
    run.schedule_restart(["workerpool0-0", "workerpool1-0"], 2.0, injected=False, cause="workerpool1-0")
    run.restart_at.clear()
    run.schedule_restart(["workerpool0-0"], 3.0, injected=True)
    assert run.restarts == {"workerpool0-0": 3, "workerpool1-0": 1}
    assert run.n_crash_restarts("workerpool0-0") == 1  # one collateral, one injected
    assert run.n_crash_restarts("workerpool1-0") == 1
    assert not run.all_exits_classified()  # a restart is pending


def test_a_chaos_injection_picks_only_running_replicas_not_already_told_to_stop(tmp_path):
    run = _run(tmp_path)
    assert run.injectable() == ["workerpool0-0", "workerpool1-0"]
    run.replicas["workerpool1-0"].begin_stop(5.0)
    assert run.injectable() == ["workerpool0-0"]  # the other was told to stop (and exited)
    run2 = _run(tmp_path, names=("workerpool0-0",))
    run2.restart_at["workerpool0-0"] = 1.0
    assert run2.injectable() == []


def test_a_job_retry_gives_every_replica_a_fresh_worker_budget(tmp_path):
    run = _run(tmp_path)
    for _ in range(5):
        run.schedule_restart(["workerpool0-0"], 1.0, injected=False, cause="workerpool0-0")
        run.restart_at.clear()
    assert run.n_crash_restarts("workerpool0-0") == 5
    run.retry_job(["workerpool0-0", "workerpool1-0"], 2.0)
    assert run.job_retries == 1 and set(run.restart_at) == {"workerpool0-0", "workerpool1-0"}
    assert run.n_crash_restarts("workerpool0-0") == 0 and run.n_crash_restarts("workerpool1-0") == 0
    run.restart_at.clear()
    run.schedule_restart(["workerpool0-0"], 3.0, injected=False, cause="workerpool0-0")
    assert run.n_crash_restarts("workerpool0-0") == 1
