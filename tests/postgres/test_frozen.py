"""Frozen, not closed: a worker SIGSTOPped holding the claim's advisory lock, and a silent partition
(a proxy SIGSTOPped mid-job). Both are bounded by timeouts, reported like an outage, and recovered."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from pg_helpers import create_job, events, finish, output, start_worker, wait_for

from trials.study.database import pg_session

HOOKS = Path(__file__).resolve().parent.parent / "scripts" / "hooks"

HOLDER = """\
import os, signal, sys
from trials.controller.jobs import registry
from trials.study.database.leases import SharedJob
url, job_id, ready = sys.argv[1:4]
h = registry.open_job(job_id, root="unused", storage=url)
shared = SharedJob(h.store, stale_after_s=60)
with shared._claim_lock():
    open(ready, "w").close()
    os.kill(os.getpid(), signal.SIGSTOP)  # frozen inside the claim's transaction, holding the lock
"""

PROXY = """\
import socket, sys, threading
listener = socket.create_server(("127.0.0.1", 0))
target = (sys.argv[1], int(sys.argv[2]))
print(listener.getsockname()[1], flush=True)
def pump(src, dst):
    try:
        while data := src.recv(65536):
            dst.sendall(data)
    except OSError:
        pass
    for s in (src, dst):
        try:
            s.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
while True:
    client, _ = listener.accept()
    upstream = socket.create_connection(target)
    for a, b in ((client, upstream), (upstream, client)):
        threading.Thread(target=pump, args=(a, b), daemon=True).start()
"""


@pytest.fixture
def stopped():
    procs: list[subprocess.Popen] = []
    yield procs
    for p in procs:
        if p.poll() is None:
            os.kill(p.pid, signal.SIGCONT)
            p.kill()
            p.wait()


@pytest.mark.long
def test_a_worker_frozen_holding_the_claim_lock_stalls_the_others_only_for_a_bounded_time(
        tmp_path, pg_url, job_id, stopped):
    create_job(tmp_path, pg_url, job_id, points=2, parallel=2, epochs=2, sleep=0.1)
    # The worker starts first and waits before its first claim: however long its start takes on a
    # loaded machine, it claims right after the holder froze, well inside the server's timeout.
    hook_dir = tmp_path / "hooks"
    hook_dir.mkdir()
    pythonpath = os.pathsep.join(filter(None, [str(HOOKS), os.environ.get("PYTHONPATH")]))
    worker = start_worker(tmp_path, pg_url, job_id, name="b", env={
        "PYTHONPATH": pythonpath, "TEST_HOOKS": "pause:LoopState.next_claim:before:1", "TEST_HOOK_DIR": str(hook_dir)})
    stopped.append(worker)
    wait_for(lambda: (hook_dir / "LoopState.next_claim-before-1.reached").exists() or worker.poll() is not None,
             60, "the worker's first claim")
    assert worker.poll() is None, output(tmp_path, "b")
    (tmp_path / "holder.py").write_text(HOLDER)
    ready = tmp_path / "holding"
    holder = subprocess.Popen([sys.executable, str(tmp_path / "holder.py"), pg_url, job_id, str(ready)],
                              cwd=tmp_path)
    stopped.append(holder)
    wait_for(lambda: ready.exists() or holder.poll() is not None, 30, "the holder to take the claim lock")
    assert holder.poll() is None, "the holder ended before it froze"
    started = time.monotonic()
    (hook_dir / "LoopState.next_claim-before-1.go").touch()
    assert finish([worker], timeout_s=120) == [0], output(tmp_path, "b")
    took = time.monotonic() - started
    text = output(tmp_path, "b")
    assert "lock timeout" in text, text  # said, not silent
    assert took >= pg_session.IDLE_IN_TRANSACTION_TIMEOUT_S - 3, took  # it really waited on the lock
    assert sorted(e["trial"] for e in events(tmp_path) if e["event"] == "end") == ["1", "2"]


@pytest.mark.long
def test_a_silent_partition_is_reported_like_an_outage_and_the_job_recovers(tmp_path, pg_url, job_id, stopped):
    parts = urlsplit(pg_url)
    (tmp_path / "proxy.py").write_text(PROXY)
    proxy = subprocess.Popen([sys.executable, str(tmp_path / "proxy.py"), parts.hostname or "127.0.0.1",
                              str(parts.port or 5432)], stdout=subprocess.PIPE, text=True)
    stopped.append(proxy)
    port = int(proxy.stdout.readline())
    url = f"{parts.scheme}://{parts.username or 'postgres'}@127.0.0.1:{port}{parts.path}"
    create_job(tmp_path, url, job_id, points=2, parallel=1, epochs=40, sleep=0.2)
    worker = start_worker(tmp_path, url, job_id, name="w")
    stopped.append(worker)  # killed even if the test fails before finish()
    wait_for(lambda: any(e["event"] == "epoch" and e["epoch"] >= 2 for e in events(tmp_path)), 30,
             "the first trial to report")
    os.kill(proxy.pid, signal.SIGSTOP)  # every connection frozen: no FIN, no RST, no answer
    frozen = 2 * pg_session.ANSWER_TIMEOUT_S + 15  # a stale pooled connection's ping, then a reconnect
    wait_for(lambda: "database unreachable" in output(tmp_path, "w"), frozen, "the partition to be reported")
    os.kill(proxy.pid, signal.SIGCONT)
    assert finish([worker], timeout_s=120) == [0], output(tmp_path, "w")
    text = output(tmp_path, "w")
    assert "database reachable again" in text, text
    from trials.controller.jobs import registry

    h = registry.open_job(job_id, root="unused", storage=pg_url)
    assert h.store.meta().state == "JOB_STATE_SUCCEEDED"
    assert [t.user_attrs["state"] for t in h.store.frozen_trials()] == ["SUCCEEDED", "SUCCEEDED"]
