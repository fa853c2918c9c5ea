"""Helpers of the `trials serve` tests: a real server process, raw HTTP to it, a CustomJob that leaves a mark."""

from __future__ import annotations

import http.client
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

PARENT = "/v1/projects/p/locations/l"
CUSTOM_JOBS = PARENT + "/customJobs"
TUNING_JOBS = PARENT + "/hyperparameterTuningJobs"


def custom_job(command: list[str], name: str = "marker", **job_spec: Any) -> dict[str, Any]:
    """A CustomJob of one replica running ``command`` on the host."""
    return {"displayName": name,
            "jobSpec": {"workerPoolSpecs": [{"machineSpec": {"machineType": "n1-standard-4"}, "replicaCount": "1",
                                             "containerSpec": {"imageUri": "gcr.io/p/t:1", "command": command}}],
                        **job_spec}}


def marker_job() -> dict[str, Any]:
    """A CustomJob whose command writes ``ran`` (who it ran as) in its trial's folder (a folder a trial
    keeps): the proof a request ran a command (see :func:`ran`)."""
    return custom_job(["sh", "-c", 'id > "$TRIALS_TRIAL_DIR/ran"'])


def ran(root: Path, timeout_s: float = 0.0) -> list[str]:
    """What the commands of :func:`marker_job` wrote under a server's root (waiting up to ``timeout_s`` for one)."""
    deadline = time.monotonic() + timeout_s
    while True:
        found = [p.read_text() for p in root.glob("*/1/ran")]
        if found or time.monotonic() >= deadline:
            return found
        time.sleep(0.1)


class Serve:
    """``trials serve --port 0`` in its own process; ``url`` and ``token`` as it printed them."""

    def __init__(self, root: Path, *args: str, env: dict[str, str] | None = None, cwd: Path | None = None):
        self.root = root
        self.proc = subprocess.Popen([sys.executable, "-m", "trials", "serve", "--port", "0", "--root", str(root),
                                      *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                     env=env, cwd=cwd)
        assert self.proc.stdout is not None
        self.lines: list[str] = []
        while not any("Cloud Storage" in line for line in self.lines):
            line = self.proc.stdout.readline()
            assert line, "".join(self.lines)
            self.lines.append(line)
        m = re.search(r" on http://([\d.]+):(\d+) ", self.lines[0])
        assert m, self.lines
        self.host, self.port = m.group(1), int(m.group(2))
        self.url = f"http://{self.host}:{self.port}"
        t = re.search(r'credentials=google\.oauth2\.credentials\.Credentials\(token="([^"]+)"\)', self.lines[1])
        self.token = t.group(1) if t else None

    def auth(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"} if self.token else {}

    def call(self, method: str, path: str, body: object = None, headers: dict[str, str] | None = None,
             timeout: float = 60) -> tuple[int, dict[str, Any], dict[str, str]]:
        """One request with exactly ``headers`` (and the JSON body): (status, JSON answer, answer's headers)."""
        conn = http.client.HTTPConnection(self.host, self.port, timeout=timeout)
        try:
            data = body if isinstance(body, bytes) else (None if body is None else json.dumps(body).encode())
            conn.putrequest(method, path, skip_host="Host" in (headers or {}), skip_accept_encoding=True)
            for key, value in (headers or {}).items():
                conn.putheader(key, value)
            if data is not None:
                conn.putheader("Content-Length", str(len(data)))
            conn.endheaders(data)
            answer = conn.getresponse()
            return answer.status, json.loads(answer.read() or b"{}"), dict(answer.getheaders())
        finally:
            conn.close()

    def ok(self, method: str, path: str, body: object = None) -> dict[str, Any]:
        status, out, _ = self.call(method, path, body, {**self.auth(), "Content-Type": "application/json"})
        assert status == 200, out
        return out

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 90) -> str:
        """Signal the server (once) and return all it printed."""
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        if self.proc.stdout is not None and not self.proc.stdout.closed:
            out, _ = self.proc.communicate(timeout=timeout)
            self.lines.append(out)
        return "".join(self.lines)


def cancel_all(root: Path) -> None:
    """Cancel every job a test left running under its controller."""
    for d in root.glob("*"):
        if (d / "journal.log").exists():
            subprocess.run([sys.executable, "-m", "trials", "cancel", d.name, "--root", str(root)],
                           capture_output=True, timeout=60)


def job_folders(root: Path) -> list[str]:
    """The job folders under a server's root (what a create made)."""
    return sorted(p.name for p in root.iterdir() if p.is_dir() and p.name != "gcs") if root.exists() else []


def environ_without_token() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k != "TRIALS_SERVE_TOKEN"}
