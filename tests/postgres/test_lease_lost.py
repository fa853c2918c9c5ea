"""A worker paused past its lease (SIGSTOP) while another takes its trial over and finishes it."""

import os
import signal
import socket

import pytest
from pg_helpers import create_job, finish, output, start_worker, wait_for


def open_job(tmp_path, url, job_id):
    from trials.controller.jobs import registry

    return registry.open_job(job_id, root=str(tmp_path / "jobs"), storage=url)


@pytest.mark.long
def test_a_worker_that_lost_its_lease_drops_the_trial_and_goes_on(tmp_path, pg_url, job_id):
    # Issue 12 item 15: the paused worker crashed on resume with UpdateFinishedTrialError: it still
    # wrote intermediate values for the trial the other worker had finished meanwhile.
    create_job(tmp_path, pg_url, job_id, points=2, parallel=2, epochs=12, sleep=0.25)
    a = start_worker(tmp_path, pg_url, job_id, "--parallel-trial-count", "1", "--stale-after", "2", name="a")
    h = open_job(tmp_path, pg_url, job_id)
    victim = f"{socket.gethostname()}:{a.pid}"

    def victim_trial():
        for t in h.store.running_trials():
            if t.user_attrs.get("worker") == victim and t.intermediate_values:
                return t.number
        return None

    try:
        number = wait_for(victim_trial, 30, "worker a to report a step")
        os.kill(a.pid, signal.SIGSTOP)  # a misses its heartbeats; its replica goes on
        b = start_worker(tmp_path, pg_url, job_id, "--parallel-trial-count", "1", "--stale-after", "2", name="b")

        def finished_by_b():
            t = open_job(tmp_path, pg_url, job_id).store.storage.get_trial(h.store.frozen_trials()[number]._trial_id)
            return t.user_attrs.get("state") == "SUCCEEDED" and t.user_attrs.get("worker") != victim

        wait_for(finished_by_b, 60, "worker b to take the trial over and finish it")
    finally:
        os.kill(a.pid, signal.SIGCONT)
    assert finish([a, b], timeout_s=90) == [0, 0], output(tmp_path, "a") + output(tmp_path, "b")
    out_a = output(tmp_path, "a")
    assert "UpdateFinishedTrialError" not in out_a and "internal error" not in out_a, out_a
    assert "another worker took it over" in out_a, out_a
    h = open_job(tmp_path, pg_url, job_id)
    assert h.store.meta().state == "JOB_STATE_SUCCEEDED"
    trials = h.store.frozen_trials()
    assert [t.user_attrs["state"] for t in trials] == ["SUCCEEDED", "SUCCEEDED"]
    steps = [m["step"] for m in trials[number].user_attrs["measurements"]]
    assert steps == list(range(1, 13)), steps
