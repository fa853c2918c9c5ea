"""Unit tests of the supervisor, one event at a time: what one replica's exit, a due restart, a timeout,
a job-wide stop and a chaos injection do to a running trial (scripted replicas, a fake clock, a store
and a launcher that only record; no loop, no subprocess)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from tests.controller.loop.backendkit import FakeClock, FakeReplica, Script
from trials import protocol
from trials.controller.backend.protocol import ReplicaExit
from trials.controller.loop import events
from trials.controller.loop.chaos import Chaos
from trials.controller.loop.running import RunningTrial
from trials.controller.loop.supervisor import TrialSupervisor
from trials.controller.trial import launch
from trials.controller.trial.metrics_reader import TrialMetricsReader
from trials.records import StopReason, TrialState
from trials.study.store import Claimed

NAMES = ("workerpool0-0", "workerpool1-0", "workerpool1-1")


class Store:
    def __init__(self) -> None:
        self.attrs: list[dict[str, Any]] = []

    def set_trial_attrs(self, storage_id: int, **values: Any) -> None:
        self.attrs.append(values)


class Launcher:
    """Starts a scripted replica where the real launcher would start one through the backend."""

    def __init__(self, clock: FakeClock):
        self.clock = clock
        self.starts: list[tuple[str, int]] = []

    def start(self, run: RunningTrial, lau: launch.ReplicaLaunch, *, attempt: int, echo: object) -> None:
        self.starts.append((lau.name, attempt))
        run.replicas[lau.name] = FakeReplica(self.clock, lau.name, {}, Script(steps=100))
        run.exited.pop(lau.name, None)


def setup(tmp_path: Path, *, restart_all: bool = False, timeout_s: float | None = None, inject: float = 0.0):
    clock = FakeClock()
    said: list[events.Event] = []
    store, launcher = Store(), Launcher(clock)
    sup = TrialSupervisor(store=store, launcher=launcher, chaos=Chaos(inject, seed=1), clock=clock,  # type: ignore[arg-type]
                          emit=said.append, grace_s=2.0, timeout_s=timeout_s, restart_all=restart_all, echo=None)
    trial_dir = tmp_path / "1"
    trial_dir.mkdir()
    paths = launch.trial_paths(str(tmp_path), str(tmp_path / "out"), "1")
    reader = TrialMetricsReader(str(trial_dir / "m"), str(trial_dir / "j"), ("loss",), start_time=0.0)
    launches = [launch.ReplicaLaunch(name=n, pool=min(i, 1), index=max(0, i - 1), argv=("t",), env={},
                                     metric_file="", is_primary=i == 0) for i, n in enumerate(NAMES)]
    run = RunningTrial(claimed=Claimed(number=0, storage_id=7, trial_id="1", params={}, resumed=False),
                       paths=paths, launches=launches, reader=reader, start_wall=1.8e9, start_mono=clock.t)
    for lau in launches:
        launcher.start(run, lau, attempt=0, echo=None)
    launcher.starts.clear()
    return sup, run, clock, said, store, launcher


def exit_now(run: RunningTrial, name: str, status: int) -> None:
    replica = run.replicas[name]
    assert isinstance(replica, FakeReplica)
    replica.returncode = status


def exited(run: RunningTrial, name: str) -> ReplicaExit:
    ended = run.replicas[name].poll()
    assert ended is not None
    return ended


def test_the_primary_succeeding_stops_the_other_replicas_quietly(tmp_path):
    sup, run, clock, said, store, _ = setup(tmp_path)
    exit_now(run, "workerpool0-0", 0)
    sup.on_exit(run, "workerpool0-0", exited(run, "workerpool0-0"), clock.t)
    assert run.stop_reason is StopReason.SUCCESS
    others = [run.replicas[n] for n in NAMES[1:]]
    assert all(isinstance(r, FakeReplica) and r.signals == [15] for r in others)  # SIGTERM each
    assert said == [] and store.attrs == []  # nothing to say, no STOPPING: the trial succeeded
    assert not os.path.exists(os.path.join(run.paths.trial_dir, protocol.STOP_FILE))


def test_a_crash_restarts_that_replica_once_its_group_is_gone(tmp_path):
    sup, run, clock, said, _, launcher = setup(tmp_path)
    exit_now(run, "workerpool1-0", 3)
    sup.on_exit(run, "workerpool1-0", exited(run, "workerpool1-0"), clock.t)
    assert run.restart_at == {"workerpool1-0": clock.t} and run.exited == {"workerpool1-0": 3}
    assert said == [events.ReplicaRestart(trial_id="1", replica="workerpool1-0", restarts=1,
                                          why="exit 3, worker restart 1 of 5")]
    assert run.attempts[-1]["budget"] == "worker restart 1 of 5"
    sup.on_restarts_due(run, clock.t)
    assert launcher.starts == [("workerpool1-0", 1)]  # TRIALS_ATTEMPT 1, the same trial
    assert run.restart_at == {} and "workerpool1-0" not in run.exited


def test_restart_job_on_worker_restart_restarts_every_replica_and_charges_only_the_cause(tmp_path):
    sup, run, clock, _, _, launcher = setup(tmp_path, restart_all=True)
    exit_now(run, "workerpool1-1", 3)
    sup.on_exit(run, "workerpool1-1", exited(run, "workerpool1-1"), clock.t)
    assert set(run.restart_at) == set(NAMES)
    sup.on_restarts_due(run, clock.t)  # the fakes exit on SIGTERM at once
    assert sorted(launcher.starts) == [(n, 1) for n in NAMES]
    assert [run.n_crash_restarts(n) for n in NAMES] == [0, 0, 1]


def test_a_transient_exit_runs_the_whole_trial_again(tmp_path):
    sup, run, clock, said, _, launcher = setup(tmp_path)
    exit_now(run, "workerpool0-0", 139)
    sup.on_exit(run, "workerpool0-0", exited(run, "workerpool0-0"), clock.t)
    assert run.job_retries == 1 and set(run.restart_at) == set(NAMES)
    assert isinstance(said[0], events.ReplicaRestart) and "job retry 1 of 3" in said[0].why
    sup.on_restarts_due(run, clock.t)
    assert sorted(launcher.starts) == [(n, 1) for n in NAMES]


def test_a_user_error_fails_the_trial_and_stops_the_others_once(tmp_path):
    sup, run, clock, said, _, _ = setup(tmp_path)
    exit_now(run, "workerpool1-0", 1)
    sup.on_exit(run, "workerpool1-0", exited(run, "workerpool1-0"), clock.t)
    assert run.stop_reason is StopReason.FAILED
    assert run.failure == ("The replica workerpool1-0 exited with a non-zero status of 1. "
                           "Termination reason: Error.")
    assert said == [events.TrialStopping(trial_id="1", reason=StopReason.FAILED,
                                         detail="stopping its other replicas")]
    sup.fail(run, clock.t, "a later failure")  # the first failure is the trial's
    assert run.failure.startswith("The replica workerpool1-0")
    assert os.path.exists(os.path.join(run.paths.trial_dir, protocol.STOP_FILE))  # for trainers masking SIGTERM


def test_a_timeout_stops_the_trial_as_stopping_then_fails_it(tmp_path):
    sup, run, clock, said, store, _ = setup(tmp_path, timeout_s=30.0)
    sup.on_timers(run, clock.t + 29.0, None)
    assert run.stop_reason is None
    sup.on_timers(run, clock.t + 31.0, None)
    assert run.stop_reason is StopReason.TIMEOUT
    assert run.failure and "maximum running time of 30s" in run.failure
    assert store.attrs == [{"state": TrialState.STOPPING.value}]  # ACTIVE -> STOPPING during the grace
    assert [type(e) for e in said] == [events.TrialStopping]


def test_a_job_wide_stop_reaches_every_running_trial(tmp_path):
    sup, run, clock, said, store, _ = setup(tmp_path)
    sup.on_timers(run, clock.t, StopReason.CANCEL)
    assert run.stop_reason is StopReason.CANCEL and store.attrs == []
    assert said == [events.TrialStopping(trial_id="1", reason=StopReason.CANCEL)]
    assert all(isinstance(r, FakeReplica) and r.signals == [15] for r in run.replicas.values())


def test_a_chaos_injection_sigterms_one_running_replica_and_schedules_the_next(tmp_path):
    sup, run, clock, said, _, _ = setup(tmp_path, inject=0.5)
    run.next_injection = clock.t
    sup.on_timers(run, clock.t, None)
    assert sup.n_injected == 1 and run.injected == 1 and run.next_injection > clock.t
    (event,) = said
    assert isinstance(event, events.InjectedRestart) and event.replica in NAMES
    assert run.replicas[event.replica].stop_requested_at == clock.t


def test_a_replica_that_ignores_sigterm_is_killed_after_the_grace_period(tmp_path):
    sup, run, clock, _, _, _ = setup(tmp_path)
    stubborn = FakeReplica(clock, "workerpool0-0", {}, Script(steps=100, on_term="ignore"))
    run.replicas["workerpool0-0"] = stubborn
    sup.begin_stop(run, clock.t, StopReason.CANCEL)
    assert not sup.groups_gone(run, clock.t + 1.0)
    assert not sup.groups_gone(run, clock.t + 2.0)  # SIGKILL sent at the end of the grace period
    assert stubborn.signals == [15, 9] and sup.groups_gone(run, clock.t + 2.1)
