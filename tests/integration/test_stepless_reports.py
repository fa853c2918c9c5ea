"""Reports without global_step (or two at one step) are each their own measurement, in order:
BEST_MEASUREMENT picks the best of them, not the last."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TRAINER = """
import hypertune
ht = hypertune.HyperTune()
for value in (0.2, 0.9, 0.4):  # no global_step: hypertune writes "0" for each
    ht.report_hyperparameter_tuning_metric(hyperparameter_metric_tag="acc", metric_value=value)
"""
SPEC = {"studySpec": {"metrics": [{"metricId": "acc", "goal": "MAXIMIZE"}],
                      "parameters": [{"parameterId": "x", "doubleValueSpec": {"minValue": 0, "maxValue": 1}}],
                      "measurementSelectionType": "BEST_MEASUREMENT"},
        "maxTrialCount": 2, "parallelTrialCount": 1}


def test_every_report_is_a_measurement_and_best_is_the_best(tmp_path: Path) -> None:
    (tmp_path / "trainer.py").write_text(TRAINER)
    (tmp_path / "spec.json").write_text(json.dumps(SPEC))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    root = str(tmp_path / "jobs")
    run = subprocess.run([sys.executable, "-m", "trials", "sweep", "spec.json", "--root", root, "--job-id", "s",
                          "--", "python", "trainer.py"], cwd=tmp_path, env=env, capture_output=True, text=True,
                         timeout=120)
    assert run.returncode == 0, run.stdout + run.stderr
    out = run.stdout + run.stderr
    assert out.count("repeated a step already reported") == 1  # said once for the job, not per trial
    body = json.loads(subprocess.run([sys.executable, "-m", "trials", "describe", "s", "--root", root, "--format",
                                      "json"], cwd=tmp_path, env=env, capture_output=True, text=True,
                                     check=True).stdout)
    for trial in body["trials"]:
        values = [m["metrics"][0]["value"] for m in trial["measurements"]]
        assert values == [0.2, 0.9, 0.4]  # in report order, none collapsed
        assert {m["stepCount"] for m in trial["measurements"]} == {"0"}
        assert trial["finalMeasurement"]["metrics"][0]["value"] == 0.9  # BEST, not the last
