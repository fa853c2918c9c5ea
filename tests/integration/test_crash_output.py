"""A crash as Vertex words it (resource) and as a person reads it (sweep output, describe): once."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TRAINER = """
import json, sys, traceback
def main():
    raise ValueError("learning rate too high: diverged")
try:
    main()
except Exception:
    # a structured (Cloud Logging) log line: the traceback inside the JSON message
    print(json.dumps({"severity": "ERROR", "message": "training failed\\n" + traceback.format_exc()}),
          file=sys.stderr)
    sys.exit(1)
"""
SPEC = """
metrics: {loss: minimize}
parameters: {x: {type: double, min: 0.1, max: 0.9}}
max_trial_count: 2
"""


def test_one_readable_failure_per_trial_and_the_flag_that_allows_more(tmp_path: Path) -> None:
    (tmp_path / "trainer.py").write_text(TRAINER)
    (tmp_path / "spec.yaml").write_text(SPEC)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    root = str(tmp_path / "jobs")
    run = subprocess.run([sys.executable, "-m", "trials", "sweep", "spec.yaml", "--root", root, "--job-id",
                          "boom", "--", "python", "trainer.py"], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 1
    out = run.stdout + run.stderr
    assert out.count("ValueError: learning rate too high: diverged") == 1, out  # once, readable
    assert '{"severity"' not in out and "\\n" not in out  # no raw JSON blob
    assert 'in main' in out  # the traceback's last lines
    assert "--max-failed-trial-count N" in out  # how to let the job go on
    body = json.loads(subprocess.run(
        [sys.executable, "-m", "trials", "describe", "boom", "--root", root, "--format", "json"],
        cwd=tmp_path, env=env, capture_output=True, text=True, check=True).stdout)
    (trial,) = body["trials"]
    assert trial["infeasibleReason"] == (
        "The replica workerpool0-0 exited with a non-zero status of 1. Termination reason: Error.")
    assert body["error"]["code"] == 3
    table = subprocess.run([sys.executable, "-m", "trials", "describe", "boom", "--root", root],
                           cwd=tmp_path, env=env, capture_output=True, text=True, check=True).stdout
    assert "exit 1: ValueError: learning rate too high: diverged" in table
    assert table.count("ValueError") == 1
