"""`trials check` replayed: its probes run by the job loop on scripted replicas and a fake clock (no
subprocess), each history judged as the scorecard would judge a real trainer's."""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.controller.loop.backendkit import FakeBackend, FakeClock, FakeReplica, FakeSignals, Script
from trials import protocol
from trials.controller.backend.protocol import BackendError, ReplicaStart
from trials.controller.check import hold
from trials.controller.check.check import CheckOptions, CheckResult, run_check
from trials.controller.check.identity_audit import AUDIT_ENV
from trials.errors import ConfigError
from trials.spec.load import loads_spec

SPEC = """\
metrics: {loss: minimize}
parameters:
  x: {type: double, min: 0.0, max: 1.0}
"""
TWO_POOLS = """\
studySpec:
  metrics: [{metricId: loss, goal: MINIMIZE}]
  parameters: [{parameterId: x, doubleValueSpec: {minValue: 0.0, maxValue: 1.0}}]
trialJobSpec:
  baseOutputDirectory: {outputUriPrefix: gs://b/check}
  workerPoolSpecs:
  - {machineSpec: {machineType: n1-standard-4}, replicaCount: 1, containerSpec: {imageUri: local}}
  - {machineSpec: {machineType: n1-standard-4}, replicaCount: 1, containerSpec: {imageUri: local}}
"""
Plan = Callable[[str, int], Script]  # (replica, attempt) -> what that attempt does


class HeldReplica(FakeReplica):
    """A replica that does what the probe's ``sitecustomize`` makes a Python trainer do: with the hold in
    its environment it writes no report after the k-th until the release file exists."""

    released_at_sigterm: bool | None = None

    def _run(self) -> None:
        config = json.loads(self.env.get(hold.HOLD_ENV, "null"))
        if config is None or os.path.exists(config["release"]):
            super()._run()
            return
        s = self.script
        due = min(s.steps, int((self.clock.t - self.start) / s.step_s + 1e-9), config["after"])
        for step in range(len(self.reports) + 1, due + 1):
            self._report(step + s.first_step - 1)
        if len(self.reports) >= config["after"]:  # held: its time stands still until it is released
            self.start = self.clock.t - len(self.reports) * s.step_s

    def begin_stop(self, now: float) -> float:
        config = json.loads(self.env.get(hold.HOLD_ENV, "null"))
        if config is not None and self.released_at_sigterm is None:
            self.released_at_sigterm = os.path.exists(config["release"])
        return super().begin_stop(now)


class ByReplica(FakeBackend):
    """The scripted backend with one script per replica and attempt (and every request kept); ``held``:
    its replicas are Python trainers (held by the probe's hold)."""

    def __init__(self, clock: FakeClock, plan: Plan, *, held: bool = False):
        super().__init__(clock, lambda trial, attempt: Script())
        self.by_replica = plan
        self.held = held
        self.requests: list[ReplicaStart] = []

    def start(self, request: ReplicaStart) -> FakeReplica:
        self.requests.append(request)
        x = next(a.split("=", 1)[1] for a in request.argv if a.startswith("--x="))
        script = self.by_replica(request.name, int(request.env[protocol.ENV_ATTEMPT]))
        kind = HeldReplica if self.held else FakeReplica
        replica = kind(self.clock, request.name, {**request.env, "X": x}, script)
        self.started.append(replica)
        return replica


def replay(tmp_path: Path, plan: Plan, *, spec: str = SPEC, time_limit_s: float = 20.0,
           grace_s: float = 2.0, held: bool = False, strict: bool = False) -> tuple[CheckResult, ByReplica]:
    work = tmp_path / "work"
    work.mkdir(parents=True, exist_ok=True)
    clock = FakeClock()
    backend = ByReplica(clock, plan, held=held)
    options = CheckOptions(time_limit_s=time_limit_s, grace_s=grace_s, local_command=["python", "train.py"],
                           cwd=str(work), folder=str(tmp_path / "runs"), strict=strict)
    result = run_check(loads_spec(spec, source="t.yaml"), options, backend=backend, clock=clock,
                       signals=FakeSignals(clock))
    return result, backend


def verdicts(result: CheckResult) -> dict[str, str]:
    return {line.check: line.verdict.value for line in result.lines}


def resumes(replica: str, attempt: int) -> Script:
    """A trainer that saves every epoch and resumes: its restart goes on after the last step."""
    return Script(steps=6) if attempt == 0 else Script(steps=3, first_step=4)


def test_the_restart_probe_interrupts_after_half_the_reports_and_restarts_as_attempt_1(tmp_path: Path) -> None:
    result, backend = replay(tmp_path, resumes)
    obs = result.observations
    assert obs.clean.exit_code == 0 and [r.step for r in obs.clean.reports] == [1, 2, 3, 4, 5, 6]
    # the clean run, then the restart probe's two attempts, each started through the backend
    assert [(r.name, r.env[protocol.ENV_ATTEMPT]) for r in backend.requests] == [
        ("workerpool0-0", "0"), ("workerpool0-0", "0"), ("workerpool0-0", "1")]
    interrupted, restarted = backend.started[1], backend.started[2]
    assert interrupted.signals == [signal.SIGTERM]  # a maintenance event: SIGTERM, no STOP file
    assert not (tmp_path / "runs" / "restart" / "check" / "1" / protocol.STOP_FILE).exists()
    stop = obs.stop
    assert stop is not None and stop.restart is not None
    assert stop.sent_after_steps == [1, 2, 3]  # after 3 of the clean run's 6 reports
    assert stop.exit_code == 143 and stop.exit_after_s is not None and stop.exit_after_s < stop.grace_s
    assert stop.reported_before_restart == [1, 2, 3]
    # the restarted replica starts with a fresh metric file: only its own reports are seen
    assert [r.step for r in stop.restart.reports] == [4, 5, 6]
    assert stop.restart.exit_code == 0 and restarted.signals == []
    assert stop.restart.first_report_s == pytest.approx(1.0, abs=0.1)
    trial_dir = tmp_path / "runs" / "restart" / "check" / "1"
    aside = (trial_dir / (protocol.metric_file_name("workerpool0-0") + ".attempt-0")).read_text()
    assert '"global_step": "3"' in aside and '"global_step": "4"' not in aside
    v = verdicts(result)
    assert v["SIGTERM"] == "pass" and v["resume after restart"] == "pass" and v["runs"] == "pass"
    assert result.notes == []


def test_a_trainer_that_starts_over_after_the_restart_is_flagged(tmp_path: Path) -> None:
    result, _ = replay(tmp_path, lambda replica, attempt: Script(steps=6))
    assert result.observations.stop is not None and result.observations.stop.restart is not None
    assert [r.step for r in result.observations.stop.restart.reports] == [1, 2, 3, 4, 5, 6]
    # no checkpoint: Vertex recommends resuming, it does not require it; --strict requires it
    assert verdicts(result)["resume after restart"] == "warn"
    strict, _ = replay(tmp_path / "strict", lambda replica, attempt: Script(steps=6), strict=True)
    assert verdicts(strict)["resume after restart"] == "fail"


def test_a_trainer_that_ignores_sigterm_is_killed_after_the_grace_period(tmp_path: Path) -> None:
    result, backend = replay(tmp_path, lambda replica, attempt: Script(steps=6, on_term="ignore") if attempt == 0
                             else Script(steps=3, first_step=4), grace_s=2.0)
    stop = result.observations.stop
    assert stop is not None
    assert backend.started[1].signals == [signal.SIGTERM, signal.SIGKILL]
    assert stop.exit_code == 137 and stop.exit_after_s is None  # still running at the end of the grace
    assert stop.reported_before_restart == [1, 2, 3, 4, 5]  # it trained on for the 2 s of grace
    assert verdicts(result)["SIGTERM"] == "fail"


def test_the_time_box_stops_a_clean_run_that_would_overrun_it(tmp_path: Path) -> None:
    result, backend = replay(tmp_path, lambda replica, attempt: Script(steps=1000), time_limit_s=20.0)
    clean = result.observations.clean
    assert clean.stopped_by_check and clean.exit_code == 143
    assert len(clean.reports) == 9  # stopped at 45 % of the 20 s time box
    assert backend.started[0].signals == [signal.SIGTERM]
    assert result.observations.stop is None and len(backend.started) == 1  # no restart probe after it
    assert result.notes == ["the clean run was stopped after 9 s to stay in the time box (--time-limit 20); "
                            "its later epochs were not seen"]
    assert verdicts(result)["runs"] == "pass"


def test_the_time_box_stops_a_restarted_run_that_would_overrun_it(tmp_path: Path) -> None:
    result, backend = replay(tmp_path, lambda replica, attempt: Script(steps=6) if attempt == 0
                             else Script(steps=1000, first_step=4))
    stop = result.observations.stop
    assert stop is not None and stop.restart is not None and stop.restart.stopped_by_check
    assert len(backend.started) == 3 and backend.started[2].signals == [signal.SIGTERM]
    assert "the restarted run was stopped by the time box" in result.notes


def test_a_run_that_ends_before_its_interruption_is_inconclusive(tmp_path: Path) -> None:
    # the clean run had 4 reports; the probe's run ends after 1 (a flaky trainer): nothing to interrupt
    runs: list[int] = []

    def plan(replica: str, attempt: int) -> Script:
        runs.append(attempt)
        return Script(steps=4) if len(runs) == 1 else Script(steps=1)

    result, backend = replay(tmp_path, plan)
    assert runs == [0, 0] and result.observations.stop is None and result.observations.interrupt_missed
    assert result.notes == []
    sigterm = next(line for line in result.lines if line.check == "SIGTERM")
    assert (sigterm.verdict.value, sigterm.seen) == (
        "warn", "inconclusive: the run ended before SIGTERM could be sent (4 reports in 4.0 s)")


def fast(replica: str, attempt: int) -> Script:
    """A trainer with no pause between its epochs (six steps in less than one pass of the loop), that
    resumes from its checkpoint."""
    return Script(steps=6, step_s=0.001) if attempt == 0 else Script(steps=3, step_s=0.001, first_step=4)


def test_a_fast_trainer_is_held_after_half_its_reports_until_sigterm_was_sent(tmp_path: Path) -> None:
    result, backend = replay(tmp_path, fast, held=True)
    clean, interrupted, restarted = backend.requests
    assert hold.HOLD_ENV not in clean.env and hold.HOLD_ENV not in restarted.env  # the first restart attempt only
    config = json.loads(interrupted.env[hold.HOLD_ENV])
    release = tmp_path / "runs" / "restart" / "check" / "1" / "audit" / hold.RELEASE_FILE
    assert config == {"metric_file": interrupted.env[protocol.ENV_METRIC_FILE], "tag": "loss", "after": 3,
                      "release": str(release), "max_s": 6.0}
    held = backend.started[1]
    assert isinstance(held, HeldReplica) and held.signals == [signal.SIGTERM]
    assert held.released_at_sigterm is False and release.exists()  # released after the signal, not before
    stop = result.observations.stop
    assert stop is not None and stop.sent_after_steps == [1, 2, 3] and stop.reported_before_restart == [1, 2, 3]
    v = verdicts(result)
    assert v["SIGTERM"] == "pass" and v["resume after restart"] == "pass"


def test_a_fast_trainer_that_is_not_held_is_inconclusive(tmp_path: Path) -> None:
    # not Python (no sitecustomize): it ends between two passes of the loop, before SIGTERM
    result, backend = replay(tmp_path, fast)
    assert result.observations.interrupt_missed and len(backend.started) == 2
    assert verdicts(result)["SIGTERM"] == "warn" and verdicts(result)["resume after restart"] == "warn"


def test_a_crash_is_judged_as_the_run_ended_not_restarted_by_the_loop(tmp_path: Path) -> None:
    # exit 3 is restartable for a sweep (Vertex restarts the worker); the check judges the run it saw
    result, backend = replay(tmp_path, lambda replica, attempt: Script(steps=6, crash_at_step=3, crash_code=3))
    assert result.observations.clean.exit_code == 3 and len(backend.started) == 1
    assert result.observations.stop is None
    assert verdicts(result)["runs"] == "fail"


def test_the_other_replicas_may_finish_after_the_primary_and_save_in_their_own_folders(tmp_path: Path) -> None:
    def plan(replica: str, attempt: int) -> Script:
        return Script(steps=3) if replica == "workerpool0-0" else Script(steps=5)

    result, backend = replay(tmp_path, plan, spec=TWO_POOLS)
    obs = result.observations
    assert obs.secondary_name == "workerpool1-0" and obs.secondary is not None
    # the primary exits at 3 s; the other replica ends on its own at 5 s, its reports all seen
    assert [r.step for r in obs.secondary.reports] == [1, 2, 3, 4, 5]
    assert backend.started[1].signals == [] and obs.secondary.exit_code == 0
    assert verdicts(result)["primary replica only"] == "fail"
    primary, other = backend.requests[0].env, backend.requests[1].env
    assert other[protocol.ENV_MODEL_DIR].startswith(str(tmp_path / "runs" / "clean" / "outputs-workerpool1-0"))
    assert primary[protocol.ENV_MODEL_DIR].startswith(str(tmp_path / "runs" / "clean" / "outputs" / "1"))
    assert primary[AUDIT_ENV] != other[AUDIT_ENV]
    assert primary["PYTHONPATH"].split(":")[0].endswith("/1/audit")


def test_a_command_the_backend_cannot_start_is_the_checks_error(tmp_path: Path) -> None:
    class Refusing(ByReplica):
        def start(self, request: ReplicaStart) -> FakeReplica:
            raise ConfigError(f"{request.argv[0]}: no such program")

    clock = FakeClock()
    options = CheckOptions(local_command=["nope"], cwd=str(tmp_path))
    with pytest.raises(ConfigError, match="nope: no such program"):
        run_check(loads_spec(SPEC, source="t.yaml"), options, backend=Refusing(clock, resumes), clock=clock,
                  signals=FakeSignals(clock))


def test_the_probes_run_the_specs_first_point_as_given(tmp_path: Path) -> None:
    spec = SPEC + ("  beta: {type: double, min: 0.01, max: 1.0, scale: reverse_log}\n"
                   "  units: {type: integer, min: 16, max: 64}\n")
    result, backend = replay(tmp_path, resumes, spec=spec)
    assert result.params == {"x": 0.0, "beta": 0.01, "units": 16}
    for request in backend.requests:  # mirrored for Optuna, never rounded on the way back
        assert request.argv[-3:] == ("--x=0", "--beta=0.01", "--units=16")
        assert request.env[protocol.ENV_JOB_ID] == "check" and request.env[protocol.ENV_TRIAL_ID] == "1"


def test_an_internal_error_the_loops_retry_gets_past_is_not_the_checks_error(tmp_path: Path) -> None:
    failed: list[str] = []

    class FlakyOnce(ByReplica):
        def start(self, request: ReplicaStart) -> FakeReplica:
            if not failed:
                failed.append(request.name)
                raise BackendError("the exec shim could not set up the sandbox")
            return super().start(request)

    clock = FakeClock()
    options = CheckOptions(local_command=["python", "train.py"], cwd=str(tmp_path))
    result = run_check(loads_spec(SPEC, source="t.yaml"), options, backend=FlakyOnce(clock, resumes), clock=clock,
                       signals=FakeSignals(clock))
    assert failed == ["workerpool0-0"] and result.ready
    assert verdicts(result)["resume after restart"] == "pass"
