"""`trials serve --runtime podman` with an image map for several jobs: each job's controller gets the
`--image` entries its pools name (`trials resume` refuses an entry no pool of the job names)."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from containerkit import HYPERTUNE, SPEC_URI, TRAINER

from tests.controller.api.servekit import CUSTOM_JOBS, Serve, cancel_all

pytestmark = pytest.mark.integration
OTHER_URI = "us-docker.pkg.dev/my-project/trainers/other:1"  # mapped for other jobs, named by none here


def test_a_job_runs_under_a_server_wide_image_map_naming_images_it_does_not_use(container_env, tmp_path: Path):
    env = {k: v for k, v in container_env.items() if k != "TRIALS_SERVE_TOKEN"}
    s = Serve(tmp_path / "jobs", "--runtime", "podman", "--image", f"{SPEC_URI}={TRAINER}",
              "--image", f"{OTHER_URI}={HYPERTUNE}", env=env)
    try:
        made = s.ok("POST", CUSTOM_JOBS, {"displayName": "one-image", "jobSpec": {"workerPoolSpecs": [
            {"machineSpec": {"machineType": "n1-standard-4"}, "replicaCount": "1",
             "containerSpec": {"imageUri": SPEC_URI, "args": ["--x=0.5", "--epochs=1"]}}]}})
        job_id = made["name"].rsplit("/", 1)[1]
        job, deadline = made, time.monotonic() + 240
        while job["state"] not in ("JOB_STATE_SUCCEEDED", "JOB_STATE_FAILED") and time.monotonic() < deadline:
            time.sleep(0.3)
            job = s.ok("GET", f"{CUSTOM_JOBS}/{job_id}")
        assert job["state"] == "JOB_STATE_SUCCEEDED", (job, (s.root / job_id / "serve-controller.log").read_text())
    finally:
        cancel_all(s.root)
        s.stop()
    assert os.path.exists(s.root / job_id / "1" / "workerpool0-0.stdout.log")
