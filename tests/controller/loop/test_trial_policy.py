"""The job loop's trial policy hooks replayed: a caller's policy interrupts or stops a trial through
the loop's own stop and restart (fake replicas, fake clock, a real journal storage)."""

from __future__ import annotations

import signal
from dataclasses import replace
from pathlib import Path

from tests.controller.loop.backendkit import FakeBackend, FakeClock, FakeSignals, Script
from trials import protocol
from trials.controller.jobs import registry as controller
from trials.controller.jobs import run as job_run
from trials.controller.loop.runner import JobRunner
from trials.controller.loop.running import ExitAction, ExitDecision, RunningTrial
from trials.controller.loop.trial_policy import PassAction
from trials.records import JobState
from trials.spec.load import loads_spec
from trials.study.store import FrozenTrial

SPEC = """\
metrics: {loss: minimize}
parameters:
  x: {type: double, min: 0.0, max: 1.0}
command: [python, train.py]
"""


class AtTimes:
    """Asks ``action`` once, at the first pass at or after ``at_s`` seconds of the trial."""

    def __init__(self, at_s: float, action: PassAction, *, wait_on_exit: bool = False):
        self.at_s = at_s
        self.action = action
        self.wait_on_exit = wait_on_exit
        self.asked = False
        self.decisions: list[ExitAction] = []

    def on_exit(self, run: RunningTrial, name: str, decision: ExitDecision) -> ExitDecision:
        self.decisions.append(decision.action)
        if self.wait_on_exit and decision.action is ExitAction.SUCCESS:
            return replace(decision, action=ExitAction.WAIT)
        return decision

    def on_pass(self, run: RunningTrial, now: float) -> PassAction:
        if self.asked or now - run.start_mono < self.at_s:
            return PassAction.GO_ON
        self.asked = True
        return self.action


def replay(tmp_path: Path, script: Script, policy: AtTimes | None) -> tuple[str, FrozenTrial, FakeBackend, Path]:
    job = loads_spec(SPEC, source="t.yaml")
    h = controller.create_job(job, root=str(tmp_path / "jobs"), job_id="replay", spec_path=None, storage=None,
                              base_output_dir=None, project_number=None, local_command=None, seed=1)
    options = job_run.run_options(h, echo=False, grace_period_s=2.0, memory_limit_mb=None, inject_restarts=0.0,
                                  slots=None, seed=1)
    clock = FakeClock()
    backend = FakeBackend(clock, lambda trial, attempt: script)
    runner = JobRunner(h.store, h.job, options, clock=clock, backend=backend, signals=FakeSignals(clock),
                       policy=policy)
    state = runner.run()
    return state, h.store.frozen_trials()[0], backend, Path(h.job_dir)


def exits(t: FrozenTrial) -> list[int]:
    return [a["exitStatus"] for a in t.user_attrs["attempts"] if "exitStatus" in a]


def test_without_a_policy_the_loop_runs_by_its_rules(tmp_path: Path) -> None:
    state, t, backend, _ = replay(tmp_path, Script(steps=4), None)
    assert state == JobState.SUCCEEDED and exits(t) == [0] and len(backend.started) == 1


def test_an_interruption_restarts_every_replica_as_the_next_attempt_without_using_a_budget(tmp_path: Path) -> None:
    # the trainer exits 0 on SIGTERM: as a chaos injection that would end the trial; an interruption restarts it
    state, t, backend, _ = replay(tmp_path, Script(steps=4, term_code=0), AtTimes(2.5, PassAction.INTERRUPT))
    assert state == JobState.SUCCEEDED
    assert [r.env[protocol.ENV_ATTEMPT] for r in backend.started] == ["0", "1"]
    assert backend.started[0].signals == [signal.SIGTERM]
    assert exits(t) == [0, 0] and t.user_attrs["injected_restarts"] == 1
    assert [m["step"] for m in t.user_attrs["measurements"]] == [1, 2, 3, 4]  # the union of both attempts


def test_a_stop_ends_the_trial_as_its_timeout_would_but_records_what_it_reported(tmp_path: Path) -> None:
    state, t, backend, job_dir = replay(tmp_path, Script(steps=100), AtTimes(3.5, PassAction.STOP))
    assert backend.started[0].signals == [signal.SIGTERM] and exits(t) == [143]
    assert t.user_attrs["state"] == "SUCCEEDED" and len(t.user_attrs["measurements"]) == 3
    assert (job_dir / "1" / protocol.STOP_FILE).exists()
    assert state == JobState.SUCCEEDED


def test_a_policy_can_change_what_an_exit_means(tmp_path: Path) -> None:
    # the primary's success made WAIT: the trial ends when every exit is in, nothing stopped for it
    policy = AtTimes(1e9, PassAction.GO_ON, wait_on_exit=True)
    state, t, backend, job_dir = replay(tmp_path, Script(steps=3), policy)
    assert policy.decisions == [ExitAction.SUCCESS] and exits(t) == [0]
    assert state == JobState.SUCCEEDED and not (job_dir / "1" / protocol.STOP_FILE).exists()
