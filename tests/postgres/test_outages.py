"""Database blinks and secrets: a worker waits out an outage, and never prints a password."""

import contextlib
import os
import signal
import socket
import threading
import time
from urllib.parse import urlsplit

import pytest
from pg_helpers import create_job, events, finish, output, start_worker, trials_cli, wait_for

from trials.storage_url import redact

SECRET = "pw-s3cret-42"


class CuttableProxy:
    """A TCP proxy on 127.0.0.1 to the test server that can drop every connection for a while."""

    def __init__(self, target_host, target_port):
        self.target = (target_host, target_port)
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.down = threading.Event()
        self.conns = []
        self.lock = threading.Lock()
        self.closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while not self.closed:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            if self.down.is_set():
                client.close()  # the server "is gone": the driver sees the connection closed
                continue
            upstream = socket.create_connection(self.target)
            with self.lock:
                self.conns += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    @staticmethod
    def _pump(src, dst):
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)

    def go_down(self):
        """Refuse every connection from now on, and drop the open ones (until ``self.down.clear()``)."""
        self.down.set()
        with self.lock:
            conns, self.conns = self.conns, []
        for s in conns:
            try:
                s.shutdown(socket.SHUT_RDWR)
                s.close()
            except OSError:
                pass

    def cut(self, seconds=0.0, *, until=None):
        """Drop every connection; refuse new ones for ``seconds``, or until ``until()`` is true."""
        self.go_down()
        if until is not None:
            wait_for(until, 60, "the outage to be seen")
        time.sleep(seconds)
        self.down.clear()

    def close(self):
        self.closed = True
        self.listener.close()
        self.cut(0)


@pytest.fixture
def proxied_url(pg_url):
    parts = urlsplit(pg_url)
    proxy = CuttableProxy(parts.hostname or "127.0.0.1", parts.port or 5432)
    user = parts.username or "postgres"
    yield proxy, f"{parts.scheme}://{user}:{SECRET}@127.0.0.1:{proxy.port}{parts.path}"
    proxy.close()


def test_worker_waits_out_a_database_outage_and_fails_nothing(tmp_path, proxied_url, job_id):
    proxy, url = proxied_url  # trust auth ignores the password: it is only there to be hidden
    create_job(tmp_path, url, job_id, points=2, parallel=1, epochs=10, sleep=0.2)
    worker = start_worker(tmp_path, url, job_id, name="w")
    wait_for(lambda: any(e["event"] == "epoch" and e["epoch"] >= 2 for e in events(tmp_path)), 20,
             "the first trial to report")
    # down until the worker has seen it (before: 3 s, and a worker busy for 3 s under load reconnected
    # afterwards without noticing)
    proxy.cut(until=lambda: "database unreachable" in output(tmp_path, "w"))
    assert finish([worker], timeout_s=40) == [0], output(tmp_path, "w")
    text = output(tmp_path, "w")
    assert text.count("database unreachable") == 1, text  # one line per outage
    assert text.count("database reachable again") == 1, text
    assert SECRET not in text
    from trials.controller.jobs import registry

    h = registry.open_job(job_id, root="unused", storage=url)
    trials = h.store.frozen_trials()
    assert h.store.meta().state == "JOB_STATE_SUCCEEDED"
    assert [t.user_attrs["state"] for t in trials] == ["SUCCEEDED", "SUCCEEDED"]
    attempts = [a for t in trials for a in t.user_attrs["attempts"]]
    assert [a.get("exitStatus") for a in attempts] == [0, 0], attempts  # one clean run each, no re-run


def test_no_message_path_prints_the_password(tmp_path, pg_url):
    parts = urlsplit(pg_url)
    good = f"{parts.scheme}://{parts.username or 'postgres'}:{SECRET}@{parts.hostname}:{parts.port or 5432}{parts.path}"
    with socket.socket() as s:  # a port where nothing listens
        s.bind(("127.0.0.1", 0))
        dead_port = s.getsockname()[1]
    dead = f"{parts.scheme}://{parts.username or 'postgres'}:{SECRET}@127.0.0.1:{dead_port}{parts.path}"
    runs = [
        trials_cli(tmp_path, "describe", "no-such-job", "--storage", good),
        trials_cli(tmp_path, "list", "--storage", dead),
        trials_cli(tmp_path, "--debug", "list", "--storage", dead),
        trials_cli(tmp_path, "worker", "no-such-job", "--storage", dead),
        trials_cli(tmp_path, "cancel", "no-such-job", "--storage",
                   "postgresql://u:" + SECRET + "@/x?host=/nonexistent"),
    ]
    for run in runs:
        assert run.returncode != 0, run
        assert run.stderr.strip(), run
        assert SECRET not in run.stdout + run.stderr, run
    assert "***" in runs[1].stderr and "Traceback" in runs[2].stderr


def _trial_processes(marker: str) -> list[int]:
    """Live processes whose environment mentions ``marker`` (the job's folder): its replicas."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                if f.read().rsplit(b")", 1)[1].split()[0] in (b"Z", b"X"):
                    continue
            with open(f"/proc/{entry}/environ", "rb") as f:
                if marker.encode() in f.read():
                    found.append(int(entry))
        except (OSError, IndexError):
            continue
    return found


def _gone_for_good(tmp_path, proxied_url, job_id, env=None, pg_url=None):
    """A worker running a long trial, then its database refuses every connection for good.

    With ``pg_url`` (the database reached directly, not through the proxy), the outage starts only once
    the worker has recorded one of the trial's reports: the trainer's own event comes before the
    controller reads its metric file and records it.
    """
    proxy, url = proxied_url
    create_job(tmp_path, url, job_id, points=2, parallel=1, epochs=400, sleep=0.2)
    worker = start_worker(tmp_path, url, job_id, name="w", env=env)
    wait_for(lambda: any(e["event"] == "epoch" and e["epoch"] >= 2 for e in events(tmp_path)), 30,
             "the first trial to report")
    if pg_url is not None:  # one connection, polled (a new one per poll would use up the server's)
        from trials.controller.jobs import registry

        store = registry.open_job(job_id, root="unused", storage=pg_url).store

        def recorded():
            time.sleep(0.2)
            return any(t.intermediate_values for t in store.frozen_trials())

        wait_for(recorded, 30, "the worker to record the first trial's report")
        store.storage.engine.dispose()
    proxy.down.set()
    proxy.close()  # the listener is gone: every connection is refused from now on
    for _ in range(3):  # and none accepted just before it closed lives on
        time.sleep(0.3)
        proxy.cut(0)
        proxy.down.set()
    return worker


def _stored(pg_url, job_id):
    from trials.controller.jobs import registry

    h = registry.open_job(job_id, root="unused", storage=pg_url)
    return h.store.meta().state, h.store.frozen_trials()


def test_a_stop_signal_ends_a_workers_retry_through_a_database_gone_for_good(tmp_path, proxied_url, pg_url,
                                                                             job_id):
    worker = _gone_for_good(tmp_path, proxied_url, job_id, pg_url=pg_url)
    try:
        wait_for(lambda: "database unreachable" in output(tmp_path, "w"), 30, "the worker to see the outage")
        time.sleep(1.0)  # well inside the retry
        worker.send_signal(signal.SIGTERM)
        start = time.monotonic()
        code = worker.wait(timeout=20)  # before: retried for ever, SIGTERM only noted
        took = time.monotonic() - start
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()
    text = output(tmp_path, "w")
    assert code == 130, text
    assert took < 15, f"the worker took {took:.1f}s to stop\n{text}"
    said = [line for line in text.splitlines() if "stopped by SIGTERM while the database was unreachable" in line]
    assert len(said) == 1 and said[0].startswith("trials: error: "), text
    assert "Traceback" not in text and SECRET not in text, text
    assert wait_no_trial_processes(str(tmp_path / "jobs")) == [], "the worker left its replicas running"
    state, trials = _stored(pg_url, job_id)  # nothing recorded is lost: the trial waits for a worker
    assert state == "JOB_STATE_RUNNING"
    assert trials[0].state.name == "RUNNING" and trials[0].intermediate_values, trials[0]


def test_a_worker_gives_up_after_the_outage_limit_with_one_line_naming_the_storage(tmp_path, proxied_url, pg_url,
                                                                                   job_id):
    _, url = proxied_url
    worker = _gone_for_good(tmp_path, proxied_url, job_id, env={"TRIALS_OUTAGE_TIMEOUT": "3"}, pg_url=pg_url)
    try:
        code = worker.wait(timeout=60)  # before: retried for ever
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()
    text = output(tmp_path, "w")
    assert code == 2, text
    said = [line for line in text.splitlines() if line.startswith("trials: error: ")]
    assert len(said) == 1, text
    assert f"the database {redact(url)} has been unreachable for" in said[0], text
    assert "gave up after TRIALS_OUTAGE_TIMEOUT=3s" in said[0], text
    assert "Traceback" not in text and SECRET not in text, text
    assert wait_no_trial_processes(str(tmp_path / "jobs")) == [], "the worker left its replicas running"
    state, trials = _stored(pg_url, job_id)
    assert state == "JOB_STATE_RUNNING"
    assert trials[0].state.name == "RUNNING" and trials[0].intermediate_values, trials[0]


def wait_no_trial_processes(marker: str, timeout_s: float = 10.0) -> list[int]:
    deadline = time.monotonic() + timeout_s
    while (left := _trial_processes(marker)) and time.monotonic() < deadline:
        time.sleep(0.1)
    return left
