"""A job where no trial reports the spec's metric: said loudly at the first such trial, with the tags
it did report and how to report the right one; `trials sweep` exits 1 when no trial succeeded."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PLAIN = ROOT / "examples" / "argparse_hypertune" / "train.py"  # hypertune: reports val_loss
RUNTIME = ROOT / "tests" / "scripts" / "counter_trial.py"  # trials.main: reports score and epoch
SPEC = """
metrics: {{accuracy: maximize}}
parameters:
  learning_rate: {{type: double, min: 0.01, max: 0.5, scale: log}}
max_trial_count: 3
parallel_trial_count: 1
max_failed_trial_count: 0
command: [{python}, {trainer}, --epochs=2]
"""


@pytest.mark.parametrize("trainer, reported, how", [
    (PLAIN, "val_loss", "report it with hypertune.HyperTune().report_hyperparameter_tuning_metric("
                        "hyperparameter_metric_tag='accuracy', metric_value=value, global_step=step)"),
    (RUNTIME, "epoch, score", "report it with ctx.report(step, accuracy=value)"),
])
def test_a_job_where_nothing_worked_says_so_at_once_and_exits_1(tmp_path, trainer, reported, how):
    (tmp_path / "spec.yaml").write_text(SPEC.format(python=sys.executable, trainer=trainer))
    run = subprocess.run([sys.executable, "-m", "trials", "sweep", "spec.yaml", "--root", str(tmp_path / "jobs"),
                          "--job-id", "n"], cwd=tmp_path, capture_output=True, text=True, timeout=240)
    assert run.returncode == 1, run.stdout + run.stderr
    lines = [ln[11:] if ln.startswith("[") else ln for ln in run.stdout.splitlines()]
    warnings = [i for i, ln in enumerate(lines) if ln.startswith("warning: trial 1 ended without")]
    assert len(warnings) == 1, run.stdout  # once, not per trial
    first_done = next(i for i, ln in enumerate(lines) if ln.startswith("trial 1 INFEASIBLE"))
    assert first_done < warnings[0] < next(i for i, ln in enumerate(lines) if ln.startswith("trial 2 started"))
    advice = lines[warnings[0]]
    assert f"ended without the spec's metric accuracy (it reported {reported})" in advice and how in advice
    assert "job n JOB_STATE_SUCCEEDED: 0 succeeded (0 stopped early), 3 infeasible" in run.stdout
    assert lines[-1].startswith("error: no trial succeeded, so this job found nothing (first reason: ")
