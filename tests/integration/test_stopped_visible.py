"""A trial stopped early is visible as such everywhere a user looks: sweep output, describe table
and CSV, the report's tables and plots, `trials best`, and the Optuna storage (PRUNED, as
optuna-dashboard shows it, with the stop reason as a user attribute)."""

from __future__ import annotations

import csv
import io
import json
import subprocess
import sys
from pathlib import Path

import optuna
import pytest

ROOT = Path(__file__).resolve().parents[2]
COUNTER = ROOT / "tests" / "scripts" / "counter_trial.py"
# score = learning_rate * step, to minimize: grid order 0.1 ... 1.1, so each trial runs worse than all before
# it (trials 1-5 run to their end: the leaders' bar needs 5 trials, and no completed curve was behind them to say
# how far a curve from there gets, so the median spec waits; 6-11 are behind the leaders)
SPEC = f"""
metrics: {{score: minimize}}
parameters:
  learning_rate: {{type: discrete, values: [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 1.1]}}
algorithm: grid
stopping: {{type: median}}
max_trial_count: 11
parallel_trial_count: 1
command: [{sys.executable}, {COUNTER}, --epochs=8, --sleep_s=0.15]
"""


def trials_cli(tmp_path: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "trials", *argv, "--root", str(tmp_path / "jobs")],
                          cwd=tmp_path, capture_output=True, text=True, timeout=240)


pytestmark = pytest.mark.long  # one 11-trial job that the module's tests read


@pytest.fixture(scope="module")
def job(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp_path = tmp_path_factory.mktemp("stopped")
    (tmp_path / "spec.yaml").write_text(SPEC)
    run = trials_cli(tmp_path, "sweep", "spec.yaml", "--job-id", "st")
    assert run.returncode == 0, run.stdout + run.stderr
    assert "trial 11 SUCCEEDED (stopped early) at step " in run.stdout  # the step it reached
    return tmp_path


def test_describe_table_and_csv_show_the_stop(job: Path) -> None:
    rows = list(csv.DictReader(io.StringIO(trials_cli(job, "describe", "st", "--format", "csv").stdout)))
    assert [(r["trial"], r["state"], r["stopped early"]) for r in rows] == [
        *((str(i), "SUCCEEDED", "") for i in range(1, 6)), *((str(i), "SUCCEEDED", "yes") for i in range(6, 12))]
    assert "the worst there of the" in rows[10]["reason"] and rows[0]["reason"] == ""
    table = trials_cli(job, "describe", "st").stdout.splitlines()
    assert "stopped early" in table[1] and table[12].split()[:2] == ["11", "SUCCEEDED"] and " yes " in table[12]


def test_optuna_storage_has_it_pruned_with_the_reason(job: Path) -> None:
    storage = optuna.storages.JournalStorage(
        optuna.storages.journal.JournalFileBackend(str(job / "jobs" / "st" / "journal.log")))
    trials = optuna.load_study(study_name="st", storage=storage).get_trials(deepcopy=False)
    assert [t.state.name for t in trials] == ["COMPLETE"] * 5 + ["PRUNED"] * 6
    assert trials[10].user_attrs["stopped_early"] is True and "leaders" in trials[10].user_attrs["stop_reason"]


def test_best_and_report_never_take_the_stopped_value_as_a_result(job: Path) -> None:
    best = json.loads(trials_cli(job, "best", "st", "--format", "json").stdout)["best"]
    assert [b["trial_id"] for b in best] == ["1"]
    out = trials_cli(job, "report", "st")
    assert out.returncode == 0, out.stderr
    page = (job / "jobs" / "st" / "report" / "index.html").read_text()
    assert "<h2>Stopped early</h2>" in page and "<th>stopped early</th>" in page
    assert page.count("<svg") >= 3 and '"11": "trial 11 · SUCCEEDED, stopped early at step' in page
