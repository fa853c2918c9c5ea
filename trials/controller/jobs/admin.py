"""Changing a job from outside its controller: add trials, cancel it, repair its journal."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from trials.controller.jobs.lock import lock_holder, repair_journal
from trials.controller.jobs.registry import job_dir_of
from trials.controller.jobs.run import is_shared, shared_job
from trials.controller.loop.state_lock import state_lock
from trials.errors import ConfigError, JobNotFoundError
from trials.records import FINAL_JOB_STATES, JobState, TrialState
from trials.storage_url import JOURNAL_FILE
from trials.timefmt import rfc3339

if TYPE_CHECKING:
    from trials.controller.jobs.registry import JobHandle


_REST_FIELDS = {"max_trial_count": "maxTrialCount", "max_failed_trial_count": "maxFailedTrialCount",
                "parallel_trial_count": "parallelTrialCount"}


def extend(h: JobHandle, max_trial_count: int) -> int:
    """Add trials up to ``max_trial_count``; returns how many (see :func:`change`)."""
    return change(h, max_trial_count=max_trial_count)[0]


def change(h: JobHandle, *, max_trial_count: int | None = None,
           counts: Mapping[str, int] | None = None) -> tuple[int, int | None]:
    """Add trials up to ``max_trial_count`` and set the job's other ``counts`` (``max_failed_trial_count``,
    ``parallel_trial_count``: validated by the caller), recorded in its spec; returns the trials added
    and the pid of the controller that runs them.

    That pid (0: unknown) is the controller running the job, which will run the new trials; None:
    no controller will, the caller runs them. It is read under the job's state lock after the
    writes, and a controller takes its last look before it ends inside that lock (``state_lock``):
    a controller seen here holding the job has not ended and will see them.

    Raises:
        ConfigError: ``max_trial_count`` adds nothing; ``counts`` while a controller runs the job
            (its loop keeps the counts it started with). Nothing is written then.
    """
    counts = dict(counts or {})
    with state_lock(h.job_dir):
        holder = lock_holder(h.job_dir)
        if counts and holder is not None:
            flags = ", ".join("--" + name.replace("_", "-") for name in counts)
            raise ConfigError(f"job {h.job_id} is being run by a controller (pid {holder or 'unknown'}): {flags} "
                              f"can change only while it is not running; stop it (trials cancel {h.job_id}), "
                              f"then resume it with them")
        if holder is None:
            repair_journal(h.storage_url)
        n = len(h.store.frozen_trials())
        if max_trial_count is not None and max_trial_count <= n:
            raise ConfigError(f"--max-trial-count must be more than the job's {n} trials to add any, "
                              f"got {max_trial_count}")
        added = 0
        with h.store.batch():  # the trials and the counts that say so: one journal write
            if max_trial_count is not None:
                added = h.store.add_trials(max_trial_count - n, h.job)
                if added == 0:
                    raise ConfigError(f"the grid of job {h.job_id} is exhausted ({n} points); no trial to add")
                counts["max_trial_count"] = n + added
            if counts:
                meta = h.store.meta()
                spec = dict(meta.spec or {})
                spec.update({_REST_FIELDS[name]: value for name, value in counts.items()})
                h.store.write_meta(replace(meta, spec=spec), since=meta)
        changes: dict[str, Any] = counts
        h.job = replace(h.job, **changes)
        return added, lock_holder(h.job_dir)


def check_failure_budget(h: JobHandle, *, max_failed: int | None = None, max_trial_count: int | None = None,
                         keep_going: bool = False) -> None:
    """Refuse to resume a job its failed trials would end again at once, with the flag that lets it on.

    ``max_failed``, ``max_trial_count``: the counts the resume is about to set (None: the job's);
    ``keep_going``: the resume's ``--keep-going`` (the job's, if it was given it before).

    Raises:
        ConfigError: the job's failure rule already holds and trials are left to run.
    """
    from trials.controller.policy.exits import INFEASIBLE_ATTRS, infeasible_by_end, job_failure, same_reason_failure

    by_number = h.store.trial_attrs(*INFEASIBLE_ATTRS)  # (a database: not every trial whole)
    attrs = by_number.values()
    n_failed = sum(1 for a in attrs if a.get("failed"))
    n_ok = sum(1 for a in attrs if a.get("state") == TrialState.SUCCEEDED)
    left = sum(h.store.waiting_running()) + max(0, (max_trial_count or 0) - h.store.n_trials())
    limit = h.job.max_failed_trial_count if max_failed is None else max_failed
    job = replace(h.job, max_failed_trial_count=limit)
    if left and same_reason_failure(job, infeasible=infeasible_by_end(by_number), n_succeeded=n_ok, n_left=left,
                                    keep_going=keep_going or h.store.meta().keep_going):
        raise ConfigError(f"job {h.job_id} would fail again at once: its first trials were infeasible for the "
                          f"same reason and none succeeded; fix that, then resume it with --keep-going to run "
                          f"its {left} trial{'' if left == 1 else 's'} left")
    if not left or job_failure(job, n_failed=n_failed, n_succeeded=n_ok, first_failure="") is None:
        return
    rule = f"maxFailedTrialCount={limit}" if limit else "maxFailedTrialCount unset: the first failure ends it"
    raise ConfigError(f"job {h.job_id} would fail again at once: {n_failed} of its trials failed ({rule}); "
                      f"to run its {left} trials left, resume it with --max-failed-trial-count N "
                      f"(N > {n_failed})")


HOLDER_PID_WAIT_S = 1.0  # a controller writes its pid right after it takes the lock


def _holder(h: JobHandle) -> int | None:
    """The live controller's pid (0 if it did not write it in time), or None."""
    deadline = time.monotonic() + HOLDER_PID_WAIT_S
    holder = lock_holder(h.job_dir)
    while holder == 0 and time.monotonic() < deadline:
        time.sleep(0.01)
        holder = lock_holder(h.job_dir)
    return holder


def cancel(h: JobHandle) -> tuple[str, bool]:
    """Cancel the job; returns its state and whether it had already ended (then nothing changed).

    Under the job's state lock: a controller ends inside one hold of it, so this sees either a
    controller that has not ended (it is told to stop, and it ends the job: CANCELLED, or
    SUCCEEDED when every trial had finished) or the job's end state, never a mix of both.
    """
    with state_lock(h.job_dir):
        return _cancel(h)


def _cancel(h: JobHandle) -> tuple[str, bool]:
    meta = h.store.meta()
    state = meta.state
    holder = _holder(h)
    if state in FINAL_JOB_STATES and holder is None:
        return str(state), True
    if holder is None:
        repair_journal(h.storage_url)
    cancelling = replace(meta, state=JobState.CANCELLING)
    h.store.write_meta(cancelling, since=meta)
    shared = shared_job(h) if is_shared(h) else None
    if shared is not None:
        shared.requeue_stale()  # trials of dead workers: nobody else would ever stop them
    if holder is not None:  # a live controller (also one just starting) stops its trials and ends the job
        if holder:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(holder, signal.SIGTERM)
        return JobState.CANCELLING.value, False
    if shared is None and state in (JobState.QUEUED, JobState.RUNNING, JobState.CANCELLING):
        _requeue_orphans(h)  # the controller died: nobody else would ever stop its trials
    if state in (JobState.QUEUED, JobState.RUNNING, JobState.CANCELLING) and not h.store.running_trials():
        h.store.write_meta(replace(cancelling, state=JobState.CANCELLED, end_time=rfc3339(time.time()),
                                   error={"code": 1, "message": "The job was cancelled."}), since=cancelling)
        return JobState.CANCELLED.value, False
    return JobState.CANCELLING.value, False


def repair_job(root: str, job_id: str) -> tuple[int, list[str], str | None]:
    """Rewrite a job's journal with every readable record (``trials repair``).

    Returns the records kept, a description of each line dropped, and where the original was kept.
    """
    from trials.study.journal.check import repair

    job_dir = job_dir_of(root, job_id)
    path = os.path.join(job_dir, JOURNAL_FILE)
    if not os.path.isfile(path):
        raise JobNotFoundError(f"no journal of job {job_id!r} at {path}; pass --root")
    holder = lock_holder(job_dir)
    if holder is not None:
        who = f"pid {holder}" if holder else "pid unknown"
        raise ConfigError(f"job {job_id} is being run by a controller ({who}); stop it first")
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path + ".lock")  # a killed writer's: nobody writes now
    result, backup = repair(path)
    return len(result.good), [f"line {b.line}: {b.reason}" for b in result.bad], backup


def _requeue_orphans(h: JobHandle) -> None:
    """Trials a dead controller left RUNNING: remove what it left running through the job's runtime
    (``jobs.backends.clean_dead``: host process groups killed, containers and their networks
    removed, Slurm jobs cancelled), record them as a cancel stopped them and queue them again (as the
    controller does on cancel: same id and parameters on resume)."""
    from trials.controller.jobs import backends

    backends.clean_dead(h, h.store.meta().runtime)
    from trials.controller.loop.stopped import requeue_stopped
    from trials.controller.policy.rerun import CANCELLED_ORPHAN

    for t in h.store.running_trials():  # what they did stays shown (never REQUESTED: they ran)
        requeue_stopped(h.store, h.job.study, t, why=CANCELLED_ORPHAN)


def running_controller(h: JobHandle) -> int | None:
    """The pid of the live controller running this job folder (0: pid unknown), or ``None``."""
    return lock_holder(h.job_dir)


def collect_layers(job_dir: str, job_id: str) -> tuple[int, int]:
    """``trials gc``: remove the copy-on-write layers the job's sandboxed attempts left (its failed
    attempts' kept for debugging, those of a controller that died); returns (layers, bytes) removed.

    Raises:
        ConfigError: a controller runs the job (its attempts' layers go as they end).
    """
    from trials.controller.process import layers

    holder = lock_holder(job_dir)
    if holder is not None:
        raise ConfigError(f"job {job_id} is being run by a controller (pid {holder or 'unknown'}): each attempt's "
                          f"layers go when it ends; run trials gc {job_id} once the job has stopped")
    return layers.collect(job_dir)
