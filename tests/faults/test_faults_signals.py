"""SIGTERM, SIGINT or SIGHUP to the controller: the job is CANCELLED cleanly (no process left) and resumes."""

from __future__ import annotations

import signal
import time

import pytest
from faultkit import TRAINER, wait_no_processes

pytestmark = [pytest.mark.faults]


def wait_for(predicate, timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP], ids=["SIGTERM", "SIGINT", "SIGHUP"])
def test_signal_cancels_the_job_cleanly_and_it_resumes(jobs, sig: signal.Signals) -> None:
    job_id = jobs.job_id(sig.name.lower())
    spec = jobs.spec(n=4, parallel=2)
    proc = jobs.start("sweep", spec, "--job-id", job_id, "--grace-period", "2", "--",
                      "python", TRAINER, "--epochs=8", "--sleep=0.05")
    trial_dirs = [jobs.job_dir(job_id) / str(i) for i in (1, 2)]
    wait_for(lambda: all((d / "hypertune.metrics").exists() for d in trial_dirs))
    params_before = {t.number: t.params for t in jobs.optuna_study(job_id).trials if t.params}
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 130, err
    assert "JOB_STATE_CANCELLED" in out
    assert f"resume it with: trials resume {job_id}" in out
    assert "Traceback" not in err
    assert wait_no_processes(job_id) == [], "a replica outlived the cancelled controller"

    rest = jobs.describe(job_id)
    assert rest["state"] == "JOB_STATE_CANCELLED"
    assert rest["error"]["message"] == "The job was cancelled."
    states = [t.state.name for t in jobs.optuna_study(job_id).trials]
    assert "RUNNING" not in states, states  # interrupted trials went back to the queue

    resumed = jobs.cli("resume", job_id, "--grace-period", "2")
    assert resumed.returncode == 0, resumed.stderr
    rest = jobs.describe(job_id)
    assert rest["state"] == "JOB_STATE_SUCCEEDED"
    assert [t["state"] for t in rest["trials"]] == ["SUCCEEDED"] * 4
    study = jobs.optuna_study(job_id)
    for number, params in params_before.items():
        assert study.trials[number].params == params, "a requeued trial kept its parameters"
    assert wait_no_processes(job_id) == []


def test_second_sigint_kills_replicas_that_ignore_sigterm_at_once(jobs) -> None:
    job_id = jobs.job_id("twice")
    proc = jobs.start("sweep", jobs.spec(), "--job-id", job_id, "--grace-period", "60", "--",
                      "python", TRAINER, "--fault=hang")
    wait_for(lambda: (jobs.job_dir(job_id) / "1" / "hypertune.metrics").exists())
    proc.send_signal(signal.SIGINT)
    time.sleep(0.5)
    assert proc.poll() is None, "the replica ignores SIGTERM: the controller waits out its grace"
    start = time.monotonic()
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=20)
    assert time.monotonic() - start < 10
    assert proc.returncode == 130, err
    assert "JOB_STATE_CANCELLED" in out
    assert wait_no_processes(job_id) == []


def test_sighup_after_the_terminal_is_gone_cancels_cleanly(jobs) -> None:
    # Issue 12 item 9: the SSH session closes: the controller's output goes nowhere and it gets
    # SIGHUP. It used to die at once (exit 129), leaving the job RUNNING and its replicas running.
    job_id = jobs.job_id("hup")
    proc = jobs.start("sweep", jobs.spec(n=2, parallel=2), "--job-id", job_id, "--grace-period", "2", "--",
                      "python", TRAINER, "--epochs=200", "--sleep=0.05")
    wait_for(lambda: all((jobs.job_dir(job_id) / str(i) / "hypertune.metrics").exists() for i in (1, 2)))
    proc.stdout.close()  # the terminal is gone: every later write fails
    proc.send_signal(signal.SIGHUP)
    proc.wait(timeout=30)
    assert proc.returncode != -signal.SIGHUP
    assert wait_no_processes(job_id) == [], "a replica outlived the controller"
    assert jobs.describe(job_id)["state"] == "JOB_STATE_CANCELLED"
    assert "RUNNING" not in [t.state.name for t in jobs.optuna_study(job_id).trials]
