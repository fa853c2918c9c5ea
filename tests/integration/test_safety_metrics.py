"""A safety metric (safetyConfig) is reported and shown, never optimised: one objective, one column more."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TRAINER = """
import sys, hypertune
x = float(sys.argv[-1].split("=")[1])
ht = hypertune.HyperTune()
ht.report_hyperparameter_tuning_metric(hyperparameter_metric_tag="loss", metric_value=(x - 0.3) ** 2, global_step=1)
ht.report_hyperparameter_tuning_metric(hyperparameter_metric_tag="latency", metric_value=10 * x, global_step=1)
"""
SPEC = {"displayName": "safe",
        "studySpec": {"metrics": [{"metricId": "latency", "goal": "MINIMIZE",
                                   "safetyConfig": {"safetyThreshold": 5}},
                                  {"metricId": "loss", "goal": "MINIMIZE"}],
                      "parameters": [{"parameterId": "x", "doubleValueSpec": {"minValue": 0, "maxValue": 1}}],
                      "algorithm": "RANDOM_SEARCH"},
        "maxTrialCount": 3, "parallelTrialCount": 1}


def test_a_safety_metric_is_recorded_and_shown_but_not_an_objective(tmp_path: Path) -> None:
    (tmp_path / "trainer.py").write_text(TRAINER)
    (tmp_path / "spec.json").write_text(json.dumps(SPEC))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    root = str(tmp_path / "jobs")

    def cli(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "trials", args[0], "--root", root, *args[1:]], cwd=tmp_path,
                              env=env, capture_output=True, text=True, timeout=120)

    run = cli("sweep", "spec.json", "--job-id", "s", "--seed", "3", "--", "python", "trainer.py")
    assert run.returncode == 0, run.stdout + run.stderr
    assert "latency" not in run.stderr  # not an unknown tag
    body = json.loads(cli("describe", "s", "--format", "json").stdout)
    assert body["studySpec"]["metrics"] == SPEC["studySpec"]["metrics"]  # as it came
    for t in body["trials"]:
        assert {m["metricId"] for m in t["finalMeasurement"]["metrics"]} == {"loss", "latency"}
    table = cli("describe", "s").stdout
    assert "latency" in table.splitlines()[1]  # a column of the table
    import optuna
    from optuna.storages.journal import JournalFileBackend

    study = optuna.load_study(study_name="s", storage=optuna.storages.JournalStorage(
        JournalFileBackend(str(tmp_path / "jobs" / "s" / "journal.log"))))
    assert len(study.directions) == 1  # only loss is optimised
    assert all(len(t.values) == 1 for t in study.trials)
