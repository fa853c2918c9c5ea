"""Tests of the digits MLP example, written with the trials pytest plugin."""

import importlib.util
import os
import subprocess
import sys

import pytest

from trials.testing import ObjectiveContract

HERE = os.path.dirname(os.path.abspath(__file__))
TRAIN = os.path.join(HERE, os.pardir, "train.py")
_spec = importlib.util.spec_from_file_location("digits_mlp_train", TRAIN)
train = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = train
_spec.loader.exec_module(train)

pytest.importorskip("numpy")
if importlib.util.find_spec("sklearn") is None:
    pytest.skip("the digits data ships with scikit-learn", allow_module_level=True)


class TestDigitsContract(ObjectiveContract):
    objective = staticmethod(train.objective)
    Config = train.Config
    spec = train.SPEC
    metric = "accuracy"
    flags = {"epochs": 3}
    options = train.OPTIONS


def test_it_learns_the_digits(run_trial):
    result = run_trial(train.objective, train.Config, spec=train.SPEC, **train.OPTIONS)
    assert result.exit_code == 0 and result.steps == list(range(1, 11))
    accuracy = result.metric("accuracy")
    assert accuracy[-1] > 0.9 and accuracy[-1] > accuracy[0]
    assert result.metric("loss")[-1] < result.metric("loss")[0]
    assert result.model_files() == ["model.json", "model.npz"]
    assert result.checkpoint_steps() == [8, 9, 10]


def test_a_resumed_run_ends_exactly_where_an_uninterrupted_one_does(run_trial, trial_env):
    straight = run_trial(train.objective, train.Config, flags={"epochs": 6}, **train.OPTIONS)
    trial_env.set(TRIALS_TRIAL_DIR=os.path.join(trial_env.root, "second"),
                  AIP_CHECKPOINT_DIR=os.path.join(trial_env.root, "second", "ckpt"))
    first = run_trial(train.objective, train.Config, flags={"epochs": 6}, stop_after_step=2,
                      **train.OPTIONS)
    assert first.exit_code == 75
    resumed = run_trial(train.objective, train.Config, flags={"epochs": 6}, attempt=1,
                        **train.OPTIONS)
    assert resumed.steps == [1, 2, 3, 4, 5, 6]
    assert resumed.metric("accuracy") == pytest.approx(straight.metric("accuracy"), abs=1e-12)


def test_flags_outside_the_search_space_are_rejected(run_trial):
    result = run_trial(train.objective, train.Config, spec=train.SPEC,
                       flags={"learning_rate": 2.0})
    assert result.exit_code == 2 and "[0.001, 0.5] (log)" in str(result.error)
    assert run_trial(train.objective, train.Config, spec=train.SPEC,
                     flags={"hidden_units": 48}).exit_code == 2


def test_divergence_is_reported_not_crashed(run_trial):
    result = run_trial(train.objective, train.Config,
                       flags={"learning_rate": 1e6, "epochs": 3}, **train.OPTIONS)
    assert result.exit_code == 0
    assert any(v != v or v == float("inf") for v in result.metric("loss"))


def test_the_data_is_read_without_importing_sklearn():
    code = (f"import importlib.util, sys; s = importlib.util.spec_from_file_location('t', {TRAIN!r}); "
            "m = sys.modules['t'] = importlib.util.module_from_spec(s); s.loader.exec_module(m); "
            "x, y = m.load_digits(); "
            "print(x.shape, sorted(set(y.tolist())) == list(range(10)), 'sklearn' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "(1797, 64) True False"
