"""A trainer reporting another tag than the spec's metric: the job fails after its first reports, not after three
whole infeasible trials; the trials the job's end stopped are not blamed; --keep-going runs on."""

from __future__ import annotations

import json
import sys

import pytest

from trials.cli import main

pytestmark = pytest.mark.integration

TRAIN = """\
import sys, time
import hypertune
ht = hypertune.HyperTune()
for epoch in range(1, 41):  # 40 epochs of 0.25 s: 10 s a trial if nothing stops it
    time.sleep(0.25)
    ht.report_hyperparameter_tuning_metric(hyperparameter_metric_tag="accuracy", metric_value=0.5, global_step=epoch)
"""
SPEC = """\
metrics: {val_accuracy: maximize}
parameters:
  lr: {type: double, min: 0.01, max: 0.1}
max_trial_count: 6
parallel_trial_count: 2
"""


def test_a_wrong_tag_fails_the_job_at_once(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_text(TRAIN)
    (tmp_path / "s.yaml").write_text(SPEC)
    assert main(["sweep", "s.yaml", "--job-id", "w", "--", sys.executable, "train.py"]) == 1
    err = capsys.readouterr().out
    assert "error: Trial 1 reported" in err or "error: Trial 2 reported" in err, err
    assert "all under tags that are not the spec's metric (accuracy; the spec's: val_accuracy)" in err
    assert "ended without the spec's metric" not in err  # the stopped trials are the job's doing, not theirs
    capsys.readouterr()
    assert main(["describe", "w", "--format", "json"]) == 0
    rest = json.loads(capsys.readouterr().out)
    assert rest["state"] == "JOB_STATE_FAILED"
    ran = [t for t in rest.get("trials", []) if t.get("startTime")]
    assert len(ran) == 2  # the two first trials, stopped: none of the 4 others started
    assert all(len(t.get("measurements", [])) == 0 for t in ran)


def test_keep_going_runs_the_job_on(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_text(TRAIN.replace("range(1, 41)", "range(1, 5)"))
    (tmp_path / "s.yaml").write_text(SPEC.replace("max_trial_count: 6", "max_trial_count: 3"))
    assert main(["sweep", "s.yaml", "--job-id", "k", "--keep-going", "--", sys.executable, "train.py"]) == 1
    out = capsys.readouterr().out
    assert "all under tags that are not the spec's metric" not in out
    assert "3 infeasible" in out, out
