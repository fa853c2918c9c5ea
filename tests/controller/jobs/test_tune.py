"""In-process mode: the same job semantics with trials as function calls."""

import dataclasses
import os
import tempfile
import threading

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


GRID = """
metrics: {score: maximize}
parameters:
  n: {type: integer, min: 1, max: 9}
algorithm: grid
max_trial_count: 9
"""


@dataclasses.dataclass
class GridConfig:
    n: int = 1


def test_the_median_rule_stops_the_worse_trials_and_the_stop_reaches_them_before_their_next_step(tmp_path):
    last_step = {}

    def objective(config, ctx):
        for step in ctx.steps(6):  # ends early, between steps, once told to stop
            ctx.report(step, score=-config.n + 0.01 * step)
            last_step[config.n] = step

    spec = loads_spec(GRID + "stopping: {type: median}\n")
    result = trials.tune(objective, spec, GridConfig, directory=str(tmp_path))
    # trials 1-5 complete: the leaders' bar needs 5 trials, and no completed curve was as far behind as 3-5 at
    # step 1 to say how far a curve from there gets (the rule waits); 6-9 are worse at step 1 than the leaders
    assert last_step == {1: 6, 2: 6, 3: 6, 4: 6, 5: 6, 6: 1, 7: 1, 8: 1, 9: 1}
    assert [len(t["measurements"]) for t in result.trials] == [6] * 5 + [1] * 4
    assert all(t["state"] == "SUCCEEDED" for t in result.trials)
    attrs = {t.number + 1: t.user_attrs for t in result.store.frozen_trials()}
    assert [n for n, a in attrs.items() if a.get("stopped_early")] == [6, 7, 8, 9]
    assert "at step 1 is below -0.99, the leader's value there (the top fifth of 5 trials): trial 1" in attrs[6][
        "stop_reason"]
    assert "at step 1 is below -1.99, the worst there of the 2 leaders (the top fifth of 6 trials)" in attrs[7][
        "stop_reason"]
    assert result.best_trial_id == "1"  # a stopped trial's value is where it stopped


def test_max_failed_trial_count_counts_each_failure_once(tmp_path):
    def odd_ones_fail(config, ctx):
        if config.n % 2:
            raise ValueError(f"n={config.n}")
        ctx.report(1, score=float(config.n))

    spec = loads_spec(GRID + "max_failed_trial_count: 3\n")
    with pytest.raises(trials.TuneError, match="3 trials failed, reaching maxFailedTrialCount=3") as caught:
        trials.tune(odd_ones_fail, spec, GridConfig, directory=str(tmp_path))
    result = caught.value.result
    # trials 1, 3 and 5 failed: the job ended with the 3rd failure, not before (counted twice: at trial 3)
    assert [t["state"] for t in result.trials] == ["INFEASIBLE", "SUCCEEDED"] * 2 + ["INFEASIBLE"]
    assert str(caught.value.__cause__) == "n=1"  # the first failed trial's exception
    assert "First failure: Trial 1: The replica workerpool0-0 exited with a non-zero status of 1." in result.error


def test_the_cause_is_the_objectives_own_exception_and_the_trial_is_not_restarted(tmp_path):
    raised = RuntimeError("diverged")

    def boom(config, ctx):
        ctx.report(1, score=0.5)
        raise raised

    with pytest.raises(trials.TuneError) as caught:
        trials.tune(boom, loads_spec(SPACE), Config, directory=str(tmp_path))
    assert caught.value.__cause__ is raised
    (frozen,) = [t for t in caught.value.result.store.frozen_trials() if t.user_attrs.get("failed")]
    assert [a["exitStatus"] for a in frozen.user_attrs["attempts"]] == [1]  # one attempt: no restart
    assert frozen.user_attrs["error_detail"][0] == "RuntimeError: diverged"  # the local view says why
    assert any("raise raised" in line for line in frozen.user_attrs["error_detail"])  # and where


def test_an_objective_that_exits_with_another_code_fails_at_once(tmp_path):
    def quits(config, ctx):
        raise SystemExit(3)  # on a host, a restart; a call would end the same way again

    with pytest.raises(trials.TuneError, match="The first trial failed") as caught:
        trials.tune(quits, loads_spec(SPACE), Config, directory=str(tmp_path))
    (frozen,) = [t for t in caught.value.result.store.frozen_trials() if t.user_attrs.get("failed")]
    attrs = frozen.user_attrs
    assert [a["exitStatus"] for a in attrs["attempts"]] == [1]
    assert attrs["error_detail"] == ["SystemExit: 3"]


def test_an_objective_that_stops_itself_succeeds(tmp_path):
    def converges(config, ctx):
        for step in ctx.steps(6):
            ctx.report(step, score=0.1 * step)
            if step == 2:
                ctx.request_stop("converged")

    result = trials.tune(converges, loads_spec(SPACE.replace("12", "2")), Config, directory=str(tmp_path))
    assert [len(t["measurements"]) for t in result.trials] == [2, 2] and result.best_value == 0.2
    assert not any(t.user_attrs.get("stopped_early") for t in result.store.frozen_trials())
    assert all(len(t.user_attrs["attempts"]) == 1 for t in result.store.frozen_trials())


def test_on_trial_gets_each_finished_trial_in_the_rest_shape_and_args_reach_every_trial(tmp_path):
    got = []
    result = trials.tune(objective, loads_spec(SPACE.replace("12", "3")), Config, directory=str(tmp_path),
                         args=("--epochs=2",), on_trial=got.append, seed=5)
    assert got == result.trials and [t["id"] for t in got] == ["1", "2", "3"]
    assert all(len(t["measurements"]) == 2 and t["state"] == "SUCCEEDED" for t in got)  # --epochs=2
    assert {p["parameterId"] for p in got[0]["parameters"]} == {"x", "n"}
    assert got[0]["finalMeasurement"]["metrics"][0]["metricId"] == "score"


def test_a_storage_url_keeps_the_job(tmp_path):
    url = str(tmp_path / "job.journal")
    result = trials.tune(objective, loads_spec(SPACE.replace("12", "2")), Config, storage=url,
                         directory=str(tmp_path / "job"))
    from trials.study.storage import open_storage
    from trials.study.store import JobStore

    reopened = JobStore.open(open_storage(url), "tune")
    assert reopened.meta().state == "JOB_STATE_SUCCEEDED" == result.state
    assert len([t for t in reopened.frozen_trials() if t.state.name == "COMPLETE"]) == 2


def test_tune_runs_in_a_thread_that_is_not_the_main_one(tmp_path):
    out = []
    thread = threading.Thread(target=lambda: out.append(trials.tune(
        objective, loads_spec(SPACE.replace("12", "2")), Config, directory=str(tmp_path))))
    thread.start()
    thread.join(timeout=120)
    assert out and out[0].state == "JOB_STATE_SUCCEEDED" and len(out[0].trials) == 2


@pytest.mark.parametrize("stopping", ["", "stopping: {type: median}\n"])
def test_ctrl_c_stops_the_objective_and_raises_in_the_caller(tmp_path, stopping):
    import signal

    if threading.current_thread() is not threading.main_thread():
        pytest.skip("needs the main thread")
    main = threading.main_thread().ident
    calls, ended = [], []

    def objective(config, ctx):
        calls.append(threading.current_thread().ident)
        for step in ctx.steps(1000):
            ctx.report(step, score=0.1)
            if step == 2:
                signal.pthread_kill(main, signal.SIGINT)  # Ctrl-C
        ended.append(ctx.stop_reason)

    # Python's own Ctrl-C handler, as in a notebook or a script (pytest-xdist's workers ignore SIGINT)
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(KeyboardInterrupt):
            trials.tune(objective, loads_spec(SPACE + stopping), Config, directory=str(tmp_path))
    finally:
        signal.signal(signal.SIGINT, previous)
    if stopping:  # the objective runs in its own thread: asked to stop, it ended before tune raised
        assert calls != [main] and ended == ["stop requested by the job"]
    else:  # a whole call in the caller's thread: the KeyboardInterrupt is raised in the objective
        assert calls == [main] and ended == []


def test_a_20_trial_job_with_stopping_makes_model_based_suggestions_and_says_so(tmp_path):
    """Issue 48's case: with early stopping on, most trials are stopped, and the default sampler still leaves
    its random start-up (the stopped trials count toward it and feed its model): the trials after it carry the
    GP's suggestion, and the job's record counts them."""
    from trials.controller.jobs import view as job_view
    from trials.study.choice import MODEL, RANDOM, suggestion_counts

    pytest.importorskip("scipy")  # the default's GP (trials[gp])
    spec = loads_spec(SPACE.replace("max_trial_count: 12", "max_trial_count: 20") + "stopping: {type: median}\n")
    result = trials.tune(objective, spec, Config, directory=str(tmp_path), seed=2)
    frozen = result.store.frozen_trials()
    stopped = [t for t in frozen if t.user_attrs.get("stopped_early")]
    assert len(stopped) >= 5
    counts = suggestion_counts(frozen)
    assert counts[MODEL] >= 5 and counts[MODEL] + counts[RANDOM] == 20
    by_gp = [t for t in frozen if any(k.startswith("gp:relative_params") for k in t.system_attrs)]
    assert len(by_gp) == counts[MODEL]
    line = job_view.suggestions_made_line(result.store.meta(), frozen)
    assert line is not None and line.startswith(f"suggestions: {counts[MODEL]} from the gp-warped model, ")
