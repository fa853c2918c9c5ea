"""A real trainer that never reports the spec's metric: the job stops after its first 3 trials with the
reason and its fix (maxFailedTrialCount unset); ``--keep-going`` runs every trial."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TRAIN = ROOT / "examples" / "argparse_hypertune" / "train.py"  # hypertune: reports val_loss, not accuracy
SPEC = """
metrics: {{accuracy: maximize}}
parameters:
  learning_rate: {{type: double, min: 0.01, max: 0.5, scale: log}}
max_trial_count: 4
parallel_trial_count: 1
command: [{python}, {trainer}, --epochs=2]
"""
REASON = ("The trial finished without reporting the objective metric accuracy; it reported val_loss. Report it "
          "with hypertune's report_hyperparameter_tuning_metric(hyperparameter_metric_tag=...).")

pytestmark = pytest.mark.integration


def _sweep(tmp_path: Path, job_id: str, *flags: str) -> tuple[int, list[str]]:
    (tmp_path / "spec.yaml").write_text(SPEC.format(python=sys.executable, trainer=TRAIN))
    run = subprocess.run([sys.executable, "-m", "trials", "sweep", "spec.yaml", "--root", str(tmp_path / "jobs"),
                          "--job-id", job_id, *flags], cwd=tmp_path, capture_output=True, text=True, timeout=240)
    lines = [ln[11:] if ln.startswith("[") else ln for ln in run.stdout.splitlines()]
    # the line saying how parameters were chosen comes between the job's end line and its error: not checked here
    return run.returncode, [ln for ln in lines if not ln.startswith("suggestions: ")]


def test_the_first_3_trials_infeasible_for_one_reason_stop_the_job(tmp_path: Path) -> None:
    code, lines = _sweep(tmp_path, "same")
    assert code == 1, lines
    assert [ln.split(" ")[:3] for ln in lines if ln.startswith("trial ") and " INFEASIBLE " in ln] == [
        ["trial", "1", "INFEASIBLE"], ["trial", "2", "INFEASIBLE"], ["trial", "3", "INFEASIBLE"]]
    assert not any(ln.startswith("trial 4 ") for ln in lines)
    assert lines[-2:] == [
        "job same JOB_STATE_FAILED: 0 succeeded (0 stopped early), 3 infeasible, 1 not run; at most 1 in parallel",
        "error: The first 3 trials were infeasible for the same reason and none succeeded, so the job stopped "
        f"(maxFailedTrialCount unset; --keep-going runs every trial). Trials 1, 2, 3: {REASON}",
    ]
    described = subprocess.run([sys.executable, "-m", "trials", "describe", "same", "--root", str(tmp_path / "jobs"),
                                "--format", "json"], capture_output=True, text=True, timeout=60)
    assert '"state": "JOB_STATE_FAILED"' in described.stdout and '"code": 3' in described.stdout

    resume = [sys.executable, "-m", "trials", "resume", "same", "--root", str(tmp_path / "jobs")]
    again = subprocess.run(resume, capture_output=True, text=True, timeout=120)
    assert (again.returncode, again.stdout) == (2, "")  # refused, nothing written
    assert again.stderr == ("trials: error: job same would fail again at once: its first trials were infeasible "
                            "for the same reason and none succeeded; fix that, then resume it with --keep-going to "
                            "run its 1 trial left\n")
    on = subprocess.run([*resume, "--keep-going"], capture_output=True, text=True, timeout=120)
    assert on.returncode == 1 and "trial 4 INFEASIBLE" in on.stdout, on.stdout + on.stderr
    assert "job same JOB_STATE_SUCCEEDED: 0 succeeded (0 stopped early), 4 infeasible, 0 not run" in on.stdout


def test_keep_going_runs_every_trial(tmp_path: Path) -> None:
    code, lines = _sweep(tmp_path, "all", "--keep-going")
    assert code == 1, lines  # no trial succeeded
    assert sum(" INFEASIBLE " in ln for ln in lines if ln.startswith("trial ")) == 4
    assert lines[-2] == ("job all JOB_STATE_SUCCEEDED: 0 succeeded (0 stopped early), 4 infeasible, 0 not run; "
                         "at most 1 in parallel")
    assert lines[-1] == f"error: no trial succeeded, so this job found nothing (first reason: {REASON})"
