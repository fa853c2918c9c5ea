"""In-process mode: the same job semantics with trials as function calls."""

import dataclasses
import os
import tempfile

import pytest

import trials
from trials.spec.load import loads_spec

SPACE = """
metrics: {score: maximize}
parameters:
  x: {type: double, min: 0, max: 1}
  n: {type: integer, min: 1, max: 3}
max_trial_count: 12
"""


@dataclasses.dataclass
class Config:
    x: float = 0.5
    n: int = 1
    epochs: int = 6


def objective(config, ctx):
    for step in range(1, config.epochs + 1):
        ctx.report(step, score=1 - (config.x - 0.3) ** 2 - 0.01 * config.n + 0.001 * step)
        if ctx.should_stop:
            break


def test_tune_runs_every_trial_and_finds_the_best(tmp_path):
    result = trials.tune(objective, loads_spec(SPACE), Config, directory=str(tmp_path), seed=3)
    assert result.state == "JOB_STATE_SUCCEEDED"
    assert [t["id"] for t in result.trials] == [str(i) for i in range(1, 13)]
    assert all(t["state"] == "SUCCEEDED" and len(t["measurements"]) == 6 for t in result.trials)
    best_value = result.best["finalMeasurement"]["metrics"][0]["value"]
    assert best_value == max(t["finalMeasurement"]["metrics"][0]["value"] for t in result.trials)
    assert set(result.best_parameters) == {"x", "n"}
    assert (tmp_path / "1" / "metrics.jsonl").exists()  # real runtime files, real hypertune file
    assert (tmp_path / "1" / "hypertune.metrics").exists()


def test_tune_stops_trials_early_with_the_spec_rule(tmp_path):
    spec = loads_spec(SPACE + "stopping: {type: median}\n")
    result = trials.tune(objective, spec, Config, directory=str(tmp_path), seed=1, max_trial_count=20)
    stopped = [t for t in result.trials if len(t["measurements"]) < 6]
    assert stopped, "the median rule never stopped a trial"
    assert all(t["state"] == "SUCCEEDED" for t in stopped)  # stopped early = SUCCEEDED, as on Vertex


def test_a_trial_that_ignores_the_stop_and_runs_to_its_end_is_not_stopped_early(tmp_path):
    def stubborn(config, ctx):
        for step in range(1, 7):
            ctx.report(step, score=1 - (config.x - 0.3) ** 2 - 0.01 * config.n + 0.001 * step)

    spec = loads_spec(SPACE + "stopping: {type: median}\n")
    result = trials.tune(stubborn, spec, Config, directory=str(tmp_path), seed=1, max_trial_count=12)
    assert all(len(t["measurements"]) == 6 for t in result.trials)
    attrs = [t.user_attrs for t in result.store.frozen_trials()]
    assert not any(a.get("stopped_early") for a in attrs)


def test_exception_fails_the_trial_and_ends_the_job_like_vertex(tmp_path):
    def boom(config, ctx):
        raise RuntimeError("diverged")

    with pytest.raises(trials.TuneError, match="job tune JOB_STATE_FAILED: The first trial failed") as caught:
        trials.tune(boom, loads_spec(SPACE), Config, directory=str(tmp_path))
    result = caught.value.result
    assert result.state == "JOB_STATE_FAILED"  # maxFailedTrialCount unset: first failure ends it
    assert isinstance(caught.value.__cause__, RuntimeError)  # the objective's own traceback
    (t,) = result.trials
    assert t["state"] == "INFEASIBLE"
    assert t["infeasibleReason"] == (
        "The replica workerpool0-0 exited with a non-zero status of 1. Termination reason: Error.")


def test_missing_metric_is_infeasible_with_the_reported_tags(tmp_path):
    def wrong_tag(config, ctx):
        ctx.report(1, acc=0.5)

    spec = loads_spec(SPACE.replace("max_trial_count: 12", "max_trial_count: 2"))
    with pytest.raises(trials.TuneError, match="no trial of job tune succeeded .2 run.; trial 1: ") as caught:
        trials.tune(wrong_tag, spec, Config, directory=str(tmp_path))
    result = caught.value.result
    assert all(t["state"] == "INFEASIBLE" for t in result.trials)
    assert "score" in result.trials[0]["infeasibleReason"] and "acc" in result.trials[0]["infeasibleReason"]


def test_result_has_the_best_value_and_parameters_and_leaves_no_temp_folder(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # where TemporaryDirectory goes
    result = trials.tune(objective, loads_spec(SPACE.replace("12", "4")), Config, seed=0)
    finals = {t["id"]: t["finalMeasurement"]["metrics"][0]["value"] for t in result.trials}
    assert result.best_value == max(finals.values()) and finals[result.best_trial_id] == result.best_value
    assert result.best_values == {"score": result.best_value}
    assert set(result.best_parameters) == {"x", "n"}
    assert result.job_dir is None and os.listdir(tmp_path) == []  # the temporary folder is gone
    assert f"best_value={result.best_value!r}" in repr(result) and "'x':" in repr(result)


def test_a_given_folder_is_kept(tmp_path):
    result = trials.tune(objective, loads_spec(SPACE.replace("12", "2")), Config, directory=str(tmp_path / "job"))
    assert result.job_dir == str(tmp_path / "job") and (tmp_path / "job" / "2" / "metrics.jsonl").exists()


def test_a_failed_job_cleans_up_its_temp_folder_too(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))

    def boom(config, ctx):
        raise ValueError("bad data")

    with pytest.raises(trials.TuneError, match="ValueError: bad data"):
        trials.tune(boom, loads_spec(SPACE), Config)
    assert os.listdir(tmp_path) == []
