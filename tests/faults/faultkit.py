"""Helpers of the fault suite: run the real CLI in a scratch folder, read the job back, find orphans."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from jobkit import shared_folder

SCRIPTS = Path(__file__).resolve().parent.parent / "scripts"
TRAINER = str(SCRIPTS / "fault_trainer.py")

SHORT_SPEC = """\
metrics: {{loss: minimize}}
parameters:
  x: {{type: double, min: 0.0, max: 1.0}}
{params}max_trial_count: {n}
parallel_trial_count: {parallel}
max_failed_trial_count: {max_failed}
{extra}
"""


class Jobs:
    """Runs ``python -m trials`` in one scratch folder; every job id is unique to the test."""

    def __init__(self, root: Path, *, gcs_endpoint: bool = False):
        self.root = root
        self.tag = uuid.uuid4().hex[:8]
        self.started: list[subprocess.Popen] = []
        self.gcs_endpoint = gcs_endpoint  # the local Cloud Storage endpoint: a process per controller
        self.gcs_root = root / "gcs"  # buckets of the test's own: sweep ... --gcs-root with shared()

    def shared(self) -> Path:
        """A folder the test and its trials see alike, live (``jobkit.shared_folder``) when the sweep is
        given ``--gcs-root jobs.gcs_root``: a sandboxed trial's writes elsewhere stay in its own layer."""
        return shared_folder(self.gcs_root)

    def job_id(self, name: str) -> str:
        return f"{name}-{self.tag}"

    def job_dir(self, job_id: str) -> Path:
        return self.root / "trials-jobs" / job_id

    def spec(self, *, n: int = 1, parallel: int = 1, max_failed: int = 0, params: str = "",
             extra: str = "", name: str = "spec.yaml") -> str:
        """A short-form spec: metric ``loss``, parameter ``x`` plus ``params`` (indented lines)."""
        path = self.root / name
        path.write_text(SHORT_SPEC.format(n=n, parallel=parallel, max_failed=max_failed,
                                          params=params, extra=extra))
        return str(path)

    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("CLOUD_ML_", "AIP_", "TRIALS_", "PYTEST_"))}
        env["PYTHONUNBUFFERED"] = "1"
        if not self.gcs_endpoint:  # as in the rest of the suite (tests/conftest.py): about 0.5 s a controller
            env["TRIALS_GCS_EMULATOR"] = "off"
        return env

    def cli(self, *args: str, timeout: float = 60.0, cwd: Path | None = None) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "trials", *args], cwd=cwd or self.root,
                              env=self.env(), capture_output=True, text=True, timeout=timeout)

    def start(self, *args: str) -> subprocess.Popen:
        proc = subprocess.Popen([sys.executable, "-m", "trials", *args], cwd=self.root,
                                env=self.env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True)
        self.started.append(proc)
        return proc

    def sweep(self, spec: str, job_id: str, *trainer_args: str, opts: Sequence[str] = (),
              timeout: float = 60.0) -> subprocess.CompletedProcess:
        return self.cli("sweep", spec, "--job-id", job_id, "--grace-period", "0.5", *opts,
                        "--", "python", TRAINER, *trainer_args, timeout=timeout)

    def describe(self, job_id: str) -> dict[str, Any]:
        out = self.cli("describe", job_id, "--format", "json")
        assert out.returncode == 0, out.stderr
        return json.loads(out.stdout)

    def local(self, job_id: str) -> dict[str, Any]:
        """Per trial id, the local details (``describe --format local-json``): error_detail, attempts."""
        out = self.cli("describe", job_id, "--format", "local-json")
        assert out.returncode == 0, out.stderr
        return json.loads(out.stdout)["trials"]

    def optuna_study(self, job_id: str):
        """The job's study opened by plain Optuna (no trials code involved)."""
        import optuna
        from optuna.storages.journal import JournalFileBackend

        storage = optuna.storages.JournalStorage(
            JournalFileBackend(str(self.job_dir(job_id) / "journal.log")))
        return optuna.load_study(study_name=job_id, storage=storage)

    def cleanup(self) -> None:
        for proc in self.started:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        for pid in processes_of(self.tag):
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)


def processes_of(marker: str) -> list[int]:
    """Live processes whose environment or command line mentions ``marker`` (a job id, a path)."""
    needle = marker.encode()
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                stat = f.read()
            if stat[stat.rindex(b")") + 2:][:1] in (b"Z", b"X"):
                continue  # a zombie is dead; here nobody may reap it
            blobs = []
            for name in ("environ", "cmdline"):
                with open(f"/proc/{entry}/{name}", "rb") as f:
                    blobs.append(f.read())
        except OSError:
            continue
        if any(needle in blob for blob in blobs):
            out.append(int(entry))
    return out


def wait_no_processes(marker: str, timeout_s: float = 3.0) -> list[int]:
    deadline = time.monotonic() + timeout_s
    while (left := processes_of(marker)) and time.monotonic() < deadline:
        time.sleep(0.05)
    return left
