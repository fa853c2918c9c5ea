"""`--sampler vizier`: the request the designer's child process gets, the values it gives back, and the
fallback when the child fails (no OSS Vizier needed here; the real designer runs in
tests/integration/test_sampler_choice.py)."""

import math

import optuna
import pytest
from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution
from optuna.study import StudyDirection

from trials.study import vizier

SPACE = {
    "lr": FloatDistribution(1e-4, 1e-1, log=True),
    "units": IntDistribution(8, 512, log=True),
    "depth": IntDistribution(1, 9, step=2),
    "opt": CategoricalDistribution(["adam", "sgd"]),
    "batch": CategoricalDistribution([32, 64, 128]),
    "drop": FloatDistribution(0.0, 0.5),
}


def _trial(number, params, value=None, state=optuna.trial.TrialState.COMPLETE):
    return optuna.trial.create_trial(params=params, distributions=SPACE, value=value, state=state)


def test_the_request_describes_every_kind_of_parameter_and_the_trials():
    done = _trial(0, {"lr": 0.01, "units": 64, "depth": 3, "opt": "sgd", "batch": 64, "drop": 0.1}, 0.5)
    diverged = _trial(1, {"lr": 0.1, "units": 8, "depth": 1, "opt": "adam", "batch": 32, "drop": 0.0}, math.inf)
    running = _trial(2, {"lr": 0.001, "units": 512, "depth": 9, "opt": "adam", "batch": 128, "drop": 0.5},
                     state=optuna.trial.TrialState.RUNNING)
    req = vizier.request(SPACE, StudyDirection.MINIMIZE, [done, diverged], [running], seed=7)
    params = {p["name"]: p for p in req["params"]}
    assert params["lr"] == {"name": "lr", "kind": "float", "low": 1e-4, "high": 1e-1, "log": True}
    assert params["units"] == {"name": "units", "kind": "int", "low": 8, "high": 512, "log": True}
    assert params["depth"] == {"name": "depth", "kind": "discrete", "values": [1.0, 3.0, 5.0, 7.0, 9.0]}
    assert params["opt"] == {"name": "opt", "kind": "categorical", "values": ["adam", "sgd"]}
    assert params["batch"] == {"name": "batch", "kind": "discrete", "values": [32.0, 64.0, 128.0]}
    assert req["maximize"] is False and req["seed"] == 7
    assert req["completed"][0] == {"params": {"batch": 64.0, "depth": 3, "drop": 0.1, "lr": 0.01, "opt": "sgd",
                                              "units": 64}, "value": 0.5}
    assert req["completed"][1]["value"] is None  # a non-finite value goes to the designer as infeasible
    assert req["active"] == [{"params": {"batch": 128.0, "depth": 9, "drop": 0.5, "lr": 0.001, "opt": "adam",
                                         "units": 512}}]


def test_the_designers_values_come_back_as_the_distributions_own():
    assert vizier._decode(64.0, SPACE["batch"]) == 64 and isinstance(vizier._decode(64.0, SPACE["batch"]), int)
    assert vizier._decode("sgd", SPACE["opt"]) == "sgd"
    assert vizier._decode(99.7, SPACE["units"]) == 100
    assert vizier._decode(600, SPACE["units"]) == 512  # clipped into the range
    assert vizier._decode(0.25, SPACE["drop"]) == 0.25
    with pytest.raises(ValueError, match="not one of"):
        vizier._decode("rmsprop", SPACE["opt"])


def test_a_failing_child_gives_a_random_trial_a_warning_and_an_attribute(monkeypatch, caplog):
    def broken(req, *, timeout):
        raise RuntimeError("exit 1: jaxlib.xla_extension.XlaRuntimeError: RESOURCE_EXHAUSTED\x1b[31m")

    monkeypatch.setattr(vizier, "suggest_in_child", broken)
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    study = optuna.create_study(sampler=vizier.VizierSampler(seed=0))
    for _ in range(3):
        trial = study.ask()
        study.tell(trial, (trial.suggest_float("x", -5, 10) - 1) ** 2)
    first, *later = study.trials
    assert vizier.ERROR_ATTR not in first.system_attrs  # the first trial is random by design, nothing failed
    for t in later:
        reason = t.system_attrs[vizier.ERROR_ATTR]
        assert reason.startswith("exit 1: jaxlib") and "\x1b" not in reason and -5 <= t.params["x"] <= 10
    assert "trial 1: OSS Vizier failed (exit 1: jaxlib" in caplog.text


def test_the_child_is_asked_with_the_history_and_a_seed_that_follows_it(monkeypatch):
    asked = []

    def fake(req, *, timeout):
        asked.append(req)
        return {"x": 1.5}

    monkeypatch.setattr(vizier, "suggest_in_child", fake)
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    study = optuna.create_study(direction="maximize", sampler=vizier.VizierSampler(seed=10))
    for _ in range(3):
        trial = study.ask()
        study.tell(trial, trial.suggest_float("x", -5, 10))
    assert [t.params["x"] for t in study.trials[1:]] == [1.5, 1.5]
    assert [len(r["completed"]) for r in asked] == [1, 2] and [r["seed"] for r in asked] == [11, 12]
    assert all(r["maximize"] for r in asked)
