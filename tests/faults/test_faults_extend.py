"""`trials resume JOB --max-trial-count N` while the job runs: the running controller takes the trials."""

from __future__ import annotations

import time

import pytest
from faultkit import TRAINER

pytestmark = [pytest.mark.faults]


@pytest.mark.parametrize("parallel", [1, 2], ids=["slots-busy", "queue-drained"])
def test_extending_a_running_job_says_so_and_the_running_controller_runs_them(jobs, parallel: int) -> None:
    job_id = jobs.job_id("extend")
    spec = jobs.spec(n=2, parallel=parallel)
    proc = jobs.start("sweep", spec, "--job-id", job_id, "--grace-period", "0.5", "--",
                      "python", TRAINER, "--epochs=60", "--sleep=0.05")
    deadline = time.monotonic() + 60
    while not (jobs.job_dir(job_id) / "1" / "hypertune.metrics").exists():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "trial 1 never reported"
        time.sleep(0.1)
    time.sleep(1.0)  # parallel 2: both trials claimed, the queue found empty
    out = jobs.cli("resume", job_id, "--max-trial-count", "4")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "added 2 trials (now 4); the controller already running the job" in out.stdout, out.stdout
    assert out.stderr == ""
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 0, stdout + stderr
    rest = jobs.describe(job_id)
    assert rest["state"] == "JOB_STATE_SUCCEEDED"
    assert [t["state"] for t in rest["trials"]] == ["SUCCEEDED"] * 4
