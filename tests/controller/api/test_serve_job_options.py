"""`trials serve` takes the job options `trials sweep` takes (runtime, image map, GPUs or
--ignore-accelerators, memory limit, jobs at once) and gives them to every job it runs; a bad one is one
line before anything listens. The GPU flows through the real SDK: test_serve_sdk_devices.py."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.controller.api.servekit import CUSTOM_JOBS, Serve, cancel_all, custom_job
from tests.controller.api.test_serve_requests import NoControllers
from trials.controller.api.controllers import Controllers
from trials.controller.api.options import JobOptions

JOB_OPTIONS = ("--runtime", "--image", "--gpus", "--ignore-accelerators", "--memory-limit", "--max-running-jobs")


def environ() -> dict[str, str]:
    """This machine's environment without a token or a GPU allocation (the server finds its GPUs itself)."""
    return {k: v for k, v in os.environ.items() if k not in ("TRIALS_SERVE_TOKEN", "CUDA_VISIBLE_DEVICES")}


def test_serve_help_groups_the_options_of_every_job_it_runs() -> None:
    out = subprocess.run([sys.executable, "-m", "trials", "serve", "--help"], capture_output=True, text=True,
                         check=True, env={**os.environ, "COLUMNS": "200"}).stdout
    groups = dict(re.findall(r"(?ms)^(\S[^\n]*):\n(.*?)(?=^\S|\Z)", out))
    assert set(groups) >= {"where jobs live", "the server", "every job it runs"}, out
    flags = {name: set(re.findall(r"^  (--[a-z-]+)", body, re.M)) for name, body in groups.items()}
    assert flags["every job it runs"] >= set(JOB_OPTIONS), out
    assert flags["the server"] >= {"--port", "--host", "--token", "--no-auth"}
    assert flags["where jobs live"] == {"--root", "--storage"}


@pytest.mark.parametrize(("args", "names"), [
    (["--gpus", "0,0"], "--gpus"),
    (["--gpus", "0", "--ignore-accelerators"], "--ignore-accelerators"),
    (["--image", "gcr.io/p/t:1=localhost/t:1"], "--image"),  # the host runtime runs no image
    (["--runtime", "nope"], "--runtime"),
    (["--runtime", "slurm", "--gpus", "0"], "--gpus"),
])
def test_a_bad_job_option_is_one_line_and_exit_2_before_anything_listens(tmp_path: Path, args: list[str],
                                                                         names: str) -> None:
    try:
        done = subprocess.run([sys.executable, "-m", "trials", "serve", "--port", "0", "--root",
                               str(tmp_path / "jobs"), *args], capture_output=True, text=True, timeout=60,
                              env=environ())
    except subprocess.TimeoutExpired:
        pytest.fail(f"trials serve {' '.join(args)} started serving")
    assert done.returncode == 2, done
    assert len(done.stderr.splitlines()) == 1 and names in done.stderr and "Traceback" not in done.stderr, done
    assert done.stdout == "" and not (tmp_path / "jobs").exists()  # nothing written, nothing served


def test_a_job_gets_only_the_image_entries_its_pools_name(tmp_path: Path) -> None:
    # `trials resume --image U=L` refuses a U the job does not name: a server-wide map must be cut per job
    options = JobOptions(runtime="podman", images=("gcr.io/p/a:1=localhost/a:1", "gcr.io/p/b:1=localhost/b:1"),
                         ignore_accelerators=True, memory_limit_mb=256)
    api = NoControllers(root=str(tmp_path / "jobs"), options=options)
    made = api.create("projects/p/locations/l", {**custom_job(["true"]), "jobSpec": {"workerPoolSpecs": [
        {"machineSpec": {"machineType": "n1-standard-4"}, "replicaCount": "1",
         "containerSpec": {"imageUri": "gcr.io/p/b:1"}}]}}, "customJobs")
    job_id = made["name"].rsplit("/", 1)[1]
    cmd = Controllers(root=api.root, options=options).controller_command(job_id)
    assert cmd[cmd.index("resume"):] == ["resume", job_id, "--root", api.root, "--quiet", "--runtime", "podman",
                                         "--image", "gcr.io/p/b:1=localhost/b:1", "--ignore-accelerators",
                                         "--memory-limit", "256"]


def test_a_replica_over_the_servers_memory_limit_fails_out_of_memory(tmp_path: Path) -> None:
    s = Serve(tmp_path / "jobs", "--memory-limit", "64", env=environ())
    try:
        grow = "import time; b = bytearray(400 << 20); time.sleep(60)"
        made = s.ok("POST", CUSTOM_JOBS, custom_job([sys.executable, "-c", grow], name="big"))
        job_id = made["name"].rsplit("/", 1)[1]
        job = made
        for _ in range(600):
            job = s.ok("GET", f"{CUSTOM_JOBS}/{job_id}")
            if job["state"] in ("JOB_STATE_SUCCEEDED", "JOB_STATE_FAILED"):
                break
            time.sleep(0.2)
        assert job["state"] == "JOB_STATE_FAILED", job
        assert "ran out of memory" in job["error"]["message"], job
    finally:
        cancel_all(s.root)
        s.stop()
