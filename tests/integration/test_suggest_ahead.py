"""A real sweep with the GP: its suggestions are made in the sampler's own process, torch never in the controller."""

import os
import subprocess
import sys

import pytest

from trials.study.samplers import gp_available

pytestmark = pytest.mark.skipif(not gp_available(), reason="the GP sampler needs torch and scipy")

SPEC = """\
studySpec:
  metrics:
  - metricId: loss
    goal: MINIMIZE
  parameters:
  - parameterId: x
    doubleValueSpec: {minValue: -5, maxValue: 10}
maxTrialCount: 13
parallelTrialCount: 2
"""
TRAIN = """\
import argparse, hypertune
p = argparse.ArgumentParser(); p.add_argument("--x", type=float); a = p.parse_args()
hypertune.HyperTune().report_hyperparameter_tuning_metric(
    hyperparameter_metric_tag="loss", metric_value=(a.x - 1) ** 2, global_step=1)
"""


def test_the_gp_suggests_in_its_own_process_and_the_job_runs_to_its_end(tmp_path):
    (tmp_path / "spec.yaml").write_text(SPEC)
    (tmp_path / "train.py").write_text(TRAIN)
    env = {**os.environ, "PYTHONPROFILEIMPORTTIME": "1"}  # every Python process logs its imports on stderr
    env.pop("TRIALS_SUGGEST", None)
    out = subprocess.run([sys.executable, "-m", "trials", "sweep", "spec.yaml", "--job-id", "gp", "--seed", "1",
                          "--", sys.executable, "train.py"], capture_output=True, text=True, cwd=tmp_path,
                         env=env, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "job gp JOB_STATE_SUCCEEDED: 13 succeeded" in out.stdout
    imported = {line.rsplit("|", 1)[-1].strip() for line in out.stderr.splitlines() if line.startswith("import time:")}
    assert "optuna" in imported and "torch" not in imported  # the controller's own imports
    worker_log = (tmp_path / "trials-jobs" / "gp" / "sampler.log").read_text()
    assert "| torch" in worker_log  # the worker's
    described = subprocess.run([sys.executable, "-m", "trials", "describe", "gp", "--format", "json"],
                               capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert described.returncode == 0, described.stderr
    assert described.stdout.count('"state": "SUCCEEDED"') == 13
