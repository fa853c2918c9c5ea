"""Running a job: its command, its run options, its shared (database) view, and the run itself."""

from __future__ import annotations

import os
import shlex
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from trials import protocol
from trials.controller.backend.protocol import ReplicaBackend
from trials.controller.jobs import backends
from trials.controller.jobs.lock import ControllerLock, reap_job_leftovers, repair_journal
from trials.controller.loop import events
from trials.controller.loop.runner import JobRunner
from trials.controller.loop.signals import LoopSignals
from trials.controller.loop.state import LoopOptions
from trials.controller.loop.state_lock import state_lock
from trials.errors import ConfigError
from trials.study.storage import RetryingRDBStorage

if TYPE_CHECKING:
    from trials.controller.gcs.emulator import Warm
    from trials.controller.jobs.registry import JobHandle
    from trials.study.database.leases import SharedJob


# --- run ------------------------------------------------------------------------------------------
def set_command(h: JobHandle, command: Sequence[str]) -> None:
    """Give a job created without a command (an image's ENTRYPOINT) the one to run locally.

    Raises:
        ConfigError: the job already has another command.
    """
    meta = h.store.meta()
    current = meta.local_command
    if current and list(current) != list(command):
        raise ConfigError(f"job {h.job_id} already runs {shlex.join(current)}; resume it without "
                          f"-- COMMAND, or start a new job with `trials sweep`")
    if not current:
        h.store.write_meta(replace(meta, local_command=tuple(command)), since=meta)


def check_runnable(h: JobHandle) -> None:
    """Refuse to resume a job whose trials have no command (``trials resume JOB -- COMMAND``)."""
    from trials.controller.trial.view import check_command

    try:
        check_command(h.job, h.store.meta().local_command, f"job {h.job_id}")
    except ConfigError as err:
        raise ConfigError(str(err).replace("trials sweep SPEC --", f"trials resume {h.job_id} --")) from None


def run_options(h: JobHandle, *, echo: bool, grace_period_s: float | None, memory_limit_mb: int | None,
                inject_restarts: float | None, slots: int | None, seed: int | None,
                devices: Any = None, shared: Any = None, join: bool = False,
                pass_env: Sequence[str] = (), runtime: str | None = None,
                images: Mapping[str, str] | None = None, keep_going: bool = False,
                own: Mapping[str, Any] | None = None, warm_start: bool = False) -> LoopOptions:
    """The loop's options from the job's stored settings and this run's (``runtime``, ``images``,
    ``own``: this run's choice of runtime, its images, the runtime's own options; else the job's)."""
    meta = h.store.meta()
    local = h.job.local
    name = runtime or meta.runtime or "host"
    kept: Mapping[str, Any] = own if own is not None else meta.options_of(name) or {}
    return LoopOptions(
        runtime=name,
        images={**meta.images, **(images or {})},
        slurm_partition=kept.get("partition"),
        slurm_args=tuple(kept.get("args") or ()),
        job_dir=h.job_dir, base_output=meta.base_output, gcs_root=meta.gcs_root or os.path.join(h.job_dir, "gcs"),
        project_number=meta.project_number or protocol.DEFAULT_PROJECT_NUMBER, cwd=meta.cwd or os.getcwd(),
        local_command=meta.local_command or None,
        grace_period_s=grace_period_s if grace_period_s is not None else (local.grace_period_s or 10.0),
        memory_limit_mb=memory_limit_mb if memory_limit_mb is not None else local.memory_limit_mb,
        inject_restarts=inject_restarts if inject_restarts is not None else local.inject_restarts,
        slots=slots, echo=sys.stdout if echo else None, seed=seed,
        devices=devices, shared=shared, join=join,
        pass_env=tuple(dict.fromkeys([*meta.pass_env, *pass_env])),
        suggest_ahead=os.environ.get(protocol.ENV_SUGGEST, "ahead") != "inline",
        keep_going=keep_going or meta.keep_going,
        warm_start=warm_start,
        confine=os.path.dirname(h.job_dir) if meta.api_parent else None,  # (the job folder is ROOT/JOB)
    )


def is_shared(h: JobHandle) -> bool:
    """Whether the job lives in a database that several workers can share (not a journal file)."""
    from trials.storage_url import is_journal_url

    return not is_journal_url(h.storage_url)


def shared_job(h: JobHandle, *, stale_after_s: float | None = None,
               notify: Callable[[str], None] | None = None, signals: LoopSignals | None = None) -> SharedJob | None:
    """The worker's view of a database job (leases, global cap, takeover), or None for a journal.

    ``notify`` gets one line per database outage; the storage then retries through outages, and a
    stop signal ``signals`` catches (also before the job loop runs: the worker's start) ends the wait.
    """
    if not is_shared(h):
        return None
    from trials.study.database.leases import DEFAULT_STALE_AFTER_S, SharedJob
    from trials.study.database.outages import Outages

    say = notify or (lambda line: print(f"trials: {line}", file=sys.stderr, flush=True))
    outages = Outages(say, url=h.storage_url)
    if signals is not None:
        signals.tell(outages.interrupt)
    storage = h.store.storage
    if isinstance(storage, RetryingRDBStorage):
        storage.outages = outages
    meta = h.store.meta()
    job_value = meta.stale_after_s
    if job_value is None:  # a job created before the lease timeout was the job's: its first worker sets it
        job_value = stale_after_s or DEFAULT_STALE_AFTER_S
        h.store.write_meta(replace(meta, stale_after_s=job_value), since=meta)
    elif stale_after_s is not None and stale_after_s != job_value:
        say(f"--stale-after {stale_after_s:g} ignored: the job's lease timeout is {float(job_value):g}s "
            f"(set when it was created), the same for every worker")
    return SharedJob(h.store, stale_after_s=float(job_value), outages=outages)


def run_job(h: JobHandle, options: LoopOptions, *, emit: events.Emit = events.ignore,
            resume: bool = False, lock: bool = True, signals: LoopSignals | None = None,
            endpoint: Warm | None = None) -> JobRunner:
    """Run the job here (holding its controller lock unless ``lock`` is false: a joined worker).

    ``signals``: the stop-signal handlers the caller installed (``LoopSignals.hold``) before it
    opened the job; a signal that came meanwhile cancels the run as soon as it starts.
    ``endpoint``: the local Cloud Storage endpoint's process, started ahead of the job by the
    caller (``host.warm_endpoint``) for the host backend to use.
    """
    locker = ControllerLock(h.job_dir) if lock else None
    if locker:
        os.makedirs(h.job_dir, exist_ok=True)
        locker.acquire()
        repair_journal(h.storage_url)
    ended = False

    def end() -> None:  # the end state is written: the next controller may start (see state_lock)
        nonlocal ended
        ended = True
        if locker:
            locker.release()

    try:
        backend: ReplicaBackend = backends.build(h, options, endpoint)
        policy = None
        if options.warm_start:
            from trials.controller.warm.backend import warm_backend

            backend, policy = warm_backend(backend, runtime=options.runtime, job_dir=options.job_dir)
        runner = JobRunner(h.store, h.job, options, backend=backend, emit=emit, signals=signals, policy=policy)
        if resume and options.shared is None:  # shared jobs take over stale trials instead
            reap_job_leftovers(h)
            runner.state.resume_running()
        runner.run(on_end=end)
        return runner
    finally:
        if locker and not ended:
            _settle_cancel(h)
            locker.release()


def _settle_cancel(h: JobHandle) -> None:
    """A controller that ends without its end state (an error, a full disk) never leaves a cancel
    half done: a job a ``trials cancel`` made CANCELLING ends CANCELLED, its trials back in the queue."""
    from trials.controller.loop.stopped import requeue_stopped
    from trials.controller.policy.rerun import CANCELLED
    from trials.records import JobState
    from trials.timefmt import rfc3339

    try:
        with state_lock(h.job_dir):
            meta = h.store.meta()
            if meta.state != JobState.CANCELLING:
                return
            for t in h.store.running_trials():  # recorded as the loop records a trial a cancel stopped
                requeue_stopped(h.store, h.job.study, t, why=CANCELLED)
            h.store.write_meta(replace(meta, state=JobState.CANCELLED, end_time=rfc3339(time.time()),
                                       controller=None, error={"code": 1, "message": "The job was cancelled."}),
                               since=meta)
    except OSError:
        pass  # nothing can be written (a full disk): `trials cancel` or `resume` settles it later
