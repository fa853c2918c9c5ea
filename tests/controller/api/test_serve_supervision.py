"""`trials serve` supervises the controllers it starts: a controller killed with its job unfinished is
started again, up to CONTROLLER_RESTARTS times; killed once more, the job FAILED with a message saying how
its controllers died and where their output is, its trial no longer ACTIVE and nothing of it left running.
Driven by the real google-cloud-aiplatform SDK, as a notebook would see it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from tests.controller.api.servekit import Serve, cancel_all
from trials.controller.api.controllers import CONTROLLER_RESTARTS
from trials.controller.jobs.lock import lock_holder

aiplatform = pytest.importorskip("google.cloud.aiplatform", reason="google-cloud-aiplatform is not installed")
from google.cloud.aiplatform import jobs as sdk_jobs  # noqa: E402
from google.oauth2.credentials import Credentials  # noqa: E402

WAIT_S = 120.0  # for a controller to start on a loaded 2-core machine


def new_controller(job_dir: Path, seen: set[int]) -> int:
    """The pid of the job's controller once one the test has not killed yet holds the job's lock."""
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        pid = lock_holder(str(job_dir))
        if pid and pid not in seen:
            return pid
        time.sleep(0.05)
    pytest.fail(f"no new controller of {job_dir.name} within {WAIT_S:.0f} s (killed: {sorted(seen)})")


def running_with(marker: str) -> list[int]:
    """Processes whose command line carries ``marker``."""
    found = []
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and marker.encode() in (proc / "cmdline").read_bytes():
                found.append(int(proc.name))
        except OSError:
            continue
    return found


def test_a_killed_controller_is_started_again_then_the_job_fails_saying_how(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    serve = Serve(tmp_path / "jobs", env={k: v for k, v in os.environ.items() if k != "TRIALS_SERVE_TOKEN"})
    try:
        monkeypatch.setattr(sdk_jobs, "_JOB_WAIT_TIME", 0.2)
        aiplatform.init(project="my-project", location="us-central1", api_endpoint=serve.url, api_transport="rest",
                        credentials=Credentials(token=serve.token))
        marker = f"trial-{uuid.uuid4().hex}"
        job = aiplatform.CustomJob(
            display_name="supervised", staging_bucket="gs://stage",
            worker_pool_specs=[{"machine_spec": {"machine_type": "n1-standard-4"}, "replica_count": 1,
                                "container_spec": {"image_uri": "gcr.io/p/t:1",
                                                   "command": ["python", "-c", "import time; time.sleep(600)",
                                                               marker]}}])
        job.run(sync=False)
        job.wait_for_resource_creation()
        job_dir = serve.root / job.resource_name.rsplit("/", 1)[1]
        killed: set[int] = set()
        for _ in range(CONTROLLER_RESTARTS + 1):  # each kill but the last is followed by a new controller
            pid = new_controller(job_dir, killed)
            os.kill(pid, signal.SIGKILL)
            killed.add(pid)
        with pytest.raises(RuntimeError, match="Job failed with"):
            job.wait()
        assert job.state.name == "JOB_STATE_FAILED"
        assert job.error.code == 13, job.error  # INTERNAL: the service's own process died, not the trainer
        said = job.error.message
        assert said.startswith(f"Internal error: the job's controller died with the job unfinished "
                               f"{CONTROLLER_RESTARTS + 1} times (killed by SIGKILL each time), and was started again "
                               f"{CONTROLLER_RESTARTS} times, the limit. Its output: "
                               f"{job_dir / 'serve-controller.log'}"), said
        assert lock_holder(str(job_dir)) is None  # no fifth controller
        out = subprocess.run([sys.executable, "-m", "trials", "describe", job_dir.name, "--root", str(serve.root),
                              "--format", "json"], capture_output=True, text=True, check=True).stdout
        trials = json.loads(out).get("trials", [])
        assert all(t["state"] != "ACTIVE" for t in trials), trials  # what the dead controllers ran, stopped
        assert running_with(marker) == []
    finally:
        cancel_all(serve.root)
        printed = serve.stop()
    for n in range(1, CONTROLLER_RESTARTS + 1):
        assert "killed by SIGKILL with the job JOB_STATE_" in printed
        assert f": started again ({n} of {CONTROLLER_RESTARTS})" in printed, printed
    assert f"job {job_dir.name} FAILED: Internal error: the job's controller died" in printed, printed
