"""`trials describe --format json` is exactly the v1 HyperparameterTuningJob: it parses strictly
(unknown fields are errors) in every job state; local details are in `--format local-json`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

types = pytest.importorskip("google.cloud.aiplatform_v1.types",
                            reason="google-cloud-aiplatform is not installed")
ROOT = Path(__file__).resolve().parents[2]

TRAINER = """
import sys, time, hypertune
args = dict(a[2:].split("=", 1) for a in sys.argv[1:] if a.startswith("--") and "=" in a)
mode, x = args.get("mode", "ok"), float(args["x"])
ht = hypertune.HyperTune()
if mode == "fail":
    raise ValueError("bad x")
for step in (1, 2):
    value = float("nan") if mode == "nan" and step == 2 else x * step
    ht.report_hyperparameter_tuning_metric(hyperparameter_metric_tag="loss", metric_value=value,
                                           global_step=step)
    if mode == "multi":
        ht.report_hyperparameter_tuning_metric(hyperparameter_metric_tag="acc",
                                               metric_value=1 - x, global_step=step)
    if mode == "hang":
        time.sleep(120)
"""
SPEC = """
metrics: {METRICS}
parameters:
  x: {type: double, min: 0.1, max: 0.9}
max_trial_count: 2
max_failed_trial_count: 2
"""


def _setup(tmp_path: Path, metrics: str = "{loss: minimize}") -> Path:
    (tmp_path / "trainer.py").write_text(TRAINER)
    spec = tmp_path / "spec.yaml"
    spec.write_text(SPEC.replace("{METRICS}", metrics))
    return spec


def _cli(tmp_path: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    command, rest = args[0], args[1:]
    return subprocess.run([sys.executable, "-m", "trials", command, "--root", str(tmp_path / "jobs"),
                           *rest],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
                          check=check)


def _sweep(tmp_path: Path, job_id: str, mode: str, metrics: str = "{loss: minimize}") -> int:
    spec = _setup(tmp_path, metrics)
    run = _cli(tmp_path, "sweep", str(spec), "--job-id", job_id, "--seed", "1", "--",
               "python", "trainer.py", f"--mode={mode}", check=False)
    return run.returncode


def strict(tmp_path: Path, job_id: str):
    """The describe JSON parsed as the v1 type, unknown fields refused."""
    text = _cli(tmp_path, "describe", job_id, "--format", "json").stdout
    message = types.HyperparameterTuningJob.from_json(text, ignore_unknown_fields=False)
    return message, json.loads(text)


def test_succeeded(tmp_path: Path) -> None:
    assert _sweep(tmp_path, "ok", "ok") == 0
    message, body = strict(tmp_path, "ok")
    assert message.state.name == "JOB_STATE_SUCCEEDED" and "trialsLocal" not in body
    assert [t.state.name for t in message.trials] == ["SUCCEEDED", "SUCCEEDED"]
    for t in body["trials"]:
        assert all(m["elapsedDuration"].endswith("s") for m in t["measurements"])
    local = json.loads(_cli(tmp_path, "describe", "ok", "--format", "local-json").stdout)
    assert local["trials"]["1"]["attempts"][0]["exitStatus"] == 0
    assert local["trials"]["1"]["trial_dir"].endswith(os.path.join("ok", "1"))


def test_failed(tmp_path: Path) -> None:
    assert _sweep(tmp_path, "bad", "fail") != 0
    message, _ = strict(tmp_path, "bad")
    assert message.state.name == "JOB_STATE_FAILED"
    assert message.error.message
    assert {t.state.name for t in message.trials} == {"INFEASIBLE"}


def test_nan_measurement_is_written_as_protobuf_nan(tmp_path: Path) -> None:
    _sweep(tmp_path, "nan", "nan")
    message, body = strict(tmp_path, "nan")
    values = [m["value"] for t in body["trials"] for ms in t["measurements"] for m in ms["metrics"]]
    assert "NaN" in values and "nan" not in values
    assert any(v != v for t in message.trials for ms in t.measurements  # noqa: PLR0124
               for v in (m.value for m in ms.metrics))


def test_multi_objective(tmp_path: Path) -> None:
    assert _sweep(tmp_path, "multi", "multi", "{loss: minimize, acc: maximize}") == 0
    message, _ = strict(tmp_path, "multi")
    assert [m.metric_id for m in message.study_spec.metrics] == ["loss", "acc"]
    final = message.trials[0].final_measurement
    assert {m.metric_id for m in final.metrics} == {"loss", "acc"}


def test_running_then_cancelled(tmp_path: Path) -> None:
    spec = _setup(tmp_path)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    sweep = subprocess.Popen(
        [sys.executable, "-m", "trials", "sweep", str(spec), "--job-id", "live", "--root",
         str(tmp_path / "jobs"), "--", "python", "trainer.py", "--mode=hang"],
        cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        body: dict = {}
        while time.monotonic() < deadline:
            run = _cli(tmp_path, "describe", "live", "--format", "json", check=False)
            if run.returncode == 0:
                body = json.loads(run.stdout)
                if any(t.get("measurements") for t in body.get("trials", [])):
                    break
            time.sleep(0.3)
        message, body = strict(tmp_path, "live")
        assert message.state.name == "JOB_STATE_RUNNING"
        (trial,) = [t for t in body["trials"] if t.get("measurements")]
        assert trial["state"] == "ACTIVE"
        assert all(m["elapsedDuration"].endswith("s") for m in trial["measurements"])
        _cli(tmp_path, "cancel", "live")
        sweep.wait(timeout=60)
    finally:
        if sweep.poll() is None:
            sweep.kill()
            sweep.wait()
    message, body = strict(tmp_path, "live")
    assert message.state.name == "JOB_STATE_CANCELLED" and message.error.code == 1
    assert body["trials"] and not [t for t in body["trials"] if t["state"] == "REQUESTED"], body["trials"]
    for t in body["trials"]:  # stopped by the cancel: what it did stays, as a stopped trial ends (SUCCEEDED)
        assert t["state"] == "SUCCEEDED" and {"startTime", "measurements", "finalMeasurement", "endTime"} <= set(t)
        assert t["finalMeasurement"]["stepCount"] == t["measurements"][-1]["stepCount"] == "1"


@pytest.mark.long
def test_a_trial_past_its_timeout_is_stopping_during_its_grace(tmp_path: Path) -> None:
    (tmp_path / "trainer.py").write_text(
        "import signal, time\n"
        "signal.signal(signal.SIGTERM, lambda *a: None)  # takes its whole grace period\n"
        "time.sleep(60)\n")
    spec = tmp_path / "spec.yaml"
    spec.write_text(SPEC.replace("{METRICS}", "{loss: minimize}").replace("max_trial_count: 2", "max_trial_count: 1")
                    .replace("max_failed_trial_count: 2", "max_failed_trial_count: 1")
                    + "command: [python, trainer.py]\ntimeout: 1s\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    sweep = subprocess.Popen(
        [sys.executable, "-m", "trials", "sweep", str(spec), "--job-id", "slow", "--root", str(tmp_path / "jobs"),
         "--grace-period", "8"],
        cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        states = set()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and sweep.poll() is None and "STOPPING" not in states:
            run = _cli(tmp_path, "describe", "slow", "--format", "json", check=False)
            if run.returncode == 0:
                message = types.HyperparameterTuningJob.from_json(run.stdout, ignore_unknown_fields=False)
                states |= {t.state.name for t in message.trials}
            time.sleep(0.3)
        assert "STOPPING" in states
        sweep.wait(timeout=60)
    finally:
        if sweep.poll() is None:
            sweep.kill()
            sweep.wait()
    message, _ = strict(tmp_path, "slow")
    assert message.trials[0].state.name == "INFEASIBLE"
    assert "maximum running time" in message.trials[0].infeasible_reason
