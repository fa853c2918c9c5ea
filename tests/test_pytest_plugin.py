"""Tests for the pytest plugin (fixtures and ObjectiveContract), run through pytester."""

import subprocess
import sys

pytest_plugins = ["pytester"]

GOOD = '''
import dataclasses
from trials.pytest_plugin import ObjectiveContract
from trials.spec import MetricSpec, ParameterSpec, ParameterType, StudySpec

@dataclasses.dataclass(frozen=True)
class Config:
    learning_rate: float = 0.1
    optimizer: str = "adam"
    epochs: int = 4

SPEC = StudySpec(metrics=(MetricSpec(metric_id="accuracy"),), parameters=(
    ParameterSpec(parameter_id="learning_rate", type=ParameterType.DOUBLE, min_value=0.001,
                  max_value=1.0),
    ParameterSpec(parameter_id="optimizer", type=ParameterType.CATEGORICAL, values=("adam", "sgd")),
))

def objective(config, ctx):
    state = ctx.restore({"acc": 0.0})
    for step in ctx.steps(config.epochs):
        state["acc"] += config.learning_rate
        ctx.report(step, accuracy=state["acc"])
        ctx.checkpoint(state, step)
    open(ctx.model_dir + "/model.txt", "w").write(str(state))
'''

BAD = '''
def bad_objective(config, ctx):
    for epoch in range(config.epochs):   # ignores should_stop, never restores
        ctx.report(1, accuracy=0.5)       # the same step every epoch
'''


def test_contract_passes_for_a_well_behaved_objective(pytester):
    pytester.makepyfile(objective_mod=GOOD)
    pytester.makepyfile(test_objective_contract='''
from objective_mod import Config, SPEC, objective
from trials.pytest_plugin import ObjectiveContract

class TestGood(ObjectiveContract):
    objective = staticmethod(objective)
    Config = Config
    spec = SPEC
    metric = "accuracy"
    flags = {"epochs": 3}
''')
    result = pytester.runpytest("-q", "-p", "no:hypothesispytest", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=6)


def test_contract_without_spec_skips_the_parameter_check(pytester):
    pytester.makepyfile(objective_mod=GOOD)
    pytester.makepyfile(test_objective_contract='''
import objective_mod
from trials.pytest_plugin import ObjectiveContract

class TestGood(ObjectiveContract):
    objective = objective_mod.objective     # a plain function attribute works too
    Config = objective_mod.Config
    metric = "accuracy"
''')
    result = pytester.runpytest("-q", "-p", "no:hypothesispytest", "-rs", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=5, skipped=1)
    result.stdout.fnmatch_lines(["*no spec: set `spec`*"])


def test_contract_catches_a_badly_behaved_objective(pytester):
    pytester.makepyfile(objective_mod=GOOD + BAD)
    pytester.makepyfile(test_objective_contract='''
from objective_mod import Config, bad_objective
from trials.pytest_plugin import ObjectiveContract

class TestBad(ObjectiveContract):
    objective = staticmethod(bad_objective)
    Config = Config
    metric = "accuracy"
''')
    result = pytester.runpytest("-q", "-p", "no:hypothesispytest", "-p", "no:cacheprovider")
    outcomes = result.parseoutcomes()
    # every behavioural check fails: one step only, no model, no stop, no resume, no SIGTERM
    assert outcomes.get("failed") == 5, result.stdout.str()
    result.stdout.fnmatch_lines(["*expected 'accuracy' at >= 2 steps*",
                                 "*expected exit 75*"])


def test_trial_env_sandboxes_and_restores_the_environment(pytester, monkeypatch):
    monkeypatch.setenv("AIP_MODEL_DIR", "/outside/model")
    pytester.makepyfile(test_env='''
import os

def test_sandboxed(trial_env, tmp_path):
    assert os.environ["AIP_MODEL_DIR"].startswith(str(tmp_path))
    assert os.environ["CLOUD_ML_TRIAL_ID"] == "1"
    assert os.environ["CLOUD_ML_HP_METRIC_FILE"] == trial_env.metric_file
    trial_env.local()
    assert "AIP_MODEL_DIR" not in os.environ and "TRIALS_OUTPUT_ROOT" in os.environ

def test_after(tmp_path):
    assert os.environ["AIP_MODEL_DIR"] == "/outside/model"
''')
    pytester.runpytest("-q", "-p", "no:hypothesispytest", "-p", "no:cacheprovider").assert_outcomes(passed=2)


def test_run_trial_reads_back_the_real_hypertune_file(pytester):
    pytester.makepyfile(objective_mod=GOOD)
    pytester.makepyfile(test_run='''
import json, os
from objective_mod import Config, objective

def test_run(run_trial, trial_env):
    result = run_trial(objective, Config, flags={"learning_rate": 0.25, "epochs": 2})
    assert result.exit_code == 0 and result.config.learning_rate == 0.25
    assert [m.step for m in result.measurements] == [1, 2]
    assert result.metric("accuracy") == [0.25, 0.5]
    assert result.model_files() == ["model.txt"] and result.checkpoint_steps() == [1, 2]
    lines = [json.loads(l) for l in open(trial_env.metric_file)]
    assert [l["global_step"] for l in lines] == ["1", "2"]

def test_restart(run_trial):
    first = run_trial(objective, Config, stop_after_step=2)
    assert first.exit_code == 75 and first.steps == [1, 2]
    second = run_trial(objective, Config, attempt=1)
    assert [m.step for m in second.measurements] == [3, 4]
    assert second.steps == [1, 2, 3, 4] and [m.attempt for m in second.log] == [0, 0, 1, 1]

def test_bad_flag(run_trial):
    assert run_trial(objective, Config, flags=["--nope=1"]).exit_code == 2
''')
    pytester.runpytest("-q", "-p", "no:hypothesispytest", "-p", "no:cacheprovider").assert_outcomes(passed=3)


def test_plugin_import_is_light():
    code = ("import sys, trials.pytest_plugin; "
            "print(sorted(m for m in ('optuna', 'numpy', 'yaml', 'sqlalchemy') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


IGNORES_STOP = '''
def ignores_stop(config, ctx):
    state = ctx.restore({"acc": 0.0})
    for step in range(ctx.start_step, config.epochs + 1):   # never looks at should_stop
        state["acc"] += 0.1
        ctx.report(step, accuracy=state["acc"])
        ctx.checkpoint(state, step)
    open(ctx.model_dir + "/model.txt", "w").write(str(state))

def never_stops(config, ctx):
    step = 0
    while True:                                              # no end, no should_stop
        step += 1
        try:
            ctx.report(step, accuracy=0.1)
        except Exception:                                    # and swallows errors
            pass
'''


def test_contract_reports_an_objective_that_ignores_stop_requests(pytester):
    """Issue 15.2: SIGTERM twice used to make the runtime os._exit(75) pytest mid-suite."""
    pytester.makepyfile(objective_mod=GOOD + IGNORES_STOP)
    pytester.makepyfile(test_objective_contract='''
from objective_mod import Config, ignores_stop, never_stops
from trials.pytest_plugin import ObjectiveContract

class TestIgnoresStop(ObjectiveContract):
    objective = staticmethod(ignores_stop)
    Config = Config
    metric = "accuracy"
    flags = {"epochs": 5}

class TestNeverStops(ObjectiveContract):
    objective = staticmethod(never_stops)
    Config = Config
    metric = "accuracy"
    expects_model = expects_checkpoint = False

    def test_metric_reported_every_step(self): pass       # these would never end
    def test_outputs_land_in_trial_dirs(self): pass
''')
    result = pytester.runpytest_subprocess("-q", "-p", "no:hypothesispytest", "-p", "no:cacheprovider")
    assert result.ret == 1, result.stdout.str()  # tests failed; not 75 (exited mid-suite)
    outcomes = result.parseoutcomes()
    assert (outcomes.get("failed"), outcomes.get("passed"), outcomes.get("skipped")) == (6, 4, 2), \
        result.stdout.str()
    result.stdout.fnmatch_lines([
        "*TestIgnoresStop.test_sigterm_is_handled*",
        "*expected the loop to end after one step, got [[]1, 2, 3, 4, 5[]]*",
        "*TestNeverStops.test_stop_request_is_handled*",
        "*the objective ignored the stop request: it reported 20 more steps*",
        "*TestNeverStops.test_sigterm_is_handled*",
        "*the objective ignored SIGTERM: it reported 20 more steps*",
    ])
