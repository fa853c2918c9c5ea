"""The job loop replayed (fake replicas, fake clock, a real journal): what it tells of running trials,
why a trial told to stop is not marked stopped, and the first trials infeasible for one reason."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.controller.loop.backendkit import FakeBackend, FakeClock, FakeSignals, Script
from trials.controller.jobs import admin as job_admin
from trials.controller.jobs import registry
from trials.controller.jobs import run as job_run
from trials.controller.loop.runner import JobRunner
from trials.controller.policy import stopping
from trials.errors import ConfigError
from trials.records import JobState

SPEC = """\
metrics: {{loss: minimize}}
parameters:
  x: {{type: double, min: 0.0, max: 1.0}}
command: [python, train.py]
max_trial_count: {n}
parallel_trial_count: 1
{extra}
"""
MISSING = ("The trial finished without reporting the objective metric loss; it reported val_loss. Report it "
           "with hypertune's report_hyperparameter_tuning_metric(hyperparameter_metric_tag=...).")


def replay(tmp_path: Path, plan: Any, *, n: int, extra: str = "", keep_going: bool = False,
           h: Any = None) -> tuple[str, list[Any], Any, FakeBackend]:
    if h is None:
        from trials.spec.load import loads_spec

        job = loads_spec(SPEC.format(n=n, extra=extra), source="t.yaml")
        h = registry.create_job(job, root=str(tmp_path / "jobs"), job_id="replay", spec_path=None, storage=None,
                                base_output_dir=None, project_number=None, local_command=None, seed=1)
    options = job_run.run_options(h, echo=False, grace_period_s=2.0, memory_limit_mb=None, inject_restarts=0.0,
                                  slots=None, seed=1, keep_going=keep_going)
    options.suggest_ahead = False
    clock = FakeClock()
    backend = FakeBackend(clock, plan)
    said: list[Any] = []
    runner = JobRunner(h.store, h.job, options, emit=said.append, clock=clock, backend=backend,
                       signals=FakeSignals(clock))
    return runner.run(), said, h, backend


def _done(said: list[Any]) -> list[Any]:
    return [e for e in said if e.name == "trial_done"]


def test_the_loop_tells_each_new_step_and_a_tick_while_a_trial_is_silent(tmp_path: Path) -> None:
    _, said, _, _ = replay(tmp_path, lambda trial, attempt: Script(steps=3, step_s=2.5), n=1)
    progress = [(e.step, dict(e.metrics)) for e in said if e.name == "trial_progress"]
    steps = [step for step, _ in progress]
    assert steps[0] is None  # started, nothing reported yet: the view's clock still moves
    assert sorted(set(steps) - {None}) == [1, 2, 3]
    assert steps.count(1) >= 2  # 2.5 s between steps: told again (with its last step) at least every second
    assert progress[-1][1] == {"loss": _done(said)[0].values[0]}  # its last step's spec metrics
    assert [e.name for e in said].index("trial_progress") > [e.name for e in said].index("trial_started")


def test_a_trial_told_to_stop_early_that_reaches_the_end_is_said_to_have_run_to_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(stopping, "MEDIAN_HOPELESS_COMPLETED", None)  # the leaders' bar alone (equal trials)
    # 6 completed trials, then trial 7 far behind at step 8 of 10 (the last before the last tenth, where no
    # rule stops): told to stop, it ignores SIGTERM and reports steps 9 and 10 within the grace period:
    # finished, not stopped early, and the event says why
    def plan(trial: str, attempt: int) -> Script:
        if trial == "7":
            return Script(steps=3, first_step=8, offset=10.0, on_term="ignore")
        # trial 6, the first the rule may stop, ahead of every leader: it completes whatever its x
        return Script(steps=10, offset=-1.0 if trial == "6" else 0.0)

    state, said, h, _ = replay(tmp_path, plan, n=7, extra="stopping: {type: median}")
    assert state == JobState.SUCCEEDED
    assert [(e.trial_id, e.reason.value) for e in said if e.name == "trial_stopping"] == [("7", "early")]
    last = _done(said)[-1]
    assert (last.trial_id, last.stopped_early, last.ran_to_end, last.steps) == ("7", False, True, 3)
    assert not any(e.ran_to_end for e in _done(said)[:-1])


def test_the_first_3_trials_infeasible_for_one_reason_fail_the_job(tmp_path: Path) -> None:
    state, said, h, backend = replay(tmp_path, lambda trial, attempt: Script(steps=2, tag="val_loss"), n=5)
    assert state == JobState.FAILED
    assert len(backend.started) == 3  # trials 4 and 5 never ran
    assert h.store.meta().error == {"code": 3, "message": (
        "The first 3 trials were infeasible for the same reason and none succeeded, so the job stopped "
        f"(maxFailedTrialCount unset; --keep-going runs every trial). Trials 1, 2, 3: {MISSING}")}
    assert [e.state.value for e in _done(said)] == ["INFEASIBLE"] * 3

    # resumed as it is, it would fail again at once: refused, with the flag that lets it on
    with pytest.raises(ConfigError, match="would fail again at once: its first trials were infeasible for the "
                                          "same reason and none succeeded; fix that, then resume it with "
                                          "--keep-going to run its 2 trials left"):
        job_admin.check_failure_budget(h)
    job_admin.check_failure_budget(h, keep_going=True)
    state, said, h, backend = replay(tmp_path, lambda trial, attempt: Script(steps=2), n=5, h=h, keep_going=True)
    assert state == JobState.SUCCEEDED and len(backend.started) == 2


def test_keep_going_runs_every_trial(tmp_path: Path) -> None:
    state, said, h, backend = replay(tmp_path, lambda trial, attempt: Script(steps=2, tag="val_loss"), n=4,
                                     keep_going=True)
    assert state == JobState.SUCCEEDED  # as Vertex says; `trials sweep` exits 1: no trial succeeded
    assert len(backend.started) == 4 and h.store.meta().error is None


def test_an_explicit_max_failed_trial_count_leaves_it_to_vertexs_rule(tmp_path: Path) -> None:
    state, _, _, backend = replay(tmp_path, lambda trial, attempt: Script(steps=2, tag="val_loss"), n=4,
                                  extra="max_failed_trial_count: 2")
    assert state == JobState.SUCCEEDED and len(backend.started) == 4


@pytest.mark.parametrize("plan", [
    lambda trial, attempt: Script(steps=2, tag="val_loss" if trial != "2" else "loss"),  # trial 2 succeeds
    lambda trial, attempt: Script(steps=2, tag="val_loss" if trial != "3" else "acc"),  # another reason
], ids=["a-success", "another-reason"])
def test_no_stop_after_a_success_or_for_different_reasons(tmp_path: Path, plan: Any) -> None:
    state, _, _, backend = replay(tmp_path, plan, n=5)
    assert state == JobState.SUCCEEDED and len(backend.started) == 5


def test_nothing_is_stopped_when_no_trial_is_left_to_run(tmp_path: Path) -> None:
    state, _, h, backend = replay(tmp_path, lambda trial, attempt: Script(steps=2, tag="val_loss"), n=3)
    assert state == JobState.SUCCEEDED  # as on Vertex: stopping would save nothing
    assert len(backend.started) == 3 and h.store.meta().error is None
