"""Several `trials worker` processes on one job in a real PostgreSQL server."""

import os
import signal
import socket

from pg_helpers import create_job, events, finish, gate_path, output, start_worker, trials_cli, wait_for


def open_job(tmp_path, url, job_id):
    from trials.controller.jobs import registry

    return registry.open_job(job_id, root=str(tmp_path / "jobs"), storage=url)


def max_overlap(evs):
    """The most trial processes alive at once, from their start and end events."""
    points = []
    for e in evs:
        if e["event"] in ("start", "end"):
            points.append((e["t"], 1 if e["event"] == "start" else -1))
    alive = peak = 0
    for _t, d in sorted(points, key=lambda p: (p[0], p[1])):  # an end at the same instant first
        alive += d
        peak = max(peak, alive)
    return peak


def test_three_workers_exact_count_global_cap_no_duplicate(tmp_path, pg_url, job_id):
    create_job(tmp_path, pg_url, job_id, points=9, parallel=3, epochs=3, sleep=0.15, gated=True)
    workers = [start_worker(tmp_path, pg_url, job_id, "--parallel-trial-count", "2", name=f"w{i}")
               for i in range(3)]
    # The first trials wait after one epoch until three run at once: a worker runs two at most, so the
    # work is shared whatever order the workers start in (before: under load one could run them all)
    wait_for(lambda: len({e["trial"] for e in events(tmp_path) if e["event"] == "epoch"}) >= 3, 60,
             "three trials to run at once")
    gate_path(tmp_path).touch()
    codes = finish(workers)
    assert codes == [0, 0, 0], [output(tmp_path, f"w{i}") for i in range(3)]
    h = open_job(tmp_path, pg_url, job_id)
    assert h.store.meta().state == "JOB_STATE_SUCCEEDED"
    trials = h.store.frozen_trials()
    assert len(trials) == 9
    assert all(t.user_attrs["state"] == "SUCCEEDED" for t in trials)
    xs = sorted(round(t.params["x"], 6) for t in trials)
    assert xs == [round(0.1 * (i + 1), 6) for i in range(9)]  # every grid point exactly once
    evs = events(tmp_path)
    assert sorted(e["trial"] for e in evs if e["event"] == "end") == sorted(str(i) for i in range(1, 10))
    assert max_overlap(evs) <= 3  # the job's parallelTrialCount held across the three workers
    assert len({t.user_attrs["worker"] for t in trials}) >= 2  # the work really was shared


def test_sigkilled_worker_trial_is_taken_over_and_resumes_from_checkpoint(tmp_path, pg_url, job_id):
    # trials wait after epoch 2 until the gate opens: a's trial is still running when a is killed
    create_job(tmp_path, pg_url, job_id, points=3, parallel=2, epochs=4, sleep=0.1, stale_after_s=2, gated=True,
               gate_epoch=2)
    a = start_worker(tmp_path, pg_url, job_id, "--parallel-trial-count", "1", "--stale-after", "2", name="a")
    h = open_job(tmp_path, pg_url, job_id)
    victim = f"{socket.gethostname()}:{a.pid}"

    def victim_trial():
        for t in h.store.running_trials():
            if t.user_attrs.get("worker") == victim:
                trial = str(t.number + 1)
                if any(e["trial"] == trial and e["event"] == "epoch" and e["epoch"] >= 2 for e in events(tmp_path)):
                    return trial
        return None

    killed = wait_for(victim_trial, 20, "worker a to checkpoint two epochs")
    b = start_worker(tmp_path, pg_url, job_id, "--parallel-trial-count", "1", "--stale-after", "2", name="b")
    os.kill(a.pid, signal.SIGKILL)
    a.wait()
    gate_path(tmp_path).touch()
    assert finish([b]) == [0], output(tmp_path, "b")
    h = open_job(tmp_path, pg_url, job_id)
    assert h.store.meta().state == "JOB_STATE_SUCCEEDED"
    trials = {str(t.number + 1): t for t in h.store.frozen_trials()}
    assert len(trials) == 3 and all(t.user_attrs["state"] == "SUCCEEDED" for t in trials.values())
    assert len({t.params["x"] for t in trials.values()}) == 3  # no grid point twice
    attempts = trials[killed].user_attrs["attempts"]
    takeover = [x for x in attempts if x.get("worker") == victim]
    assert takeover and "stopped heartbeating" in takeover[0]["reason"], attempts
    starts = [e for e in events(tmp_path) if e["trial"] == killed and e["event"] == "start"]
    assert len(starts) == 2 and starts[0]["from_epoch"] == 0 and starts[1]["from_epoch"] == 2, starts
    described = trials_cli(tmp_path, "describe", job_id, "--storage", pg_url, "--format", "local-json")
    assert victim in described.stdout  # the attempts, naming the dead worker, are in describe


def test_cancel_from_another_process_stops_every_worker(tmp_path, pg_url, job_id):
    # the trials wait after their first epoch for a gate that never opens: only the cancel ends them
    create_job(tmp_path, pg_url, job_id, points=6, parallel=4, epochs=3, sleep=0.1, gated=True)
    workers = [start_worker(tmp_path, pg_url, job_id, "--parallel-trial-count", "2", name=f"w{i}")
               for i in range(2)]
    h = open_job(tmp_path, pg_url, job_id)
    wait_for(lambda: len({t.user_attrs.get("worker") for t in h.store.running_trials()}) == 2
             and len([e for e in events(tmp_path) if e["event"] == "start"]) >= 4, 20, "both workers running trials")
    cancelled = trials_cli(tmp_path, "cancel", job_id, "--storage", pg_url)
    assert cancelled.returncode == 0 and "CANCELLING" in cancelled.stdout, cancelled
    codes = finish(workers, timeout_s=60)
    assert codes == [130, 130], [output(tmp_path, f"w{i}") for i in range(2)]
    h = open_job(tmp_path, pg_url, job_id)
    assert h.store.meta().state == "JOB_STATE_CANCELLED"
    assert not h.store.running_trials()
    assert not [e for e in events(tmp_path) if e["event"] == "end"]  # stopped, not run to the end
    listed = trials_cli(tmp_path, "list", "--storage", pg_url)
    assert job_id in listed.stdout and "JOB_STATE_CANCELLED" in listed.stdout


def test_sigterm_makes_a_worker_leave_without_cancelling_the_job(tmp_path, pg_url, job_id):
    # the trials wait after their first epoch until a has left: both are interrupted, none ends
    create_job(tmp_path, pg_url, job_id, points=3, parallel=2, epochs=3, sleep=0.1, gated=True)
    a = start_worker(tmp_path, pg_url, job_id, name="a")
    wait_for(lambda: len({e["trial"] for e in events(tmp_path) if e["event"] == "epoch"}) == 2, 20,
             "worker a to run two trials")
    a.send_signal(signal.SIGTERM)
    assert finish([a]) == [130], output(tmp_path, "a")
    assert "left job" in output(tmp_path, "a")
    h = open_job(tmp_path, pg_url, job_id)
    assert h.store.meta().state == "JOB_STATE_RUNNING"  # the job goes on without it
    assert not h.store.running_trials()
    gate_path(tmp_path).touch()
    b = start_worker(tmp_path, pg_url, job_id, name="b")
    assert finish([b]) == [0], output(tmp_path, "b")
    h = open_job(tmp_path, pg_url, job_id)
    assert h.store.meta().state == "JOB_STATE_SUCCEEDED"
    assert sorted(t.user_attrs["state"] for t in h.store.frozen_trials()) == ["SUCCEEDED"] * 3
    restarts = [e for e in events(tmp_path) if e["event"] == "start" and e["from_epoch"] > 0]
    assert len(restarts) == 2  # the two interrupted trials went on from their checkpoints
