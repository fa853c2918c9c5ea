"""`trials resume JOB --max-trial-count N` while the job runs: the running controller takes the trials."""

from __future__ import annotations

import time

import pytest
from faultkit import TRAINER

pytestmark = [pytest.mark.faults]


@pytest.mark.parametrize("parallel", [1, 2], ids=["slots-busy", "queue-drained"])
def test_extending_a_running_job_says_so_and_the_running_controller_runs_them(jobs, gate, parallel: int) -> None:
    # every trial's last step waits for the gate: the job runs until the extension is seen
    job_id = jobs.job_id("extend")
    spec = jobs.spec(n=2, parallel=parallel)
    proc = jobs.start("sweep", spec, "--job-id", job_id, "--grace-period", "0.5", "--gcs-root", str(jobs.gcs_root),
                      "--", "python", TRAINER, "--epochs=3", "--sleep=0.05", f"--gate={gate}")
    deadline = time.monotonic() + 60
    # parallel 1: trial 1 holds the only slot; parallel 2: both trials claimed, the queue is empty
    while not all((jobs.job_dir(job_id) / str(i) / "hypertune.metrics").exists() for i in range(1, parallel + 1)):
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "the trials never reported"
        time.sleep(0.05)
    out = jobs.cli("resume", job_id, "--max-trial-count", "4")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "added 2 trials (now 4); the controller already running the job" in out.stdout, out.stdout
    assert out.stderr == ""
    assert proc.poll() is None  # the trials were held all along: the running controller was the one told
    gate.touch()
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 0, stdout + stderr
    rest = jobs.describe(job_id)
    assert rest["state"] == "JOB_STATE_SUCCEEDED"
    assert [t["state"] for t in rest["trials"]] == ["SUCCEEDED"] * 4
