"""Claims under real concurrency on PostgreSQL: each trial once, never over the job-wide cap."""

import json
import subprocess
import sys
import time
from pathlib import Path

from pg_helpers import create_job

CLAIMER = str(Path(__file__).resolve().parent / "claimer.py")


def race(tmp_path, url, job_id, mode, cap, n=4):
    go = tmp_path / "go"
    procs = [subprocess.Popen([sys.executable, CLAIMER, url, job_id, mode, str(cap), str(go), str(n)],
                              cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(n)]
    try:
        deadline = time.monotonic() + 60
        while len(list(tmp_path.glob("go.ready.*"))) < n:  # every process connected and waiting
            assert time.monotonic() < deadline and all(p.poll() is None for p in procs), "claimers did not start"
            time.sleep(0.01)
        go.touch()
        outs = [p.communicate(timeout=60) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    assert all(p.returncode == 0 for p in procs), [err for _out, err in outs]
    return [json.loads(out) for out, _err in outs]


def test_waiting_to_running_claim_is_atomic(tmp_path, pg_url, job_id):
    create_job(tmp_path, pg_url, job_id, points=24, parallel=24)
    got = race(tmp_path, pg_url, job_id, "raw", cap=0)
    ids = [c["id"] for per in got for c in per]
    assert sorted(ids, key=int) == [str(i) for i in range(1, 25)]  # all claimed, none twice
    xs = [c["params"]["x"] for per in got for c in per]
    assert len(set(xs)) == 24  # every grid point once
    assert sum(1 for per in got if per) == 4  # the processes really competed (each waited for the others)


def test_global_cap_holds_when_workers_claim_at_once(tmp_path, pg_url, job_id):
    create_job(tmp_path, pg_url, job_id, points=12, parallel=3)
    got = race(tmp_path, pg_url, job_id, "shared", cap=3)
    assert sum(len(per) for per in got) == 3
    from trials.controller.jobs import registry

    h = registry.open_job(job_id, root="unused", storage=pg_url)
    assert len(h.store.running_trials()) == 3
