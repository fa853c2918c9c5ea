"""`trials serve --warm-start`: every job's controller runs with it; a runtime other than the host's is refused
before anything listens (issue 51, item 1)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.controller.api.servekit import custom_job
from tests.controller.api.test_serve_job_options import environ
from tests.controller.api.test_serve_requests import NoControllers
from trials.controller.api.controllers import Controllers
from trials.controller.api.options import JobOptions, check_options
from trials.errors import ConfigError


def test_every_jobs_controller_gets_warm_start(tmp_path: Path) -> None:
    options = check_options(JobOptions(warm_start=True))
    api = NoControllers(root=str(tmp_path / "jobs"), options=options)
    made = api.create("projects/p/locations/l", custom_job(["true"]), "customJobs")
    job_id = made["name"].rsplit("/", 1)[1]
    cmd = Controllers(root=api.root, options=options).controller_command(job_id)
    assert cmd[cmd.index("resume"):] == ["resume", job_id, "--root", api.root, "--quiet", "--warm-start"]


def test_warm_start_under_another_runtime_is_refused_with_the_runtimes_name() -> None:
    with pytest.raises(ConfigError, match=r"--warm-start: expected the host runtime, got --runtime slurm"):
        check_options(JobOptions(runtime="slurm", warm_start=True))


def test_serve_warm_start_with_slurm_is_one_line_and_exit_2_before_anything_listens(tmp_path: Path) -> None:
    try:
        done = subprocess.run([sys.executable, "-m", "trials", "serve", "--port", "0", "--root",
                               str(tmp_path / "jobs"), "--warm-start", "--runtime", "slurm"],
                              capture_output=True, text=True, timeout=60, env=environ())
    except subprocess.TimeoutExpired:
        pytest.fail("trials serve --warm-start --runtime slurm started serving")
    assert done.returncode == 2, done
    assert done.stderr.splitlines() == [
        "trials: error: --warm-start: expected the host runtime, got --runtime slurm (a container or a Slurm job's "
        "trials start fresh, as Vertex's do)"], done
    assert not (tmp_path / "jobs").exists()
