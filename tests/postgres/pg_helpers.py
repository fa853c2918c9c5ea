"""Helpers for the PostgreSQL tests: specs, jobs created in the database, workers, their events."""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from jobkit import shared_folder

TRAINER = str(Path(__file__).resolve().parent / "pg_trainer.py")


def write_spec(path, *, events, points=4, parallel=2, epochs=4, sleep=0.1, accelerators=0, gate=None,
               gate_epoch=1):
    """``gate``: every trial waits after ``gate_epoch`` epochs until that file exists (see ``gate_path``)."""
    values = ", ".join(f"{0.1 * (i + 1):.1f}" for i in range(points))
    machine = "{machineType: n1-standard-4" + (
        f", acceleratorType: NVIDIA_TESLA_T4, acceleratorCount: {accelerators}" if accelerators else "") + "}"
    args = json.dumps([f"--events={events}", f"--epochs={epochs}", f"--sleep={sleep}",
                       *([f"--gate={gate}", f"--gate-epoch={gate_epoch}"] if gate else [])])
    path.write_text("\n".join([
        "studySpec:",
        "  metrics: [{metricId: score, goal: MAXIMIZE}]",
        f"  parameters: [{{parameterId: x, discreteValueSpec: {{values: [{values}]}}}}]",
        "  algorithm: GRID_SEARCH",
        f"maxTrialCount: {points}",
        f"parallelTrialCount: {parallel}",
        "trialJobSpec:",
        "  workerPoolSpecs:",
        f"  - {{machineSpec: {machine}, replicaCount: 1, containerSpec: "
        f"{{imageUri: local, command: [python, {json.dumps(TRAINER)}], args: {args}}}}}",
    ]) + "\n")
    return path


def create_job(tmp_path, url, job_id, stale_after_s=None, gated=False, **spec):
    """Create the job in PostgreSQL without running it (workers join afterwards).

    ``gated``: its trials wait after their first epoch (``gate_epoch``) until ``gate_path`` exists.
    """
    from trials.controller.jobs import registry
    from trials.spec.load import load_spec

    if gated:
        spec["gate"] = gate_path(tmp_path)
    spec_path = write_spec(tmp_path / "job.yaml", events=events_path(tmp_path), **spec)
    h = registry.create_job(load_spec(str(spec_path)), root=str(tmp_path / "jobs"), job_id=job_id,
                              spec_path=str(spec_path), storage=url,
                              base_output_dir=str(tmp_path / "outputs"),  # the trainer checkpoints to AIP_*
                              project_number=None, local_command=None, cwd=str(tmp_path),
                              gcs_root=str(gcs_root(tmp_path)), stale_after_s=stale_after_s)
    return h


def start_worker(tmp_path, url, job_id, *extra, name="w", env=None):
    out = open(tmp_path / f"{name}.out", "w")  # noqa: SIM115 - the worker's stdout for as long as it runs
    return subprocess.Popen(
        [sys.executable, "-m", "trials", "worker", job_id, "--storage", url, "--grace-period", "2",
         "--root", str(tmp_path / "jobs"), *extra],
        cwd=tmp_path, stdout=out, stderr=subprocess.STDOUT, text=True,
        env=None if env is None else {**os.environ, **env},
    )


def trials_cli(tmp_path, *argv, timeout=30):
    return subprocess.run([sys.executable, "-m", "trials", *argv], cwd=tmp_path, capture_output=True,
                          text=True, timeout=timeout)


def gcs_root(tmp_path):
    """The job's buckets (``/gcs``): what its sandboxed trials write there reaches the host, live."""
    return tmp_path / "gcs"


def events_path(tmp_path):
    """In the job's buckets: a sandboxed trial's writes anywhere else stay in its own layer."""
    return shared_folder(gcs_root(tmp_path)) / "events.jsonl"


def gate_path(tmp_path):
    """The file a gated trial waits for (beside the events file: the trial sees it appear)."""
    return events_path(tmp_path).with_name("gate")


def events(tmp_path):
    path = events_path(tmp_path)
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def wait_for(predicate, timeout_s, what):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")


def finish(procs, timeout_s=40):
    """Wait for worker processes; kill leftovers so a failing test leaves nothing behind."""
    deadline = time.monotonic() + timeout_s
    codes = []
    try:
        for p in procs:
            codes.append(p.wait(timeout=max(0.1, deadline - time.monotonic())))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    return codes


def output(tmp_path, name):
    return (tmp_path / f"{name}.out").read_text()


def pg_connect(url):
    """A plain psycopg2 connection to the test server (for locks and pg_stat_activity)."""
    import psycopg2

    return psycopg2.connect(url.replace("postgresql+psycopg2://", "postgresql://"), connect_timeout=10)


def backend_pid(conn):
    with conn.cursor() as cur:
        cur.execute("SELECT pg_backend_pid()")
        return cur.fetchone()[0]


def blocked_by(conn, pid):
    """The backends waiting on a lock that backend ``pid`` holds (``conn``: autocommit)."""
    with conn.cursor() as cur:
        cur.execute("SELECT pid FROM pg_stat_activity WHERE %s = ANY(pg_blocking_pids(pid))", (pid,))
        return [r[0] for r in cur.fetchall()]


def take_claim_lock(conn, study_id):
    """Take the job's claim lock in ``conn``'s transaction (every worker's claim waits until it ends)."""
    from trials.study.database.leases import ADVISORY_LOCK_CLASS

    with conn.cursor() as cur:
        cur.execute("SELECT pg_advisory_xact_lock(%s, %s)", (ADVISORY_LOCK_CLASS, study_id))


def leases(conn, study_id):
    """{trial id: (owner, heartbeat, seconds since it by the database's clock)} of the job's leases."""
    from trials.study.database.leases import LEASE_TABLE

    with conn.cursor() as cur:
        cur.execute(f"SELECT trial_id, owner, heartbeat, EXTRACT(EPOCH FROM CLOCK_TIMESTAMP()) - heartbeat "
                    f"FROM {LEASE_TABLE} WHERE study_id = %s", (study_id,))
        return {r[0]: (r[1], float(r[2]), float(r[3])) for r in cur.fetchall()}


def kill_all(procs):
    """Kill and reap whatever of ``procs`` still runs (a failing test leaves nothing behind)."""
    for p in procs:
        if p is not None and p.poll() is None:
            p.kill()
            p.wait()
