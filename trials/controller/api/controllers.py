"""The controllers of the jobs ``trials serve`` made: each job run by ``trials resume JOB`` in its own
session, at most ``max_running_jobs`` at once (the others wait QUEUED, see :mod:`admission`), a dead one
started again, a job left unfinished by an earlier server resumed in creation order."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from trials import protocol
from trials.controller.api.admission import Admission, default_max_running_jobs
from trials.controller.api.guard import ENV_SERVE_TOKEN
from trials.errors import TrialsError
from trials.printable import printable
from trials.records import FINAL_JOB_STATES, JobState
from trials.timefmt import rfc3339

CONTROLLER_RESTARTS = 3  # a controller that dies with its job unfinished is started again this often
CONTROLLER_LOG = "serve-controller.log"
EXTERNAL_POLL_S = 1.0  # how often a controller the server did not start is checked for its end


@dataclass
class _Controller:
    job_id: str
    proc: subprocess.Popen[bytes]
    restarts: int = 0


@dataclass
class Controllers:
    """The jobs' controllers and the queue of jobs waiting for one.

    Args:
        root: the folder of job folders; storage: the jobs' Optuna storage URL (None: a journal each).
        runtime, images: ``--runtime`` and ``--image`` of each controller.
        python: the interpreter the controllers run under.
        max_running_jobs: controllers at once (``--max-running-jobs``); the other jobs wait QUEUED.
        endpoint: the server's Cloud Storage endpoint (``STORAGE_EMULATOR_HOST``), given to every
            host-runtime job's replicas instead of an endpoint per job.
        cwd: where the controllers (and so the host trials' commands) run.
    """

    root: str
    storage: str | None = None
    runtime: str | None = None
    images: Sequence[str] = ()
    python: str = sys.executable
    max_running_jobs: int = field(default_factory=default_max_running_jobs)
    endpoint: str | None = None
    cwd: str = field(default_factory=os.getcwd)
    log: Callable[[str], None] = lambda line: None
    _running: dict[str, _Controller] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _stopping: bool = False
    _admission: Admission = field(init=False)

    def __post_init__(self) -> None:
        self._admission = Admission(max_running=self.max_running_jobs)

    @property
    def shares_endpoint(self) -> bool:
        """Whether the jobs' replicas use the server's Cloud Storage endpoint (host runtime: they reach its
        loopback address) rather than one their controller starts."""
        return self.endpoint is not None and self.runtime in (None, "host")

    def controller_command(self, job_id: str) -> list[str]:
        cmd = [self.python, "-m", "trials", "resume", job_id, "--root", self.root, "--quiet"]
        if self.storage:
            cmd += ["--storage", self.storage]
        if self.runtime:
            cmd += ["--runtime", self.runtime]
        for image in self.images:
            cmd += ["--image", image]
        if self.shares_endpoint:
            cmd += ["--pass-env", protocol.ENV_STORAGE_EMULATOR_HOST]
        return cmd

    def controller_env(self) -> dict[str, str]:
        """The controllers' environment: the server's, without its token, with its storage endpoint."""
        env = {k: v for k, v in os.environ.items() if k != ENV_SERVE_TOKEN}
        if self.shares_endpoint and self.endpoint is not None:
            env[protocol.ENV_STORAGE_EMULATOR_HOST] = self.endpoint
        return env

    def submit(self, job_id: str) -> None:
        """Run the job's controller now, or queue the job behind ``max_running_jobs`` running ones."""
        with self._lock:
            now = self._admission.submit(job_id)
            n_waiting = len(self._admission.waiting)
        if now:
            self.launch(job_id)
        else:
            self.log(f"job {job_id} waits JOB_STATE_QUEUED: {self.max_running_jobs} job(s) running "
                     f"(--max-running-jobs), {n_waiting} waiting")

    def release(self, job_id: str) -> None:
        """A job's controller is gone for good (or it left the queue): start the next waiting jobs."""
        with self._lock:
            if self._stopping:
                return
            queued = self._admission.done(job_id)
        for nxt in queued:
            state = self.state(nxt)
            if state is None or state in FINAL_JOB_STATES:  # cancelled or deleted while it waited
                self.release(nxt)
            else:
                self.launch(nxt)

    def launch(self, job_id: str, restarts: int = 0) -> None:
        try:
            self.start(job_id, restarts)
        except (OSError, TrialsError) as err:
            self.fail(job_id, f"the job's controller could not be started: {printable(str(err))[:300]}")
            self.release(job_id)

    def start(self, job_id: str, restarts: int = 0) -> None:
        """Run the job's controller (``trials resume JOB``) in its own session, its output in the job folder."""
        from trials.controller.jobs import registry

        job_dir = registry.job_dir_of(self.root, job_id)
        os.makedirs(job_dir, exist_ok=True)
        fd = os.open(os.path.join(job_dir, CONTROLLER_LOG), os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW,
                     0o644)
        try:
            proc = subprocess.Popen(self.controller_command(job_id), stdin=subprocess.DEVNULL, stdout=fd,
                                    stderr=fd, cwd=self.cwd, start_new_session=True, env=self.controller_env())
        finally:
            os.close(fd)
        with self._lock:
            self._running[job_id] = _Controller(job_id, proc, restarts)
        threading.Thread(target=self._watch, args=(job_id, proc), daemon=True, name=f"controller-{job_id}").start()

    def _watch(self, job_id: str, proc: subprocess.Popen[bytes]) -> None:
        """A controller ended: its job ended, or it died (started again, then the job FAILED with why)."""
        code = proc.wait()
        with self._lock:
            entry = self._running.pop(job_id, None)
            if self._stopping:
                return
        restarts = entry.restarts if entry else 0
        state = self.state(job_id)
        if state is None or state in FINAL_JOB_STATES:
            self.log(f"job {job_id} {state or 'gone'}")
            self.release(job_id)
            return
        if code != protocol.EXIT_USAGE and restarts < CONTROLLER_RESTARTS:
            self.log(f"job {job_id}: its controller exited ({code}) with the job {state}: started again")
            self.launch(job_id, restarts + 1)
            return
        self.fail(job_id, f"the job's controller exited with code {code}: {self.log_tail(job_id)}")
        self.release(job_id)

    def _watch_external(self, job_id: str, job_dir: str) -> None:
        """A controller this server did not start (an earlier server's): its place is held until it ends;
        a job it left unfinished gets one of this server's."""
        from trials.controller.jobs.lock import lock_holder

        while lock_holder(job_dir) is not None:
            if self._stopping:
                return
            time.sleep(EXTERNAL_POLL_S)
        state = self.state(job_id)
        if state is None or state in FINAL_JOB_STATES:
            self.release(job_id)
        elif not self._stopping:
            self.log(f"job {job_id}: the controller an earlier server started is gone with the job {state}: "
                     f"started again")
            self.launch(job_id)

    def state(self, job_id: str) -> str | None:
        from trials.controller.jobs import view

        try:
            return str(view.read_job(job_id, root=self.root, storage=self.storage).store.get_meta("state"))
        except TrialsError:
            return None

    def fail(self, job_id: str, message: str) -> None:
        from trials.controller.jobs import registry

        with contextlib.suppress(TrialsError):
            h = registry.open_job(job_id, root=self.root, storage=self.storage)
            h.store.set_meta(state=JobState.FAILED.value, end_time=rfc3339(time.time()),
                             error={"code": 9, "message": message})
        self.log(f"job {job_id} FAILED: {message}")

    def log_tail(self, job_id: str) -> str:
        from trials.controller.jobs import registry
        from trials.controller.trial.files import tail_lines

        path = os.path.join(registry.job_dir_of(self.root, job_id), CONTROLLER_LOG)
        lines = [line for line in tail_lines(path, n=20, max_bytes=4096) if line.strip()]
        return printable(lines[-1])[:500] if lines else "(no output)"

    def resume_jobs(self) -> list[str]:
        """On start: every job made through the API that has not ended runs again, first created first: one a
        live controller runs holds its place until it ends; the others start, or wait their turn QUEUED."""
        from trials.controller.jobs import admin, registry, view

        resumed = []
        rows = sorted(view.list_jobs(self.root, self.storage), key=lambda r: (r["create_time"], r["job_id"]))
        for row in rows:
            if row["state"] in FINAL_JOB_STATES:
                continue
            try:
                h = registry.open_job(row["job_id"], root=self.root, storage=self.storage)
            except TrialsError:
                continue
            if not h.store.get_meta("api_parent"):
                continue
            if admin.running_controller(h) is not None:
                with self._lock:
                    self._admission.adopt(row["job_id"])
                threading.Thread(target=self._watch_external, args=(row["job_id"], h.job_dir), daemon=True,
                                 name=f"controller-{row['job_id']}").start()
                continue
            self.submit(row["job_id"])
            resumed.append(row["job_id"])
        return resumed

    def running(self) -> list[str]:
        with self._lock:
            return sorted(self._running)

    def waiting(self) -> list[str]:
        """The jobs waiting for a controller, in the order they will start."""
        with self._lock:
            return list(self._admission.waiting)

    def stop(self) -> None:
        """The server stops; the jobs' controllers go on (as Vertex's jobs outlive a client)."""
        with self._lock:
            self._stopping = True

    def cancelled(self, job_id: str) -> None:
        """A job was cancelled: if it waited for a controller, it leaves the queue (it never runs)."""
        with self._lock:
            waited = self._admission.is_waiting(job_id)
        if waited:
            self.release(job_id)
