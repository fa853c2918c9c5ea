"""A claim cut by a lost connection: the worker finishes the claim it made (or gives it back) instead
of leaving the trial RUNNING under its own lease for good, and the job ends with every trial run once."""

from __future__ import annotations

import subprocess

from pg_helpers import (
    backend_pid,
    create_job,
    events,
    finish,
    kill_all,
    output,
    pg_connect,
    start_worker,
    wait_for,
)

from trials import protocol
from trials.controller.jobs import registry
from trials.study.database.leases import ADVISORY_LOCK_CLASS, LEASE_TABLE, SharedJob


def _ends(worker, tmp_path):
    """The worker's exit status; a worker that never ends (the job hangs) fails with its output."""
    try:
        return finish([worker], timeout_s=120)[0]
    except subprocess.TimeoutExpired:
        raise AssertionError("the worker never ended (the job hangs):\n" + output(tmp_path, "w")) from None


def _assert_every_trial_ran_once(tmp_path, url, job_id, n):
    starts = sorted(e["trial"] for e in events(tmp_path) if e["event"] == "start")
    assert starts == [str(i + 1) for i in range(n)], starts
    h = registry.open_job(job_id, root=str(tmp_path / "jobs"), storage=url)
    assert h.store.meta().state == "JOB_STATE_SUCCEEDED"
    assert [t.user_attrs.get("state") for t in h.store.frozen_trials()] == ["SUCCEEDED"] * n
    assert SharedJob(h.store).leases([t._trial_id for t in h.store.frozen_trials()]) == {}  # none left


def test_a_claim_whose_lock_holding_backend_is_terminated_is_finished_not_orphaned(tmp_path, pg_url, job_id):
    h = create_job(tmp_path, pg_url, job_id, points=3, parallel=1, epochs=2, sleep=0.05)
    SharedJob(h.store)  # the lease table exists before the blocker writes into it
    first = min(h.store.frozen_trials(), key=lambda t: t.number)._trial_id
    study_id = h.store._study_id
    blocker, watch = pg_connect(pg_url), pg_connect(pg_url)
    watch.autocommit = True
    try:
        blocker_pid = backend_pid(blocker)
        with blocker.cursor() as cur:  # an uncommitted lease row of trial 1: the worker's lease write waits on it
            cur.execute(f"INSERT INTO {LEASE_TABLE} (trial_id, study_id, owner, heartbeat, generation) "
                        f"VALUES (%s, %s, 'test-blocker', 0, 1)", (first, study_id))
        worker = start_worker(tmp_path, pg_url, job_id, name="w")
        try:
            def terminate_the_claim():
                # the backend holding the job's claim lock, at a moment the lease write waits on our row
                with watch.cursor() as cur:
                    cur.execute("SELECT pg_terminate_backend(pid) FROM pg_locks WHERE locktype = 'advisory' "
                                "AND classid = %s AND objid = %s AND granted AND EXISTS (SELECT 1 FROM "
                                "pg_stat_activity WHERE %s = ANY(pg_blocking_pids(pid)))",
                                (ADVISORY_LOCK_CLASS, study_id, blocker_pid))
                    return [r[0] for r in cur.fetchall()]

            assert wait_for(terminate_the_claim, 60, "the worker's lease write to wait on the row") == [True]
            blocker.rollback()  # the table is free again; what the worker wrote on it is up to the worker
            assert _ends(worker, tmp_path) == 0, output(tmp_path, "w")
        finally:
            kill_all([worker])
    finally:
        blocker.close()
        watch.close()
    text = output(tmp_path, "w")
    assert "database unreachable" in text and "database reachable again" in text, text
    _assert_every_trial_ran_once(tmp_path, pg_url, job_id, 3)


def test_a_claim_that_committed_but_whose_answer_was_lost_is_run_not_claimed_again(tmp_path, pg_url, job_id):
    create_job(tmp_path, pg_url, job_id, points=3, parallel=1, epochs=2, sleep=0.05)
    fired = tmp_path / "claim-answer-lost"
    worker = start_worker(tmp_path, pg_url, job_id, name="w",
                          env={protocol.ENV_TEST_LOSE_CLAIM_ANSWER: str(fired)})
    assert _ends(worker, tmp_path) == 0, output(tmp_path, "w")
    assert fired.exists()  # the first claim committed and the worker was told the connection dropped
    text = output(tmp_path, "w")
    assert "database unreachable" in text and "database reachable again" in text, text
    _assert_every_trial_ran_once(tmp_path, pg_url, job_id, 3)
