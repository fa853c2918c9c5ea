"""In-process replicas: calls of the objective taking turns with the loop, stops as requests, no restarts."""

from __future__ import annotations

import dataclasses
import threading

import pytest

from trials import protocol
from trials.controller.backend.protocol import ReplicaStart
from trials.controller.inprocess.backend import COMMAND, STOP_REASON, InProcessBackend, InProcessReplica, exit_status
from trials.controller.loop.running import ExitAction, decide_exit
from trials.errors import ConfigError
from trials.records import StopReason
from trials.runtime.context import RunOptions
from trials.spec.load import loads_spec

STUDY = loads_spec("metrics: {score: maximize}\nparameters:\n  x: {type: double, min: 0, max: 1}\n"
                   "max_trial_count: 1\n").study


@dataclasses.dataclass
class Config:
    x: float = 0.5


def status(replica: InProcessReplica) -> int | None:
    ended = replica.poll()
    return None if ended is None else ended.status


def backend_for(objective, *, turns: bool = True) -> InProcessBackend:
    return InProcessBackend(objective, Config, study=STUDY, turns=turns,
                            options=RunOptions(install_signals=False, tensorboard=False))


def request(tmp_path, *flags: str, argv0: str = COMMAND) -> ReplicaStart:
    env = {protocol.ENV_TRIAL_ID: "1", protocol.ENV_JOB_ID: "job",
           protocol.ENV_METRIC_FILE: str(tmp_path / protocol.HYPERTUNE_FILE),
           protocol.ENV_TRIAL_DIR: str(tmp_path), protocol.ENV_STOP_FILE: str(tmp_path / protocol.STOP_FILE)}
    return ReplicaStart(argv=(argv0, *flags), env=env, cwd=str(tmp_path), name="workerpool0-0",
                        label="workerpool0-0", trial_dir=str(tmp_path),
                        stdout_path=str(tmp_path / protocol.stdout_log("workerpool0-0")),
                        stderr_path=str(tmp_path / protocol.stderr_log("workerpool0-0")))


def test_the_objective_runs_only_inside_poll_one_report_at_a_time(tmp_path):
    seen = []

    def objective(config, ctx):
        seen.append(("start", config.x))
        for step in range(1, 4):
            ctx.report(step, score=config.x * step)
            seen.append(step)

    replica = backend_for(objective).start(request(tmp_path, "--x=0.25"))
    assert seen == []  # started, waiting for its first turn
    assert replica.poll() is None and seen == [("start", 0.25)]  # it ran to its first report
    assert (tmp_path / "metrics.jsonl").read_text().count("\n") == 1  # written before the loop's turn
    assert replica.poll() is None and seen == [("start", 0.25), 1]
    assert replica.poll() is None and seen[-1] == 2
    assert status(replica) == protocol.EXIT_OK and seen[-1] == 3
    ended = replica.poll()
    assert ended is not None and ended.how == "exit" and ended.leftovers == () and ended.placement == {}
    assert ended.exited_mono == replica.exited_mono and replica.record() is None
    assert status(replica) == protocol.EXIT_OK  # an ended call: the same status, nothing runs


def test_a_stop_request_reaches_the_objective_before_its_next_step(tmp_path):
    reported = []
    reasons = []

    def objective(config, ctx):
        for step in ctx.steps(10):
            ctx.report(step, score=0.1)
            reported.append(step)
        reasons.append(ctx.stop_reason)

    replica = backend_for(objective).start(request(tmp_path))
    assert replica.poll() is None and replica.poll() is None  # parked after its 2nd report
    assert replica.begin_stop(5.0) == 5.0 and replica.begin_stop(6.0) == 5.0  # once
    assert status(replica) == protocol.EXIT_STOPPED  # a stop the loop asked for
    assert reported == [1, 2] and reasons == [STOP_REASON]


def test_advance_stop_lets_a_stubborn_objective_run_to_its_end_nothing_is_killed(tmp_path):
    def stubborn(config, ctx):
        for step in range(1, 4):
            ctx.report(step, score=0.1)

    replica = backend_for(stubborn).start(request(tmp_path))
    assert replica.poll() is None
    replica.begin_stop(0.0)
    assert replica.advance_stop(1000.0, grace_s=0.0) is False  # the grace is over: there is nothing to kill
    assert replica.advance_stop(1000.0, grace_s=0.0) is False
    assert replica.advance_stop(1000.0, grace_s=0.0) is True  # it returned
    # the runtime's status of a call told to stop; whether it ended early is the loop's call (from its steps)
    assert status(replica) == protocol.EXIT_STOPPED


def test_an_exception_ends_the_call_with_exit_1_its_traceback_in_the_stderr_log(tmp_path):
    raised = RuntimeError("diverged")

    def boom(config, ctx):
        ctx.report(1, score=0.5)
        raise raised

    backend = backend_for(boom)
    replica = backend.start(request(tmp_path))
    assert replica.poll() is None
    assert status(replica) == protocol.EXIT_ERROR
    log = (tmp_path / protocol.stderr_log("workerpool0-0")).read_text()
    assert log.startswith("Traceback (most recent call last):") and log.endswith("RuntimeError: diverged\n")
    assert backend.take_error("1") is raised
    assert backend.take_error("1") is None  # taken: the backend keeps no exception (nor its frames)


def test_a_replica_closed_before_it_ended_is_released_and_stops_at_its_next_step(tmp_path):
    reported = []

    def forever(config, ctx):
        step = 0
        while not ctx.should_stop:
            step += 1
            ctx.report(step, score=0.1)
            reported.append(step)

    backend = backend_for(forever)
    replica = backend.start(request(tmp_path))
    assert replica.poll() is None  # parked in its first report
    backend.close()  # the job ended first (an error in the loop, Ctrl-C in the caller)
    assert replica.join(timeout_s=10) and reported == [1]
    assert status(replica) == protocol.EXIT_STOPPED  # its own stop (the release asked it): never called a failure


def test_a_replica_closed_before_its_first_turn_never_calls_the_objective(tmp_path):
    calls = []
    backend = backend_for(lambda config, ctx: calls.append(1))
    replica = backend.start(request(tmp_path))
    replica.close()
    assert replica.join(timeout_s=10) and calls == []


def test_the_backend_runs_the_objective_not_a_program(tmp_path):
    with pytest.raises(ConfigError, match="must be 'trials.tune'"):
        backend_for(lambda ctx: None).start(request(tmp_path, argv0="python"))


def test_calls_get_the_callers_context_variables(tmp_path):
    import contextvars

    var = contextvars.ContextVar("var", default="unset")
    seen = []
    var.set("the caller's")
    replica = backend_for(lambda config, ctx: seen.append((var.get(), threading.current_thread().name))).start(
        request(tmp_path))
    assert status(replica) == protocol.EXIT_OK
    assert seen == [("the caller's", "trials.tune workerpool0-0")]


def test_without_turns_the_whole_call_is_made_in_start_in_the_callers_thread(tmp_path):
    seen = []

    def objective(config, ctx):
        for step in range(1, 4):
            ctx.report(step, score=0.1)
        seen.append(threading.current_thread())

    replica = backend_for(objective, turns=False).start(request(tmp_path))
    assert seen == [threading.current_thread()]  # done before start returned
    assert replica.exited_mono is not None and status(replica) == protocol.EXIT_OK
    assert (tmp_path / "metrics.jsonl").read_text().count("\n") == 3


def test_without_turns_a_keyboard_interrupt_in_the_call_is_raised_in_the_caller(tmp_path):
    def interrupted(config, ctx):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        backend_for(interrupted, turns=False).start(request(tmp_path))


def test_a_keyboard_interrupt_in_a_call_with_turns_is_raised_in_the_loops_thread(tmp_path):
    def interrupted(config, ctx):
        ctx.report(1, score=0.1)
        raise KeyboardInterrupt

    replica = backend_for(interrupted).start(request(tmp_path))
    assert replica.poll() is None
    with pytest.raises(KeyboardInterrupt):
        replica.poll()
    assert status(replica) == protocol.EXIT_ERROR  # raised once; the call's status stays a failure


@pytest.mark.parametrize("code,stop_requested,status", [
    (0, False, 0),
    (1, False, 1),  # the objective raised
    (2, False, 2),  # bad flags
    (75, True, 75),  # a stop the loop asked for
    (75, False, 0),  # it stopped itself (ctx.request_stop of its own): as it chose
    (3, False, 1),  # sys.exit(3)
    (130, False, 1),  # a KeyboardInterrupt raised in the objective
    (139, False, 1),  # (cannot happen in-process: no segfault is survived)
])
def test_exit_status(code, stop_requested, status):
    assert exit_status(code, stop_requested=stop_requested) == status


@pytest.mark.parametrize("code", [0, 1, 2, 3, 6, 75, 130, 134, 137, 139, 143, 255])
def test_no_in_process_exit_is_ever_restarted_or_retried_by_the_loop(code):
    for stop in (None, StopReason.EARLY, StopReason.JOB_END):  # unasked, or a stop the loop asked for
        decision = decide_exit(exit_status(code, stop_requested=stop is not None), replica="workerpool0-0",
                               is_primary=True, oom_killed=False, told_to_stop=stop is not None, trial_stop=stop,
                               restart_pending=False, n_crash_restarts=0)
        assert decision.action not in (ExitAction.RESTART, ExitAction.RETRY_JOB), (code, stop, decision)
