"""The controllers of the jobs ``trials serve`` made: each job run by ``trials resume JOB`` in its own
session with the server's job options (:mod:`options`), at most ``max_running_jobs`` at once (the others
wait QUEUED, see :mod:`admission`), a dead one started again up to ``CONTROLLER_RESTARTS`` times (then
the job FAILED saying how its controllers died), a job left unfinished by an earlier server resumed in
creation order."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from trials import protocol
from trials.controller.api.admission import Admission, default_max_running_jobs
from trials.controller.api.options import JobOptions
from trials.errors import TrialsError
from trials.printable import printable
from trials.records import FINAL_JOB_STATES, JobState
from trials.timefmt import rfc3339

CONTROLLER_RESTARTS = 3  # a controller that dies with its job unfinished is started again this often
CONTROLLER_LOG = "serve-controller.log"
EXTERNAL_POLL_S = 1.0  # how often a controller the server did not start is checked for its end
NO_OUTPUT = "(no output)"
CODE_REFUSED, CODE_INTERNAL = 9, 13  # google.rpc.Code of a job failed here: FAILED_PRECONDITION, INTERNAL


def death(code: int) -> str:
    """How a controller ended, from its ``Popen.returncode``: ``killed by SIGKILL``, ``exited with code 1``."""
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exited with code {code}"


def deaths_said(deaths: list[str]) -> str:
    """``4 times (killed by SIGKILL each time)``, or each death in turn when they differ."""
    n = f"{len(deaths)} time{'s' if len(deaths) > 1 else ''}"
    if len(set(deaths)) == 1:
        return f"{n} ({deaths[0]}{' each time' if len(deaths) > 1 else ''})"
    return f"{n} ({'; '.join(deaths)})"


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
        options: the job options every controller gets (runtime, images, GPUs, memory limit).
        python: the interpreter the controllers run under.
        max_running_jobs: controllers at once (``--max-running-jobs``); the other jobs wait QUEUED.
        endpoint: the server's Cloud Storage endpoint (``STORAGE_EMULATOR_HOST``), given to every
            host-runtime job's replicas instead of an endpoint per job.
        cwd: where the controllers (and so the host trials' commands) run.
    """

    root: str
    storage: str | None = None
    options: JobOptions = field(default_factory=JobOptions)
    python: str = sys.executable
    max_running_jobs: int = field(default_factory=default_max_running_jobs)
    endpoint: str | None = None
    cwd: str = field(default_factory=os.getcwd)
    log: Callable[[str], None] = lambda line: None
    _running: dict[str, _Controller] = field(default_factory=dict)
    _deaths: dict[str, list[str]] = field(default_factory=dict)  # how each job's controllers died, in turn
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _stopping: bool = False
    _admission: Admission = field(init=False)

    def __post_init__(self) -> None:
        self._admission = Admission(max_running=self.max_running_jobs)

    @property
    def shares_endpoint(self) -> bool:
        """Whether the jobs' replicas use the server's Cloud Storage endpoint (host runtime: they reach its
        loopback address) rather than one their controller starts."""
        return self.endpoint is not None and self.options.on_host

    def controller_command(self, job_id: str) -> list[str]:
        """``trials resume JOB`` with the server's job options (of ``--image``, the URIs the job's pools name)."""
        cmd = [self.python, "-m", "trials", "resume", job_id, "--root", self.root, "--quiet"]
        if self.storage:
            cmd += ["--storage", self.storage]
        cmd += self.options.resume_args(images_used=self.images_of(job_id) if self.options.images else ())
        if self.shares_endpoint:
            cmd += ["--pass-env", protocol.ENV_STORAGE_EMULATOR_HOST]
        return cmd

    def images_of(self, job_id: str) -> list[str]:
        """The images the job's pools name (none when the job cannot be read: its controller says why)."""
        from trials.controller.container.preflight import pool_images
        from trials.controller.jobs import view

        try:
            return pool_images(view.read_job(job_id, root=self.root, storage=self.storage).job)
        except TrialsError:
            return []

    def controller_env(self) -> dict[str, str]:
        """The controllers' environment: the server's, without its token, with its storage endpoint."""
        env = {k: v for k, v in os.environ.items() if k != protocol.ENV_SERVE_TOKEN}
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
            self.fail(job_id, f"The job's controller could not be started: {printable(str(err))[:300]}")

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
        """A controller ended: its job ended, or it died (started again, then the job FAILED saying how)."""
        code = proc.wait()
        with self._lock:
            entry = self._running.pop(job_id, None)
            if self._stopping:
                return
        restarts = entry.restarts if entry else 0
        state = self.state(job_id)
        if state is None or state in FINAL_JOB_STATES:
            self.log(f"job {job_id} {state or 'gone'}")
            with self._lock:
                self._deaths.pop(job_id, None)
            self.release(job_id)
            return
        log = os.path.join(self.job_dir(job_id), CONTROLLER_LOG)
        if code == protocol.EXIT_USAGE:  # it refused the job (a runtime, image or device it cannot use)
            self.fail(job_id, f"The job's controller refused to run it: {self.log_tail(job_id)} ({log})",
                      code=CODE_REFUSED)
            return
        with self._lock:
            deaths = self._deaths.setdefault(job_id, [])
            deaths.append(death(code))
        if restarts < CONTROLLER_RESTARTS:  # RUNNING -> (controller dead) -> RUNNING under a new one
            self.log(f"job {job_id}: its controller (pid {proc.pid}) {deaths[-1]} with the job {state}: started "
                     f"again ({restarts + 1} of {CONTROLLER_RESTARTS})")
            self.launch(job_id, restarts + 1)
            return
        tail = self.log_tail(job_id)
        self.fail(job_id, f"Internal error: the job's controller died with the job unfinished {deaths_said(deaths)}, "
                          f"and was started again {CONTROLLER_RESTARTS} times, the limit. Its output: {log}"
                          + ("" if tail == NO_OUTPUT else f", ending: {tail}"),
                  why=f"The trial was stopped because its job failed: its controller died {deaths_said(deaths)}.")

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
            return str(view.read_job(job_id, root=self.root, storage=self.storage).store.meta().state)
        except TrialsError:
            return None

    def job_dir(self, job_id: str) -> str:
        from trials.controller.jobs import registry

        return registry.job_dir_of(self.root, job_id)

    def fail(self, job_id: str, message: str, *, code: int = CODE_INTERNAL,
             why: str = "The trial was stopped because its job failed.") -> None:
        """The job has no controller and gets none: FAILED with ``message``; the trials a dead controller
        left running keep what they did (recorded as stopped, ``why``, and queued for a resume) and their
        leftover processes are killed. A controller someone else started meanwhile keeps the job (and its
        place) until it ends. Then the next waiting jobs start."""
        from trials.controller.jobs import registry
        from trials.controller.jobs.lock import lock_holder, reap_job_leftovers, repair_journal
        from trials.controller.loop.state_lock import state_lock
        from trials.controller.loop.stopped import requeue_stopped

        job_dir = self.job_dir(job_id)
        try:
            with state_lock(job_dir):  # (as `trials cancel`: no controller ends the job meanwhile)
                if lock_holder(job_dir) is not None:  # a `trials resume` started by hand runs it now
                    self.log(f"job {job_id}: a controller the server did not start runs it")
                    threading.Thread(target=self._watch_external, args=(job_id, job_dir), daemon=True,
                                     name=f"controller-{job_id}").start()
                    return
                repair_journal(registry.job_url(job_id, root=self.root, storage=self.storage))
                h = registry.open_job(job_id, root=self.root, storage=self.storage)
                meta = h.store.meta()
                if meta.state not in FINAL_JOB_STATES:  # (not cancelled meanwhile)
                    reap_job_leftovers(h)
                    for t in h.store.running_trials():  # ACTIVE -> SUCCEEDED | INFEASIBLE, WAITING to rerun
                        requeue_stopped(h.store, h.job.study, t, why=why)
                    h.store.write_meta(replace(meta, state=JobState.FAILED, end_time=rfc3339(time.time()),
                                               controller=None, error={"code": code, "message": message}),
                                       since=meta)
                    self.log(f"job {job_id} FAILED: {message}")
        except (OSError, TrialsError) as err:
            self.log(f"job {job_id}: could not be marked FAILED ({printable(str(err))[:200]}): {message}")
        with self._lock:
            self._deaths.pop(job_id, None)
        self.release(job_id)

    def log_tail(self, job_id: str) -> str:
        from trials.controller.jobs import registry
        from trials.controller.trial.files import tail_lines

        path = os.path.join(registry.job_dir_of(self.root, job_id), CONTROLLER_LOG)
        lines = [line for line in tail_lines(path, n=20, max_bytes=4096) if line.strip()]
        return printable(lines[-1])[:500] if lines else NO_OUTPUT

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
            if not h.store.meta().api_parent:
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
