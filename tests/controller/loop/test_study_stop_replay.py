"""studyStoppingConfig replayed through the job loop, one field at a time: scripted replicas on a fake
clock, a real journal storage; how many trials run, what is recorded, what the job says."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.controller.loop.backendkit import FakeBackend, FakeClock, FakeSignals, Script
from trials.controller.jobs import registry
from trials.controller.jobs import run as job_run
from trials.controller.loop.runner import JobRunner
from trials.records import JobState
from trials.spec.load import loads_spec


def spec(stopping: dict[str, Any], *, n: int = 8, parallel: int = 1, metrics: str = "") -> str:
    more = f", {metrics}" if metrics else ""
    return json.dumps(json.loads(f"""{{
      "studySpec": {{"metrics": [{{"metricId": "loss", "goal": "MINIMIZE"}}{more}],
                    "parameters": [{{"parameterId": "x", "doubleValueSpec": {{"minValue": 0, "maxValue": 1}}}}],
                    "studyStoppingConfig": {json.dumps(stopping)}}},
      "maxTrialCount": {n}, "parallelTrialCount": {parallel}, "maxFailedTrialCount": {n},
      "trialJobSpec": {{"workerPoolSpecs": [{{"machineSpec": {{"machineType": "n1-standard-4"}}, "replicaCount": 1,
                        "containerSpec": {{"imageUri": "x", "command": ["python", "train.py"]}}}}]}}}}"""))


def replay(tmp_path: Path, stopping: dict[str, Any], *, plan=None, n: int = 8, parallel: int = 1,
           metrics: str = "") -> tuple[str, list[Any], list[tuple[str, dict[str, Any]]], Any]:
    job = loads_spec(spec(stopping, n=n, parallel=parallel, metrics=metrics), source="job.json")
    h = registry.create_job(job, root=str(tmp_path / "jobs"), job_id="stop", spec_path=None, storage=None,
                            base_output_dir=None, project_number=None, local_command=None, seed=1)
    options = job_run.run_options(h, echo=False, grace_period_s=2.0, memory_limit_mb=None,
                                  inject_restarts=0.0, slots=None, seed=1)
    clock = FakeClock()
    # trial k reports loss offset by k: the first trial is the best, no later one improves on it
    backend = FakeBackend(clock, plan or (lambda trial, attempt: Script(steps=3, offset=float(trial))))
    events: list[tuple[str, dict[str, Any]]] = []
    runner = JobRunner(h.store, h.job, options, emit=lambda e: events.append((e.name, e.fields())), clock=clock,
                       backend=backend, signals=FakeSignals(clock, None))
    state = runner.run()
    trials = sorted(h.store.frozen_trials(), key=lambda t: t.number)
    return state, trials, events, h


def ran(trials: list[Any]) -> list[str]:
    return [t.user_attrs.get("state") for t in trials if t.user_attrs.get("state") not in (None, "REQUESTED")]


def notes(events: list[tuple[str, dict[str, Any]]]) -> list[str]:
    return [d["message"] for e, d in events if e == "note"]


def test_max_num_trials_lets_that_many_run_and_the_job_succeeds(tmp_path):
    state, trials, events, h = replay(tmp_path, {"maxNumTrials": 3})
    assert state == JobState.SUCCEEDED and ran(trials) == ["SUCCEEDED"] * 3
    (note,) = notes(events)
    assert "maxNumTrials (3)" in note and "no more trials start" in note
    assert "maxNumTrials (3)" in h.store.meta().study_stopped


def test_max_num_trials_no_progress_stops_after_that_many_trials_without_improvement(tmp_path):
    _, trials, events, _ = replay(tmp_path, {"maxNumTrialsNoProgress": 2})
    assert ran(trials) == ["SUCCEEDED"] * 3  # trial 1 is best; 2 and 3 make no progress
    assert "2 consecutive trials" in notes(events)[0]


def test_no_progress_rules_do_not_apply_to_a_multi_objective_study(tmp_path):
    _, trials, _, _ = replay(tmp_path, {"maxNumTrialsNoProgress": 2}, n=5,
                             metrics='{"metricId": "acc", "goal": "MAXIMIZE"}')
    assert len(ran(trials)) == 5


def test_max_duration_no_progress_counts_from_the_best_trials_end(tmp_path):
    _, trials, events, _ = replay(tmp_path, {"maxDurationNoProgress": "5s"})
    # each trial takes ~3 s of the fake clock: the best (trial 1) ended at ~3 s; at trial 4's claim
    # (~9 s) it has not improved for 6 s (at trial 3's, ~6 s, for 3 s only)
    assert ran(trials) == ["SUCCEEDED"] * 3
    assert "maxDurationNoProgress 5s" in notes(events)[0]


def test_maximum_runtime_stops_asking_for_trials_once_its_duration_has_passed(tmp_path):
    _, trials, events, _ = replay(tmp_path, {"maximumRuntimeConstraint": {"maxDuration": "5s"}})
    assert ran(trials) == ["SUCCEEDED"] * 2  # trial 2 starts at ~3 s, the next claim comes after 5 s
    assert "maximumRuntimeConstraint" in notes(events)[0]


def test_minimum_runtime_and_min_num_trials_hold_the_stopping_rules_back(tmp_path):
    _, trials, _, _ = replay(tmp_path, {"maxNumTrials": 1, "minNumTrials": 4})
    assert len(ran(trials)) == 4  # maxNumTrials 1, but 4 COMPLETED trials first
    _, trials, _, _ = replay(tmp_path / "b", {"maxNumTrials": 1,
                                              "minimumRuntimeConstraint": {"maxDuration": "8s"}})
    assert len(ran(trials)) == 3  # trials start at ~0, 3 and 6 s; after 8 s the rule may stop it


def test_should_stop_asap_stops_the_running_trials_as_stopped_early(tmp_path):
    plan = lambda trial, attempt: Script(steps=3 if trial == "1" else 50, offset=float(trial))  # noqa: E731
    state, trials, events, _ = replay(tmp_path, {"maxNumTrials": 2, "shouldStopAsap": True}, parallel=2, plan=plan)
    assert state == JobState.SUCCEEDED
    assert ran(trials) == ["SUCCEEDED", "SUCCEEDED"]  # 2 ran; the third claim stopped the study
    long = trials[1].user_attrs
    assert long["stopped_early"] and len(long["measurements"]) < 50  # interrupted, kept what it reported
    assert "maxNumTrials (2)" in long["stop_reason"]
    assert "shouldStopAsap" in notes(events)[0]
    without = replay(tmp_path / "b", {"maxNumTrials": 2}, parallel=2, plan=plan)[1]
    assert len(without[1].user_attrs["measurements"]) == 50  # without it, the running trial finishes
