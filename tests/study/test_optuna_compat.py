"""A job's storage is a plain Optuna study: Optuna (and so optuna-dashboard) reads every trial unchanged."""

from __future__ import annotations

import json
import sys

import optuna
import pytest
from optuna.storages import JournalStorage
from optuna.storages.journal import JournalFileBackend
from optuna.trial import TrialState

from trials.cli import main

pytestmark = pytest.mark.integration

SPEC = """
display_name: compat
metrics: {val_loss: minimize}
parameters:
  mode: {type: categorical, values: [ok, fail, nometric]}
  lr: {type: discrete, values: [0.5]}
algorithm: grid
max_trial_count: 3
parallel_trial_count: 1
max_failed_trial_count: 2
"""
TRAINER = """
import argparse, sys
import hypertune
p = argparse.ArgumentParser()
p.add_argument("--mode")
p.add_argument("--lr", type=float)
a = p.parse_args()
if a.mode == "fail":
    print("no data here", file=sys.stderr)
    sys.exit(1)
ht = hypertune.HyperTune()
tag = "val_loss" if a.mode == "ok" else "accuracy"
for step in (1, 2, 3):
    ht.report_hyperparameter_tuning_metric(hyperparameter_metric_tag=tag, metric_value=a.lr / step,
                                           global_step=step)
"""


def test_plain_optuna_reads_every_trial_of_a_job(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "spec.yaml").write_text(SPEC)
    (tmp_path / "train.py").write_text(TRAINER)
    code = main(["sweep", "spec.yaml", "--job-id", "compat", "--quiet", "--", sys.executable, "train.py"])
    assert code == 0
    capsys.readouterr()
    assert main(["describe", "compat", "--format", "json"]) == 0
    described = {t["id"]: t for t in json.loads(capsys.readouterr().out)["trials"]}

    path = tmp_path / "trials-jobs" / "compat" / "journal.log"
    study = optuna.load_study(study_name="compat", storage=JournalStorage(JournalFileBackend(str(path))))
    assert study.directions == [optuna.study.StudyDirection.MINIMIZE]
    assert study.user_attrs["trials:spec"]["displayName"] == "compat"
    assert study.user_attrs["trials:state"] == "JOB_STATE_SUCCEEDED"
    trials = {t.params["mode"]: t for t in study.get_trials()}
    assert sorted(trials) == ["fail", "nometric", "ok"] and len(study.trials) == 3

    ok = trials["ok"]
    assert ok.state is TrialState.COMPLETE and ok.values == [pytest.approx(0.5 / 3)]
    assert ok.params == {"mode": "ok", "lr": 0.5}
    assert ok.intermediate_values == {1: 0.5, 2: 0.25, 3: pytest.approx(0.5 / 3)}
    assert ok.user_attrs["state"] == "SUCCEEDED"
    assert [m["step"] for m in ok.user_attrs["measurements"]] == [1, 2, 3]

    fail = trials["fail"]
    assert fail.state is TrialState.FAIL and fail.user_attrs["state"] == "INFEASIBLE"
    assert fail.user_attrs["infeasible_reason"].startswith(
        "The replica workerpool0-0 exited with a non-zero status of 1.")
    assert fail.intermediate_values == {}

    nometric = trials["nometric"]
    assert nometric.state is TrialState.FAIL and nometric.user_attrs["state"] == "INFEASIBLE"
    assert "val_loss" in nometric.user_attrs["infeasible_reason"]
    assert "accuracy" in nometric.user_attrs["infeasible_reason"]

    # what Optuna reads is what `trials describe` reports, trial by trial (Vertex id = number + 1)
    for t in study.trials:
        d = described[str(t.number + 1)]
        assert d["state"] == t.user_attrs["state"]
        assert {p["parameterId"]: p["value"] for p in d["parameters"]} == t.params
        assert d.get("infeasibleReason") == t.user_attrs.get("infeasible_reason")
