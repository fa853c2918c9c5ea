"""The lease timeout is the job's: a worker started with a shorter --stale-after never takes over
the trials of a healthy worker; absurdly short timeouts are refused."""

from __future__ import annotations

from pg_helpers import create_job, events, finish, output, start_worker, trials_cli, wait_for

from trials.controller import jobs as controller


def test_a_worker_with_a_short_stale_after_does_not_take_over_a_healthy_workers_trials(tmp_path, pg_url, job_id):
    create_job(tmp_path, pg_url, job_id, points=2, parallel=2, epochs=16, sleep=0.5)  # 8 s per trial
    a = start_worker(tmp_path, pg_url, job_id, "--parallel-trial-count", "2", name="a")
    wait_for(lambda: len({e["trial"] for e in events(tmp_path) if e["event"] == "start"}) == 2, 30,
             "worker a to start both trials")
    refused = trials_cli(tmp_path, "worker", job_id, "--storage", pg_url, "--root", str(tmp_path / "jobs"),
                         "--stale-after", "0.1")
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert refused.stderr.strip().count("\n") == 0 and "--stale-after must be >= 2" in refused.stderr
    b = start_worker(tmp_path, pg_url, job_id, "--parallel-trial-count", "2", "--stale-after", "2", name="b")
    assert finish([a, b], timeout_s=90) == [0, 0], output(tmp_path, "a") + output(tmp_path, "b")
    assert "--stale-after 2 ignored: the job's lease timeout is 30s" in output(tmp_path, "b"), output(tmp_path, "b")
    starts = [e["trial"] for e in events(tmp_path) if e["event"] == "start"]
    assert sorted(starts) == ["1", "2"], starts  # each trial ran once, by worker a, never taken over
    h = controller.open_job(job_id, root=str(tmp_path / "jobs"), storage=pg_url)
    assert h.store.get_meta("stale_after_s") == 30.0
    for t in h.store.frozen_trials():
        assert t.user_attrs["state"] == "SUCCEEDED"
        assert len(t.user_attrs.get("attempts") or []) <= 1, t.user_attrs.get("attempts")
