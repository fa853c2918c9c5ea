"""A stop signal during a worker's start (the job opened, its loop not running yet) ends an outage's wait."""

import os
import signal
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from pg_helpers import create_job, finish, output, start_worker, wait_for
from test_outages import CuttableProxy

HOOKS = Path(__file__).resolve().parent.parent / "scripts" / "hooks"


@pytest.fixture
def proxy_url(pg_url):
    parts = urlsplit(pg_url)
    proxy = CuttableProxy(parts.hostname or "127.0.0.1", parts.port or 5432)
    yield proxy, f"{parts.scheme}://{parts.username or 'postgres'}@127.0.0.1:{proxy.port}{parts.path}"
    proxy.close()


def test_a_sigterm_while_a_starting_worker_waits_out_an_outage_stops_it_with_one_line(tmp_path, proxy_url, job_id):
    # Known gap of the first pass: during the worker's start SIGTERM met the default action (the
    # worker died at once, nothing said) because the loop's handlers were not installed yet.
    proxy, url = proxy_url
    create_job(tmp_path, url, job_id, points=2, parallel=1, epochs=2, sleep=0.05)
    hook_dir = tmp_path / "hooks"
    hook_dir.mkdir()
    pythonpath = os.pathsep.join(filter(None, [str(HOOKS), os.environ.get("PYTHONPATH")]))
    worker = start_worker(tmp_path, url, job_id, name="w", env={
        "PYTHONPATH": pythonpath, "TEST_HOOKS": "pause:JobRunner.__init__:before:1", "TEST_HOOK_DIR": str(hook_dir)})
    try:
        wait_for(lambda: (hook_dir / "JobRunner.__init__-before-1.reached").exists() or worker.poll() is not None,
                 60, "the worker's start")
        assert worker.poll() is None, output(tmp_path, "w")
        proxy.go_down()
        (hook_dir / "JobRunner.__init__-before-1.go").touch()  # its next read meets the outage
        wait_for(lambda: "database unreachable" in output(tmp_path, "w") or worker.poll() is not None, 60,
                 "the outage to be noticed")
        worker.send_signal(signal.SIGTERM)
        codes = finish([worker], timeout_s=30)
    finally:
        proxy.down.clear()
    text = output(tmp_path, "w")
    assert codes == [130], text
    assert "trials: error: stopped by SIGTERM while the database was unreachable" in text, text
    assert "Traceback" not in text
