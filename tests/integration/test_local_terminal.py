"""`python train.py` on a terminal shows each report as it happens; piped, it stays quiet."""

import os
import pty
import subprocess
import sys

import pytest

from trials import protocol

pytestmark = pytest.mark.integration
COUNTER = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "scripts", "counter_trial.py")


def local_env(tmp_path):
    tuning = {*protocol.VERTEX_ENV_VARS, *protocol.PROJECT_ENV_VARS, protocol.ENV_TRIAL_DIR}
    env = {k: v for k, v in os.environ.items() if k not in tuning}
    env.update({protocol.ENV_OUTPUT_ROOT: str(tmp_path / "out"), protocol.ENV_LOG_FORMAT: "text"})
    return env


def run_on_a_terminal(argv, env):
    leader, follower = pty.openpty()
    try:
        proc = subprocess.Popen(argv, stdin=follower, stdout=follower, stderr=follower, env=env)
        os.close(follower)
        chunks = []
        while True:
            try:
                data = os.read(leader, 4096)
            except OSError:  # EIO: the terminal's other end closed
                break
            if not data:
                break
            chunks.append(data)
        return proc.wait(timeout=60), b"".join(chunks).decode("utf-8", "replace").replace("\r\n", "\n")
    finally:
        os.close(leader)


def test_a_local_run_on_a_terminal_prints_each_report(tmp_path):
    code, shown = run_on_a_terminal([sys.executable, COUNTER, "--epochs=3", "--learning_rate=0.25"],
                                    local_env(tmp_path))
    assert code == 0, shown
    lines = [line for line in shown.splitlines() if line.startswith("step ")]
    assert lines == ["step 1: score=0.25  epoch=1", "step 2: score=0.5  epoch=2", "step 3: score=0.75  epoch=3"]


def test_a_piped_local_run_prints_no_reports(tmp_path):
    out = subprocess.run([sys.executable, COUNTER, "--epochs=2"], env=local_env(tmp_path),
                         capture_output=True, text=True)
    assert out.returncode == 0 and "step 1:" not in out.stderr + out.stdout
