"""The local HyperparameterTuningJob end to end: real `trials` processes, real trial processes."""

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

TRAINER = str(Path(__file__).resolve().parent.parent / "scripts" / "ctl_trainer.py")


def write_spec(path, *, mode="ok", max_trials=4, parallel=2, stopping="", extra_args=(), timeout=None,
               pools=1, max_failed=None, epochs=5, selection=None, algorithm=None):
    args = [f"--mode={mode}", f"--epochs={epochs}", *extra_args]
    lines = [
        "studySpec:",
        "  metrics: [{metricId: score, goal: MAXIMIZE}]",
        "  parameters:",
        "  - {parameterId: x, doubleValueSpec: {minValue: 0.0, maxValue: 1.0}}",
        "  - {parameterId: n, integerValueSpec: {minValue: 1, maxValue: 3}}",
    ]
    if stopping:
        lines.append(f"  {stopping}")
    if selection:
        lines.append(f"  measurementSelectionType: {selection}")
    if algorithm:
        lines.append(f"  algorithm: {algorithm}")
    lines += [f"maxTrialCount: {max_trials}", f"parallelTrialCount: {parallel}"]
    if max_failed is not None:
        lines.append(f"maxFailedTrialCount: {max_failed}")
    lines += ["trialJobSpec:"]
    if timeout:
        lines.append(f"  scheduling: {{timeout: {timeout}}}")
    lines.append("  workerPoolSpecs:")
    pool = (f"  - {{machineSpec: {{machineType: n1-standard-4}}, replicaCount: REPLICAS, containerSpec: "
            f"{{imageUri: local, command: [python, {json.dumps(TRAINER)}], args: {json.dumps(args)}}}}}")
    lines.append(pool.replace("REPLICAS", "1"))
    if pools > 1:
        lines.append(pool.replace("REPLICAS", str(pools - 1)))
    path.write_text("\n".join(lines) + "\n")
    return path


def trials_cli(*argv, cwd, check=True, timeout=60):
    proc = subprocess.run([sys.executable, "-m", "trials", *argv], cwd=cwd, capture_output=True,
                          text=True, timeout=timeout)
    if check and proc.returncode not in (0,):
        raise AssertionError(f"exit {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}")
    return proc


def describe(tmp_path, job):
    out = trials_cli("describe", job, "--format", "json", cwd=tmp_path).stdout
    return json.loads(out)


def local(tmp_path, job):
    """``describe --format local-json``: per-trial attempts, stop reasons, folders."""
    out = trials_cli("describe", job, "--format", "local-json", cwd=tmp_path).stdout
    return json.loads(out)["trials"]


def test_parallel_job_with_pruning_env_and_layout(tmp_path):
    spec = write_spec(tmp_path / "job.yaml", max_trials=8, parallel=2, epochs=8,
                      stopping="medianAutomatedStoppingSpec: {useElapsedDuration: false}",
                      extra_args=["--sleep=0.03"])
    out = tmp_path / "trials-jobs" / "j"  # a local base on purpose: AIP_* under the job folder
    run = trials_cli("sweep", str(spec), "--job-id", "j", "--project-number", "42", "--base-output-dir", str(out),
                     cwd=tmp_path)
    assert "JOB_STATE_SUCCEEDED" in run.stdout
    job = describe(tmp_path, "j")
    assert job["state"] == "JOB_STATE_SUCCEEDED"
    trials = job["trials"]
    assert [t["id"] for t in trials] == [str(i) for i in range(1, 9)]
    assert all(t["state"] == "SUCCEEDED" for t in trials)
    for t in trials:
        steps = [int(m["stepCount"]) for m in t["measurements"]]
        assert steps == list(range(1, len(steps) + 1))
        assert t["finalMeasurement"]["stepCount"] == t["measurements"][-1]["stepCount"]  # LAST (unset)
        assert t["finalMeasurement"]["elapsedDuration"].endswith("s")
    # parallelism: reached 2, never exceeded
    spans = []
    job_dir = tmp_path / "trials-jobs" / "j"
    for t in trials:
        seen = json.loads((job_dir / t["id"] / "seen-workerpool0-0-0.json").read_text())
        end_file = job_dir / t["id"] / "end-workerpool0-0.json"
        end = json.loads(end_file.read_text())["end"] if end_file.exists() else seen["start"] + 0.05
        spans.append((seen["start"], end))
    overlap = max(sum(1 for s, e in spans if s <= t0 < e) for t0, _ in spans)
    assert overlap == 2
    # env contract and layout
    seen = json.loads((job_dir / "3" / "seen-workerpool0-0-0.json").read_text())
    env = seen["env"]
    assert env["CLOUD_ML_TRIAL_ID"] == "3" and env["CLOUD_ML_JOB_ID"] == "j"
    assert env["CLOUD_ML_PROJECT_ID"] == "42"
    assert env["AIP_MODEL_DIR"] == str(job_dir / "3" / "model") + "/"
    assert env["CLOUD_ML_HP_METRIC_FILE"] == str(job_dir / "3" / "hypertune.metrics")
    assert "TF_CONFIG" not in env
    assert seen["argv"][:2] == ["--mode=ok", "--epochs=8"]
    assert seen["argv"][3].startswith("--x=") and seen["argv"][4].startswith("--n=")
    assert not seen["argv"][4].endswith(".0")
    for name in ("args.json", "env.json", "workerpool0-0.stdout.log", "workerpool0-0.stderr.log"):
        assert (job_dir / "3" / name).exists()
    assert (job_dir / "3" / "checkpoints").is_dir()


def test_best_measurement_selection(tmp_path):
    spec = write_spec(tmp_path / "job.yaml", max_trials=1, parallel=1, selection="BEST_MEASUREMENT")
    trials_cli("sweep", str(spec), "--job-id", "b", cwd=tmp_path)
    t = describe(tmp_path, "b")["trials"][0]
    best = max(t["measurements"], key=lambda m: m["metrics"][0]["value"])
    assert t["finalMeasurement"]["stepCount"] == best["stepCount"]


def test_crash_once_resumes_and_succeeds(tmp_path):
    spec = write_spec(tmp_path / "job.yaml", mode="crash_once", max_trials=1, parallel=1)
    trials_cli("sweep", str(spec), "--job-id", "c", cwd=tmp_path)
    job = describe(tmp_path, "c")
    (t,) = job["trials"]
    assert t["state"] == "SUCCEEDED"
    attempts = local(tmp_path, "c")["1"]["attempts"]
    assert [a["exitStatus"] for a in attempts] == [3, 0]
    assert (tmp_path / "trials-jobs" / "c" / "1" / "seen-workerpool0-0-1.json").exists()  # same trial, attempt 1


def test_crash_always_fails_after_five_restarts_and_three_job_retries_with_vertex_template(tmp_path):
    spec = write_spec(tmp_path / "job.yaml", mode="crash_always", max_trials=1, parallel=1)
    run = trials_cli("sweep", str(spec), "--job-id", "c6", cwd=tmp_path, check=False)
    assert run.returncode == 1
    job = describe(tmp_path, "c6")
    (t,) = job["trials"]
    assert t["state"] == "INFEASIBLE"
    assert t["infeasibleReason"].startswith(
        "The replica workerpool0-0 exited with a non-zero status of 3. Termination reason:")
    attempts = local(tmp_path, "c6")["1"]["attempts"]
    assert len(attempts) == 24  # 4 runs of the CustomJob: each the first start and 5 worker restarts
    assert [a["budget"] for a in attempts if a.get("budget", "").startswith("job retry")] == [
        f"job retry {i} of 3, after 5 worker restarts" for i in (1, 2, 3)]
    assert job["state"] == "JOB_STATE_FAILED"
    assert "first trial failed" in job["error"]["message"]


def test_user_error_is_permanent_and_quoted(tmp_path):
    spec = write_spec(tmp_path / "job.yaml", mode="error", max_trials=2, parallel=1, max_failed=2)
    trials_cli("sweep", str(spec), "--job-id", "e", cwd=tmp_path, check=False)
    job = describe(tmp_path, "e")
    assert [t["state"] for t in job["trials"]] == ["INFEASIBLE", "INFEASIBLE"]
    assert job["trials"][0]["infeasibleReason"] == (
        "The replica workerpool0-0 exited with a non-zero status of 1. Termination reason: Error.")
    assert local(tmp_path, "e")["1"]["error_detail"][0].startswith("ValueError: bad x")
    assert job["error"]["code"] == 3
    assert len(local(tmp_path, "e")["1"]["attempts"]) == 1  # exit 1: no restart
    assert job["state"] == "JOB_STATE_FAILED" and "maxFailedTrialCount=2" in job["error"]["message"]


def test_max_failed_trial_count_lets_the_job_continue(tmp_path):
    spec = write_spec(tmp_path / "job.yaml", mode="error", max_trials=2, parallel=1, max_failed=2)
    trials_cli("sweep", str(spec), "--job-id", "e2", "--max-trial-count", "3", cwd=tmp_path, check=False)
    job = describe(tmp_path, "e2")
    # the job stops at the 2nd failure: the third trial never runs
    assert job["state"] == "JOB_STATE_FAILED" and len(job["trials"]) == 2


def test_oom_uses_the_oom_template(tmp_path):
    spec = write_spec(tmp_path / "job.yaml", mode="oom", max_trials=1, parallel=1)
    trials_cli("sweep", str(spec), "--job-id", "o", "--memory-limit", "150", cwd=tmp_path, check=False)
    (t,) = describe(tmp_path, "o")["trials"]
    assert t["infeasibleReason"] == ("The replica workerpool0-0 ran out of memory and exited with a "
                                     "non-zero status of 137.")


def test_timeout_stops_and_fails_the_trial(tmp_path):
    spec = write_spec(tmp_path / "job.yaml", mode="hang", max_trials=1, parallel=1, timeout="1s")
    t0 = time.monotonic()
    trials_cli("sweep", str(spec), "--job-id", "t", "--grace-period", "0.5", cwd=tmp_path, check=False)
    assert time.monotonic() - t0 < 20
    (t,) = describe(tmp_path, "t")["trials"]
    assert t["state"] == "INFEASIBLE" and "maximum running time of 1s" in t["infeasibleReason"]


def test_primary_exit_zero_stops_workers(tmp_path):
    spec = write_spec(tmp_path / "job.yaml", mode="worker_hang", max_trials=1, parallel=1, pools=3)
    t0 = time.monotonic()
    trials_cli("sweep", str(spec), "--job-id", "m", "--grace-period", "1", cwd=tmp_path)
    assert time.monotonic() - t0 < 20
    job = describe(tmp_path, "m")
    assert job["trials"][0]["state"] == "SUCCEEDED"
    job_dir = tmp_path / "trials-jobs" / "m" / "1"
    worker = json.loads((job_dir / "seen-workerpool1-1-0.json").read_text())
    assert worker["env"]["RANK"] == "2" and worker["env"]["WORLD_SIZE"] == "3"
    assert json.loads(worker["env"]["TF_CONFIG"])["task"]["type"] == "worker"
    assert worker["pid"] > 0  # a pid of its own PID namespace with the sandbox: not the host's
    assert _alive_trainers(tmp_path / "trials-jobs" / "m") == []  # every replica of the job is gone


def _alive_trainers(job_dir):
    pids = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            environ = (proc / "environ").read_bytes()
            stat = (proc / "stat").read_text()
        except OSError:
            continue
        if str(job_dir).encode() in environ and ") Z" not in stat:
            pids.append(int(proc.name))
    return pids


def test_controller_sigkill_then_resume_completes_exactly(tmp_path):
    spec = write_spec(tmp_path / "job.yaml", max_trials=8, parallel=2, epochs=10, extra_args=["--sleep=0.05"])
    proc = subprocess.Popen([sys.executable, "-m", "trials", "sweep", str(spec), "--job-id", "k"],
                            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    job_dir = tmp_path / "trials-jobs" / "k"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not (job_dir / "3").exists():
        time.sleep(0.05)
    time.sleep(0.2)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    before = {t["id"]: t for t in describe(tmp_path, "k")["trials"] if t["state"] == "SUCCEEDED"}
    assert before, "the controller was killed before any trial finished"
    time.sleep(0.5)
    assert _alive_trainers(job_dir) == []  # the replicas died with their controller
    trials_cli("resume", "k", cwd=tmp_path)
    job = describe(tmp_path, "k")
    assert job["state"] == "JOB_STATE_SUCCEEDED"
    assert [t["id"] for t in job["trials"]] == [str(i) for i in range(1, 9)]
    assert all(t["state"] == "SUCCEEDED" for t in job["trials"])
    after = {t["id"]: t for t in job["trials"]}
    for trial_id, t in before.items():  # completed trials untouched
        assert after[trial_id]["finalMeasurement"] == t["finalMeasurement"]
        assert after[trial_id]["parameters"] == t["parameters"]
    assert _alive_trainers(job_dir) == []


def test_cancel_with_sigint_then_resume(tmp_path):
    spec = write_spec(tmp_path / "job.yaml", max_trials=6, parallel=2, epochs=20, extra_args=["--sleep=0.05"])
    proc = subprocess.Popen([sys.executable, "-m", "trials", "sweep", str(spec), "--job-id", "s"],
                            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    job_dir = tmp_path / "trials-jobs" / "s"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not (job_dir / "1" / "seen-workerpool0-0-0.json").exists():
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 130, out
    assert describe(tmp_path, "s")["state"] == "JOB_STATE_CANCELLED"
    assert _alive_trainers(job_dir) == []
    trials_cli("resume", "s", cwd=tmp_path)
    job = describe(tmp_path, "s")
    assert job["state"] == "JOB_STATE_SUCCEEDED" and len(job["trials"]) == 6


def test_resume_adds_trials_to_a_finished_job(tmp_path):
    spec = write_spec(tmp_path / "job.yaml", max_trials=2, parallel=2)
    trials_cli("sweep", str(spec), "--job-id", "r", cwd=tmp_path)
    trials_cli("resume", "r", "--max-trial-count", "4", cwd=tmp_path)
    job = describe(tmp_path, "r")
    assert [t["id"] for t in job["trials"]] == ["1", "2", "3", "4"]
    assert job["state"] == "JOB_STATE_SUCCEEDED"


def test_grid_search_visits_every_point_once(tmp_path):
    spec = tmp_path / "grid.yaml"
    spec.write_text(write_spec(tmp_path / "g0.yaml", max_trials=50, parallel=2).read_text()
                    .replace("{parameterId: x, doubleValueSpec: {minValue: 0.0, maxValue: 1.0}}",
                             "{parameterId: x, discreteValueSpec: {values: [0.1, 0.3]}}")
                    .replace("  parameters:", "  algorithm: GRID_SEARCH\n  parameters:"))
    trials_cli("sweep", str(spec), "--job-id", "g", cwd=tmp_path)
    job = describe(tmp_path, "g")
    points = [tuple((p["parameterId"], p["value"]) for p in t["parameters"]) for t in job["trials"]]
    assert len(points) == 6 == len(set(points))


ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.skipif(__import__("importlib").util.find_spec("sklearn") is None,
                    reason="the digits example reads the data bundled with scikit-learn")
def test_the_examples_trainer_parallel_with_pruning(tmp_path):
    """Issue 4's acceptance run: the runtime example, 2 parallel trials, median early stopping."""
    from trials.timefmt import parse_rfc3339

    run = subprocess.run(
        [sys.executable, "-m", "trials", "sweep", "search_spaces/digits_mlp.yaml", "--root", str(tmp_path),
         "--job-id", "ex", "--max-trial-count", "8", "--seed", "5", "--project-number", "7"],
        cwd=ROOT, capture_output=True, text=True, timeout=240)
    assert run.returncode == 0, run.stdout + run.stderr
    out = subprocess.run([sys.executable, "-m", "trials", "describe", "ex", "--root", str(tmp_path),
                          "--format", "json"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    job = json.loads(out)
    assert job["state"] == "JOB_STATE_SUCCEEDED"
    assert job["studySpec"]["medianAutomatedStoppingSpec"] is not None
    trials = job["trials"]
    assert [t["id"] for t in trials] == [str(i) for i in range(1, 9)]
    assert all(t["state"] == "SUCCEEDED" for t in trials)
    assert "trialsLocal" not in job
    stopped = json.loads(subprocess.run(
        [sys.executable, "-m", "trials", "describe", "ex", "--root", str(tmp_path), "--format", "local-json"],
        cwd=ROOT, capture_output=True, text=True, check=True).stdout)["trials"]
    n_stopped = sum(1 for t in trials if stopped.get(t["id"], {}).get("stopped_early"))
    for t in trials:
        steps = [int(m["stepCount"]) for m in t["measurements"]]
        assert steps == list(range(1, len(steps) + 1))  # one measurement per epoch, in order
        assert {m["metricId"] for m in t["measurements"][0]["metrics"]} == {"accuracy"}
        full = len(steps) == 10
        assert full or stopped[t["id"]]["stopped_early"]
        assert t["finalMeasurement"] == t["measurements"][-1]  # LAST (selection unset)
    # parallelism: 2 trials overlapped at some point, never 3
    spans = [(parse_rfc3339(t["startTime"]), parse_rfc3339(t["endTime"])) for t in trials]
    overlap = max(sum(1 for s, e in spans if s <= t0 < e) for t0, _ in spans)
    assert overlap == 2
    # the env each trial got and the directory layout
    job_dir = tmp_path / "ex"
    env = json.loads((job_dir / "2" / "env.json").read_text())["workerpool0-0"]
    assert env["CLOUD_ML_TRIAL_ID"] == "2" and env["CLOUD_ML_JOB_ID"] == "ex"
    assert env["CLOUD_ML_PROJECT_ID"] == "7"
    assert env["AIP_CHECKPOINT_DIR"] == "gs://my-bucket/digits-mlp/2/checkpoints/"  # the spec's base
    assert (job_dir / "gcs" / "my-bucket" / "digits-mlp" / "2" / "checkpoints").is_dir()
    args = json.loads((job_dir / "2" / "args.json").read_text())
    argv = args["replicas"]["workerpool0-0"]
    assert argv[1] == "examples/digits_mlp/train.py"
    assert [a.split("=")[0] for a in argv[2:]] == ["--learning_rate", "--hidden_units", "--alpha", "--batch_size"]
    assert not any(a.endswith(".0") for a in argv[2:])  # integral values print as 64, not 64.0
    for name in ("metrics.jsonl", "hypertune.metrics"):
        assert (job_dir / "2" / name).stat().st_size > 0
    assert (job_dir / "2" / "workerpool0-0.stdout.log").exists()
    assert (job_dir / "2" / "workerpool0-0.stderr.log").exists()
    outputs = job_dir / "gcs" / "my-bucket" / "digits-mlp" / "2"  # AIP_* under the spec's gs:// base
    assert list((outputs / "checkpoints").iterdir())
    assert list((outputs / "model").iterdir()) or stopped.get("2", {}).get("stopped_early")
    print(f"{n_stopped} of 8 trials stopped early")
