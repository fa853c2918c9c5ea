"""The probe's hold, in a real interpreter: a trainer without a pause between its epochs waits after
report k, before writing its metric file again, until the probe's SIGTERM landed and it is released."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from trials import protocol
from trials.controller.check import hold
from trials.controller.check.identity_audit import SITECUSTOMIZE
from trials.controller.check.seen import read_reports

TRAINER = """
import signal, sys, hypertune
mode = sys.argv[1]
stop = []
if mode == "flag":
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
elif mode == "raise":
    class Preempted(Exception):
        pass

    def preempted(*_):
        raise Preempted("SIGTERM")

    signal.signal(signal.SIGTERM, preempted)
ht = hypertune.HyperTune()
try:
    for step in range(1, 11):
        ht.report_hyperparameter_tuning_metric(hyperparameter_metric_tag="accuracy", metric_value=step / 10,
                                               global_step=step)
        if stop:
            print(f"stopped after step {step}")
            sys.exit(0)
except Exception as err:  # the trainer's own exception, raised by its handler while it was held
    print(f"{type(err).__name__} during step {step}")
    sys.exit(3)
print("ran to its end")
"""


def start(tmp_path: Path, mode: str) -> tuple[subprocess.Popen[str], Path, Path]:
    audit = tmp_path / "audit"
    audit.mkdir()
    (audit / "sitecustomize.py").write_text(SITECUSTOMIZE + hold.SITECUSTOMIZE_HOLD)
    metric_file, release = tmp_path / "hypertune.metrics", audit / hold.RELEASE_FILE
    env = {**os.environ, "PYTHONPATH": str(audit), protocol.ENV_METRIC_FILE: str(metric_file),
           hold.HOLD_ENV: hold.hold_env(metric_file=str(metric_file), tag="accuracy", after=5, release=str(release),
                                        max_s=120.0)}
    proc = subprocess.Popen([sys.executable, "-c", TRAINER, mode], env=env, stdout=subprocess.PIPE, text=True)
    return proc, metric_file, release


def held_at(proc: subprocess.Popen[str], metric_file: Path) -> list[int | None]:
    """The steps in the metric file once the trainer holds (it wrote 5 reports, and no more a while later)."""
    deadline = time.monotonic() + 60
    while len(read_reports(str(metric_file))) < 5 and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.5)
    assert proc.poll() is None
    return [r.step for r in read_reports(str(metric_file))]


@pytest.mark.parametrize(("mode", "said", "steps", "code"), [
    ("flag", "stopped after step 6", 6, 0),  # the report in hand is written, then it stops
    ("raise", "Preempted during step 6", 5, 3),  # its handler's exception reaches its own code
    ("default", "", 5, -signal.SIGTERM),
])
def test_a_fast_trainer_waits_after_report_k_until_sigterm_landed(tmp_path: Path, mode: str, said: str, steps: int,
                                                                  code: int) -> None:
    proc, metric_file, release = start(tmp_path, mode)
    assert held_at(proc, metric_file) == [1, 2, 3, 4, 5]
    proc.send_signal(signal.SIGTERM)
    hold.release(str(release))
    out, _ = proc.communicate(timeout=60)
    assert (out.strip(), proc.returncode) == (said, code)
    assert len(read_reports(str(metric_file))) == steps


def test_released_without_a_signal_it_runs_to_its_end(tmp_path: Path) -> None:
    proc, metric_file, release = start(tmp_path, "flag")
    assert held_at(proc, metric_file) == [1, 2, 3, 4, 5]
    hold.release(str(release))
    out, _ = proc.communicate(timeout=60)
    assert out.strip() == "ran to its end" and len(read_reports(str(metric_file))) == 10
