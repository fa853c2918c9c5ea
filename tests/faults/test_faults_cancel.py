"""`trials cancel` on a job whose controller died finishes the job itself."""

from __future__ import annotations

import os
import signal
import time

import pytest
from faultkit import TRAINER, wait_no_processes

pytestmark = [pytest.mark.faults]


def test_cancel_without_a_live_controller_ends_the_job_and_its_replicas(jobs, gate) -> None:
    # the trials run until the test opens the gate: past the SIGKILL and the cancel
    jobs.gcs_endpoint = True  # the dead controller's local Cloud Storage endpoint must not outlive it either
    job_id = jobs.job_id("deadcancel")
    spec = jobs.spec(n=3, parallel=2)
    proc = jobs.start("sweep", spec, "--job-id", job_id, "--grace-period", "0.5", "--gcs-root", str(jobs.gcs_root),
                      "--", "python", TRAINER, "--epochs=5", "--sleep=0.05", f"--gate={gate}")
    deadline = time.monotonic() + 60
    while not all((jobs.job_dir(job_id) / t / "hypertune.metrics").exists() for t in ("1", "2")):
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "the trials never reported"
        time.sleep(0.1)
    os.kill(proc.pid, signal.SIGKILL)  # the controller dies; its replicas go on
    proc.wait()
    out = jobs.cli("cancel", job_id)
    assert out.returncode == 0, out.stderr
    assert "JOB_STATE_CANCELLED" in out.stdout, out.stdout
    rest = jobs.describe(job_id)
    assert rest["state"] == "JOB_STATE_CANCELLED"
    assert "ACTIVE" not in {t["state"] for t in rest["trials"]}, rest["trials"]
    assert wait_no_processes(jobs.tag, timeout_s=10) == []  # the dead controller's replicas too
    gate.touch()
    out = jobs.cli("resume", job_id, timeout=120)  # and it resumes: the interrupted trials run again
    assert out.returncode == 0, out.stdout + out.stderr
    rest = jobs.describe(job_id)
    assert rest["state"] == "JOB_STATE_SUCCEEDED"
    assert [t["state"] for t in rest["trials"]] == ["SUCCEEDED"] * 3
