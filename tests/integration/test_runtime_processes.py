"""Real trial processes: SIGKILL + restart resumes, SIGTERM checkpoints and exits 75, import weight."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from trials import protocol
from trials.records import parse_records
from trials.runtime.checkpoint import CheckpointStore

pytestmark = pytest.mark.integration

SCRIPTS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "scripts")
COUNTER = os.path.join(SCRIPTS, "counter_trial.py")
LR = 0.25


def trial_env(tmp_path, attempt=0):
    env = {k: v for k, v in os.environ.items()
           if k not in protocol.VERTEX_ENV_VARS and k not in protocol.PROJECT_ENV_VARS}
    env.update({
        "CLOUD_ML_TRIAL_ID": "1",
        "CLOUD_ML_HP_METRIC_FILE": str(tmp_path / "trial" / "hypertune.metrics"),
        "AIP_MODEL_DIR": str(tmp_path / "out" / "model"),
        "AIP_CHECKPOINT_DIR": str(tmp_path / "out" / "checkpoints"),
        "AIP_TENSORBOARD_LOG_DIR": str(tmp_path / "out" / "logs"),
        "TRIALS_TRIAL_DIR": str(tmp_path / "trial"),
        "TRIALS_STOP_FILE": str(tmp_path / "trial" / "STOP"),
        "TRIALS_ATTEMPT": str(attempt),
        "TRIALS_LOG_FORMAT": "json",
    })
    return env


def start(tmp_path, *flags, attempt=0):
    return subprocess.Popen([sys.executable, COUNTER, f"--learning_rate={LR}", *flags],
                            env=trial_env(tmp_path, attempt), cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def steps_in_log(tmp_path):
    try:
        text = (tmp_path / "trial" / protocol.METRICS_LOG).read_text()
    except FileNotFoundError:
        return []
    return [m.step for m in parse_records(text)]


def wait_for_step(tmp_path, proc, step, timeout_s=20.0):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if len(steps_in_log(tmp_path)) >= step:
            return
        if proc.poll() is not None:
            raise AssertionError(f"trial exited {proc.returncode} early: {proc.communicate()}")
        time.sleep(0.01)
    proc.kill()
    raise AssertionError(f"no step {step} within {timeout_s}s")


def store(tmp_path):
    return CheckpointStore(str(tmp_path / "out" / "checkpoints"))


def test_sigkill_mid_epoch_then_restart_resumes_without_reporting_a_step_twice(tmp_path):
    epochs = 8
    for attempt, kill_after in enumerate((2, 4, 6)):
        proc = start(tmp_path, f"--epochs={epochs}", "--sleep_s=0.08", attempt=attempt)
        wait_for_step(tmp_path, proc, kill_after)
        time.sleep(0.03)  # well inside the next epoch's sleep
        proc.send_signal(signal.SIGKILL)
        proc.communicate(timeout=10)
        assert proc.returncode == -signal.SIGKILL
        found = store(tmp_path).load_latest()  # every checkpoint left behind is whole
        assert found is not None
        step, state = found
        assert state == {"value": pytest.approx(step * LR), "epochs_done": step}
        steps = steps_in_log(tmp_path)
        assert steps == list(range(1, len(steps) + 1)) and step >= steps[-1] - 1
    proc = start(tmp_path, f"--epochs={epochs}", attempt=3)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    records = parse_records((tmp_path / "trial" / protocol.METRICS_LOG).read_text())
    assert [m.step for m in records] == list(range(1, epochs + 1))  # none twice, none missing
    assert [m.metrics["score"] for m in records] == pytest.approx(
        [LR * s for s in range(1, epochs + 1)])
    assert {m.attempt for m in records} <= {0, 1, 2, 3} and records[-1].attempt == 3
    assert (tmp_path / "out" / "model" / "model.json").read_text() == str(epochs * LR)
    assert store(tmp_path).steps() == [6, 7, 8]
    hypertune_steps = [int(json.loads(line)["global_step"])
                       for line in (tmp_path / "trial" / "hypertune.metrics").read_text().splitlines()]
    assert hypertune_steps and min(hypertune_steps) > 1  # the last start reported only new steps


def test_sigterm_finishes_the_step_checkpoints_and_exits_75(tmp_path):
    proc = start(tmp_path, "--epochs=50", "--sleep_s=0.1")
    wait_for_step(tmp_path, proc, 2)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=10)
    assert proc.returncode == protocol.EXIT_STOPPED, err
    steps = steps_in_log(tmp_path)
    assert 2 <= len(steps) < 50
    assert store(tmp_path).steps()[-1] == steps[-1]  # the finished step is checkpointed
    entries = [json.loads(line) for line in err.splitlines() if line.startswith("{")]
    assert any("stopped on request (SIGTERM)" in e["message"] for e in entries)


def test_a_second_sigterm_exits_at_once_when_the_objective_ignores_the_first(tmp_path):
    proc = start(tmp_path, "--epochs=200", "--sleep_s=0.05", "--ignore_stop")
    wait_for_step(tmp_path, proc, 1)
    proc.send_signal(signal.SIGTERM)
    time.sleep(0.2)
    assert proc.poll() is None  # still running: it ignores should_stop
    proc.send_signal(signal.SIGTERM)
    proc.communicate(timeout=5)
    assert proc.returncode == protocol.EXIT_STOPPED
    assert len(steps_in_log(tmp_path)) < 200
    checkpoints = store(tmp_path)
    for step in checkpoints.steps():  # the hard exit may land mid-write: never a torn checkpoint
        assert checkpoints.load(step)["epochs_done"] == step


def test_the_stop_file_stops_the_trial(tmp_path):
    proc = start(tmp_path, "--epochs=50", "--sleep_s=0.05")
    wait_for_step(tmp_path, proc, 1)
    (tmp_path / "trial" / "STOP").touch()
    proc.communicate(timeout=10)
    assert proc.returncode == protocol.EXIT_STOPPED
    assert len(steps_in_log(tmp_path)) < 50


def test_trials_run_console_script(tmp_path):
    exe = os.path.join(os.path.dirname(sys.executable), "trials-run")
    if not os.path.exists(exe):
        pytest.skip("trials-run is not installed next to this Python")
    proc = subprocess.run([exe, COUNTER, "--epochs=2"], env=trial_env(tmp_path), cwd=tmp_path,
                          capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0, proc.stderr
    assert steps_in_log(tmp_path) == [1, 2]
    bad = subprocess.run([exe, COUNTER, "--epochs=2", "--bogus=1"], env=trial_env(tmp_path),
                         cwd=tmp_path, capture_output=True, text=True, timeout=30)
    assert bad.returncode == protocol.EXIT_USAGE and "known flags: --learning_rate" in bad.stderr


HEAVY = ("optuna", "sqlalchemy", "yaml", "numpy")
IMPORT_PROBE = f"""
import sys, os
import trials, trials.runtime.entrypoint, trials.runtime.context, trials.pytest_plugin
sys.path.insert(0, {SCRIPTS!r})
import noop_trial, counter_trial
from trials.runtime.context import RunOptions
from trials.runtime.entrypoint import run
assert run(noop_trial.objective, argv=[]).exit_code == 0
assert run(counter_trial.objective, counter_trial.Config, argv=["--epochs=2"],
           options=RunOptions(tensorboard=False)).exit_code == 0
print(",".join(m for m in {HEAVY!r} if m in sys.modules))
"""


def test_the_trial_path_never_imports_optuna_sqlalchemy_yaml_or_numpy(tmp_path):
    proc = subprocess.run([sys.executable, "-c", IMPORT_PROBE], env=trial_env(tmp_path),
                          cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "", f"imported on the trial path: {proc.stdout.strip()}"
    assert steps_in_log(tmp_path) == [1, 2]
