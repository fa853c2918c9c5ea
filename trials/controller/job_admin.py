"""Changing a job from outside its controller: add trials, cancel it, repair its journal."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from dataclasses import replace
from typing import TYPE_CHECKING

from trials.controller.job import CANCELLED, CANCELLING, FINAL_STATES, QUEUED, RUNNING
from trials.controller.job_lock import lock_holder, reap_job_leftovers, repair_journal
from trials.controller.job_run import is_shared, shared_job
from trials.controller.jobs import job_dir_of
from trials.errors import ConfigError, JobNotFoundError
from trials.storage_url import JOURNAL_FILE
from trials.timefmt import rfc3339

if TYPE_CHECKING:
    from trials.controller.jobs import JobHandle


def _repair_if_idle(h: JobHandle) -> None:
    """Before writing without the controller lock: repair the journal if no controller runs."""
    if lock_holder(h.job_dir) is None:
        repair_journal(h.storage_url)


def extend(h: JobHandle, max_trial_count: int) -> int:
    _repair_if_idle(h)
    n = len(h.store.frozen_trials())
    if max_trial_count <= n:
        raise ConfigError(f"--max-trial-count must be more than the job's {n} trials to add any, "
                          f"got {max_trial_count}")
    added = h.store.add_trials(max_trial_count - n, h.job)
    if added == 0:
        raise ConfigError(f"the grid of job {h.job_id} is exhausted ({n} points); no trial to add")
    spec = dict(h.store.get_meta("spec"))
    spec["maxTrialCount"] = n + added
    h.store.set_meta(spec=spec)
    h.job = replace(h.job, max_trial_count=n + added)
    return added


def cancel(h: JobHandle) -> str:
    state = h.store.get_meta("state")
    if state in FINAL_STATES:
        return str(state)
    _repair_if_idle(h)
    h.store.set_meta(state=CANCELLING)
    shared = shared_job(h) if is_shared(h) else None
    if shared is not None:
        shared.requeue_stale()  # trials of dead workers: nobody else would ever stop them
    holder = lock_holder(h.job_dir)
    if holder is not None:  # a live controller stops its trials and ends the job
        if holder:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(holder, signal.SIGTERM)
        return CANCELLING
    if shared is None and state in (QUEUED, RUNNING, CANCELLING):
        _requeue_orphans(h)  # the controller died: nobody else would ever stop its trials
    if state in (QUEUED, RUNNING, CANCELLING) and not h.store.running_trials():
        h.store.set_meta(state=CANCELLED, end_time=rfc3339(time.time()),
                         error={"code": 1, "message": "The job was cancelled."})
        return CANCELLED
    return CANCELLING


def repair_job(root: str, job_id: str) -> tuple[int, list[str], str | None]:
    """Rewrite a job's journal with every readable record (``trials repair``).

    Returns the records kept, a description of each line dropped, and where the original was kept.
    """
    from trials.study.journal_check import repair

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
    """Trials a dead controller left RUNNING: kill their leftover replicas, queue them again (as the
    controller does on cancel: same id and parameters on resume)."""
    reap_job_leftovers(h)
    for t in h.store.running_trials():
        h.store.set_trial_attrs(t._trial_id, state="REQUESTED", end_time=None)
        h.store.requeue(t._trial_id)


def running_controller(h: JobHandle) -> int | None:
    """The pid of the live controller running this job folder (0: pid unknown), or ``None``."""
    return lock_holder(h.job_dir)
