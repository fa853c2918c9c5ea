"""The lease timeout is the job's: a worker started with a shorter --stale-after never takes over
the trials of a healthy worker; absurdly short timeouts are refused."""

from __future__ import annotations

import pytest
from pg_helpers import (
    backend_pid,
    blocked_by,
    create_job,
    events,
    finish,
    gate_path,
    kill_all,
    leases,
    output,
    pg_connect,
    start_worker,
    take_claim_lock,
    trials_cli,
    wait_for,
)

from trials.controller.jobs import registry

SHORT_S = 2.0  # what worker b asks for; a's leases are older than this when b looks at them


def _b_claims_once_seeing_old_leases(tmp_path, lock, watch, study_id):
    """Let worker b run one whole claim while every lease of a is older than SHORT_S and a does not
    renew it meanwhile: b waits on the claim lock we hold until a's leases are that old.

    A round is repeated when it proves nothing: a renewed during b's claim, or b's wait for the lock
    ran into its lock timeout (5 s; b then retries later, perhaps after we took the lock again).
    """
    me = backend_pid(lock)

    def ages():
        return [age for _owner, _hb, age in leases(watch, study_id).values()]

    def owners_and_beats():
        return {tid: (owner, hb) for tid, (owner, hb, _age) in leases(watch, study_id).items()}

    for _ in range(10):
        outages_seen = output(tmp_path, "b").count("database unreachable")
        wait_for(lambda: max(ages()) < 1.5, 30, "worker a to renew its leases")  # the next in >= 3.5 s
        take_claim_lock(lock, study_id)  # a runs at the job's cap and claims nothing: only b waits on it
        waiting = wait_for(lambda: blocked_by(watch, me), 30, "worker b to wait on the claim lock")
        wait_for(lambda: min(ages()) > SHORT_S + 0.5, 30, f"worker a's leases to be older than {SHORT_S + 0.5}s")
        before = owners_and_beats()
        still_waiting = blocked_by(watch, me)
        lock.commit()  # b's claim runs now; taking the lock again waits until that claim is done
        take_claim_lock(lock, study_id)
        after = owners_and_beats()
        lock.commit()
        assert len(before) == 2, before
        if set(waiting) - set(still_waiting) or output(tmp_path, "b").count("database unreachable") > outages_seen:
            continue  # b gave up waiting meanwhile: it did not claim right after the release
        if after == before or {o for o, _ in after.values()} != {o for o, _ in before.values()}:
            return  # b looked at a's old leases (a trial it took over fails the test's assertions)
    raise AssertionError("no round where worker b claimed while a's leases were old:\n" + output(tmp_path, "b"))


@pytest.mark.long
def test_a_worker_with_a_short_stale_after_does_not_take_over_a_healthy_workers_trials(tmp_path, pg_url, job_id):
    # Issue 23 item 13: b must join while a's trials provably run, and look at a's leases when they
    # are older than its own --stale-after (before: 8 s trials, and under load b came after the end).
    h = create_job(tmp_path, pg_url, job_id, points=2, parallel=2, epochs=2, sleep=0.1, gated=True)
    study_id = h.store._study_id
    a = start_worker(tmp_path, pg_url, job_id, "--parallel-trial-count", "2", name="a")
    lock, watch = pg_connect(pg_url), pg_connect(pg_url)
    watch.autocommit = True
    b = None
    try:
        wait_for(lambda: len({e["trial"] for e in events(tmp_path) if e["event"] == "epoch"}) == 2, 60,
                 "worker a to run both trials (held at the gate after their first epoch)")
        refused = trials_cli(tmp_path, "worker", job_id, "--storage", pg_url, "--root", str(tmp_path / "jobs"),
                             "--stale-after", "0.1")
        assert refused.returncode == 2, refused.stdout + refused.stderr
        assert refused.stderr.strip().count("\n") == 0 and "--stale-after must be >= 2" in refused.stderr
        b = start_worker(tmp_path, pg_url, job_id, "--parallel-trial-count", "2", "--stale-after", f"{SHORT_S:g}",
                         name="b")
        _b_claims_once_seeing_old_leases(tmp_path, lock, watch, study_id)
        gate_path(tmp_path).touch()  # a's trials go on to their end
        assert finish([a, b], timeout_s=90) == [0, 0], output(tmp_path, "a") + output(tmp_path, "b")
    finally:
        lock.close()
        watch.close()
        kill_all([a, b])
    assert "--stale-after 2 ignored: the job's lease timeout is 30s" in output(tmp_path, "b"), output(tmp_path, "b")
    starts = [e["trial"] for e in events(tmp_path) if e["event"] == "start"]
    assert sorted(starts) == ["1", "2"], starts  # each trial ran once, by worker a, never taken over
    h = registry.open_job(job_id, root=str(tmp_path / "jobs"), storage=pg_url)
    assert h.store.meta().stale_after_s == 30.0
    for t in h.store.frozen_trials():
        assert t.user_attrs["state"] == "SUCCEEDED"
        assert len(t.user_attrs.get("attempts") or []) <= 1, t.user_attrs.get("attempts")
