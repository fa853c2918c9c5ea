"""Helpers of the container tests (the fixtures are in conftest.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
BASE = os.environ.get("TRIALS_TEST_BASE_IMAGE", "localhost/trials-debpy:1")
HYPERTUNE = "localhost/trials-hypertune:1"
TRAINER = "localhost/trials-test-trainer:1"
SPEC_URI = "us-docker.pkg.dev/my-project/trainers/test-trainer:1"  # what the spec names; --image maps it


def podman_ps(env: dict[str, str], label: str) -> list[str]:
    """Names of the containers (running or not) that have ``label``."""
    from trials.controller.container import runtime as rt

    out = rt.find("podman", env).call("ps", "--all", "--filter", f"label={label}", "--format", "{{.Names}}")
    return out.stdout.decode().split()


def run_trials(*argv: str, cwd: Path, env: dict[str, str], timeout: float = 240) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "trials", *argv], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=timeout)
