"""Early stopping with real trainers through `trials sweep`: a stop must save work (issue 16)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

SCRIPTS = Path(__file__).resolve().parent.parent / "scripts"


def sweep(tmp_path, spec_text, job_id, command):
    spec = tmp_path / "job.yaml"
    spec.write_text(spec_text)
    run = subprocess.run([sys.executable, "-m", "trials", "sweep", str(spec), "--job-id", job_id, "--root",
                          str(tmp_path / "jobs"), "--base-output-dir", str(tmp_path / "jobs" / job_id),
                          "--", *command],  # the trainers save to AIP_MODEL_DIR
                         cwd=tmp_path, capture_output=True, text=True, timeout=240)
    assert run.returncode == 0, run.stdout + run.stderr
    def describe(form):
        return json.loads(subprocess.run(
            [sys.executable, "-m", "trials", "describe", job_id, "--root", str(tmp_path / "jobs"), "--format", form],
            cwd=tmp_path, capture_output=True, text=True, check=True).stdout)

    return describe("json"), describe("local-json")["trials"]


@pytest.mark.long
def test_a_single_final_report_is_never_stopped_and_the_model_is_kept(tmp_path):
    """AI Platform's enableTrialEarlyStopping with one report at global_step=1000: every later trial is
    worse than the median of the completed ones, yet stopping it at its only report would save nothing
    and kill its model upload."""
    job, local = sweep(tmp_path, """\
trainingInput:
  scaleTier: BASIC
  hyperparameters:
    goal: MINIMIZE
    hyperparameterMetricTag: loss
    maxTrials: 12
    maxParallelTrials: 1
    algorithm: GRID_SEARCH
    enableTrialEarlyStopping: true
    params:
    - {parameterName: loss, type: DISCRETE, discreteValues: [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12]}
  masterConfig: {imageUri: local}
  args: ["--save_s=1.5"]
""", "single", [sys.executable, str(SCRIPTS / "final_report_trainer.py")])
    trials = job["trials"]
    assert len(trials) == 12 and all(t["state"] == "SUCCEEDED" for t in trials)
    assert len(local) == 12 and not any(local[t["id"]].get("stopped_early") for t in trials), local
    for t in trials:
        assert [m["stepCount"] for m in t["measurements"]] == ["1000"]
        assert (tmp_path / "jobs" / "single" / t["id"] / "model" / "model.txt").exists(), t["id"]


@pytest.mark.long
def test_a_trial_told_to_stop_that_runs_to_its_end_is_not_stopped_early(tmp_path):
    """examples/argparse_hypertune: trials that ran 10 of 10 steps were counted stopped early. A trial
    that ignores SIGTERM and finishes all its steps ran to its end: it is not stopped early."""
    job, local = sweep(tmp_path, """\
trainingInput:
  scaleTier: BASIC
  hyperparameters:
    goal: MINIMIZE
    hyperparameterMetricTag: loss
    maxTrials: 12
    maxParallelTrials: 1
    algorithm: GRID_SEARCH
    enableTrialEarlyStopping: true
    params:
    - {parameterName: loss, type: DISCRETE, discreteValues: [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12]}
  masterConfig: {imageUri: local}
""", "stubborn", [sys.executable, str(SCRIPTS / "stubborn_trainer.py")])
    trials = job["trials"]
    assert len(trials) == 12 and all(t["state"] == "SUCCEEDED" for t in trials)
    assert all(len(t["measurements"]) == 8 for t in trials)  # every trial ran all its epochs
    assert not any(local[t["id"]].get("stopped_early") for t in trials), local
