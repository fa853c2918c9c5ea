"""Vertex's two retry budgets (D-SVC): a transient exit (SIGABRT 134, SIGSEGV 139) retries the
trial's whole CustomJob up to 3 times; other non-permanent exits restart that worker up to 5 times.
restartJobOnWorkerRestart restarts every replica, counting TRIALS_ATTEMPT 0, 1, 2, ..."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TRAINER = """
import os, sys, time
mode = sys.argv[1]
replica, attempt = os.environ["TRIALS_REPLICA"], int(os.environ["TRIALS_ATTEMPT"])
trial_dir = os.environ["TRIALS_TRIAL_DIR"]
with open(os.path.join(trial_dir, f"attempts-{replica}.txt"), "a") as f:  # before any slow import
    f.write(f"{attempt}\\n")
if mode == "sigsegv_once" and attempt == 0:
    sys.exit(139)
if mode == "abort_always":
    sys.exit(134)
if mode == "worker_crashes_twice":
    done = os.path.join(trial_dir, "worker-done")
    if replica != "workerpool0-0":
        if attempt < 2:
            sys.exit(3)
        open(done, "w").close()
        time.sleep(60)  # stopped by the controller once the primary succeeds
    deadline = time.time() + 60
    while not os.path.exists(done) and time.time() < deadline:
        time.sleep(0.05)
import hypertune
hypertune.HyperTune().report_hyperparameter_tuning_metric(
    hyperparameter_metric_tag="loss", metric_value=1.0, global_step=1)
"""


def _spec(restart_all: bool, workers: int) -> dict:
    pool = {"machineSpec": {"machineType": "n1-standard-4"}, "replicaCount": "1",
            "containerSpec": {"imageUri": "local", "command": ["python", "trainer.py"]}}
    pools = [pool] + ([{**pool, "replicaCount": str(workers)}] if workers else [])
    return {"studySpec": {"metrics": [{"metricId": "loss", "goal": "MINIMIZE"}],
                          "parameters": [{"parameterId": "x", "doubleValueSpec": {"minValue": 0, "maxValue": 1}}]},
            "maxTrialCount": 1, "parallelTrialCount": 1,
            "trialJobSpec": {"workerPoolSpecs": pools,
                             "scheduling": {"restartJobOnWorkerRestart": restart_all}}}


def _run(tmp_path: Path, mode: str, *, restart_all: bool = False, workers: int = 0):
    (tmp_path / "trainer.py").write_text(TRAINER)
    spec = _spec(restart_all, workers)
    for pool in spec["trialJobSpec"]["workerPoolSpecs"]:
        pool["containerSpec"]["args"] = [mode]
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    root = str(tmp_path / "jobs")
    run = subprocess.run([sys.executable, "-m", "trials", "sweep", "spec.json", "--root", root, "--job-id", "r",
                          "--grace-period", "1"], cwd=tmp_path, env=env, capture_output=True, text=True,
                         timeout=180)
    local = json.loads(subprocess.run(
        [sys.executable, "-m", "trials", "describe", "r", "--root", root, "--format", "local-json"],
        cwd=tmp_path, env=env, capture_output=True, text=True, check=True).stdout)["trials"]["1"]
    body = json.loads(subprocess.run(
        [sys.executable, "-m", "trials", "describe", "r", "--root", root, "--format", "json"],
        cwd=tmp_path, env=env, capture_output=True, text=True, check=True).stdout)
    return run, local, body, tmp_path / "jobs" / "r" / "1"


def test_a_transient_exit_retries_the_custom_job_and_says_which_budget(tmp_path: Path) -> None:
    run, local, body, trial_dir = _run(tmp_path, "sigsegv_once")
    assert run.returncode == 0, run.stdout + run.stderr
    assert body["trials"][0]["state"] == "SUCCEEDED"
    first = local["attempts"][0]
    assert first["exitStatus"] == 139 and first["budget"] == "job retry 1 of 3"
    assert "the trial's CustomJob runs again, job retry 1 of 3" in run.stdout
    assert (trial_dir / "attempts-workerpool0-0.txt").read_text().split() == ["0", "1"]


def test_transient_exits_fail_the_trial_after_three_job_retries(tmp_path: Path) -> None:
    run, local, body, _ = _run(tmp_path, "abort_always")
    assert run.returncode == 1
    assert [a["exitStatus"] for a in local["attempts"]] == [134] * 4  # the first run and 3 retries
    assert [a.get("budget") for a in local["attempts"][:3]] == [f"job retry {i} of 3" for i in (1, 2, 3)]
    assert "retried 3 times, the limit for transient exits" in local["error_detail"][-1]
    assert body["trials"][0]["infeasibleReason"] == (
        "The replica workerpool0-0 exited with a non-zero status of 134. Termination reason: Error.")


def test_restart_job_on_worker_restart_counts_attempts_one_by_one(tmp_path: Path) -> None:
    run, local, body, trial_dir = _run(tmp_path, "worker_crashes_twice", restart_all=True, workers=1)
    assert run.returncode == 0, run.stdout + run.stderr
    assert body["trials"][0]["state"] == "SUCCEEDED"
    assert "injected" not in run.stdout  # no chaos mode: nothing is called a maintenance restart
    for replica in ("workerpool0-0", "workerpool1-0"):
        booked = [a["attempt"] for a in local["attempts"] if a["replica"] == replica]
        assert booked == list(range(len(booked))), booked  # 0, 1, 2, ...: one per restart
        seen = [int(a) for a in (trial_dir / f"attempts-{replica}.txt").read_text().split()]
        assert seen == sorted(set(seen)) and set(seen) <= set(booked)  # a restart may be stopped early
    worker = [a for a in local["attempts"] if a["replica"] == "workerpool1-0" and a["exitStatus"] == 3]
    assert [a["budget"] for a in worker] == ["worker restart 1 of 5", "worker restart 2 of 5"]
