"""The job as a whole while its loop runs: its state in the store, why it stops, the failure rule's
counts, and the totals the summary prints."""

from __future__ import annotations

import os
import socket
from collections.abc import Callable
from typing import Any

from trials.controller import policy
from trials.controller.effects import Clock
from trials.records import JobState, StopReason
from trials.spec import JobSpec
from trials.study.store import JobStore
from trials.timefmt import rfc3339

STATE_CHECK_INTERVAL_S = 1.0  # how often the loop reads the job's state written by others (cancel)


class JobProgress:
    """Job-level state of one job loop (the base of ``JobRunner``)."""

    def __init__(self, store: JobStore, job: JobSpec, options: Any, *,
                 progress: Callable[[str, dict[str, Any]], None] | None, clock: Clock):
        self.store = store
        self.job = job
        self.opt = options
        self.progress: Callable[[str, dict[str, Any]], None] = progress or (lambda event, data: None)
        self.clock = clock
        self.shared = options.shared
        self.worker_name = self.shared.me if self.shared else f"{socket.gethostname()}:{os.getpid()}"
        self.cancel_requested = False
        self.leaving = False  # a joined worker asked to stop: its trials go back to the queue
        self.exhausted = False
        self.job_error: str | None = None
        self.n_failed = 0
        self.n_succeeded = 0
        self.n_started = 0
        self.first_failure: str | None = None
        self.max_parallel = 0
        self.conflicts_total = 0
        self.lost_steps_total = 0  # chaos mode: gaps in the step sequence of restarted trials
        self._warned_repeated_steps = False  # reports repeating a step: said once per job
        self._last_state_check = -STATE_CHECK_INTERVAL_S

    @property
    def job_stop_reason(self) -> StopReason | None:
        """Why every running trial must stop now (None: they go on)."""
        if self.cancel_requested:
            return StopReason.CANCEL
        if self.leaving:
            return StopReason.LEAVE
        if self.job_error is not None:
            return StopReason.JOB_END
        return None

    @property
    def accepting_trials(self) -> bool:
        return self.job_stop_reason is None

    def request_cancel(self) -> None:
        self.cancel_requested = True

    def begin_job(self) -> None:
        """Count what earlier runs finished; the job is RUNNING with this controller."""
        self._count_finished()
        if self.store.get_meta("start_time") is None:
            self.store.set_meta(start_time=rfc3339(self.clock.wall()))
        if not self.opt.join:
            self.store.set_meta(state=JobState.RUNNING.value, end_time=None, error=None,
                                controller=self.worker_name)
        elif self.store.get_meta("state") in (JobState.QUEUED, JobState.PENDING):
            self.store.set_meta(state=JobState.RUNNING.value)
        self.progress("job_running", {})

    def check_external_state(self, now: float) -> None:
        """A cancel (``trials cancel``) or a failure another worker decided, read from the store."""
        if self.cancel_requested and self.store.get_meta("state") != JobState.CANCELLING:
            self.store.set_meta(state=JobState.CANCELLING.value)
            self.progress("job_cancelling", {})
        if now - self._last_state_check < STATE_CHECK_INTERVAL_S:
            return
        self._last_state_check = now
        state = self.store.get_meta("state")
        if state in (JobState.CANCELLING, JobState.CANCELLED):
            self.cancel_requested = True
        elif self.shared is not None and state == JobState.FAILED and self.job_error is None:
            error = self.store.get_meta("error") or {}
            self.job_error = error.get("message") or "another worker ended the job FAILED"

    def count_finished_trial(self, trial_id: str, *, succeeded: bool, failure: str | None) -> None:
        """A trial finished here: apply the job's failure rule."""
        if succeeded:
            self.n_succeeded += 1
        if failure and self.shared is not None:
            self.n_failed = self.n_succeeded = 0  # the job's failure rule counts every worker's trials
            self.first_failure = None
            self._count_finished()
        elif failure:
            self.n_failed += 1
            self.first_failure = self.first_failure or f"Trial {trial_id}: {failure}"
        else:
            return
        error = policy.job_failure(self.job, n_failed=self.n_failed, n_succeeded=self.n_succeeded,
                                   first_failure=self.first_failure)
        if error and self.job_error is None:
            self.job_error = error

    def _count_finished(self) -> None:
        for t in self.store.frozen_trials():
            if t.user_attrs.get("failed"):
                self.n_failed += 1
                reason = t.user_attrs.get("infeasible_reason")
                self.first_failure = self.first_failure or f"Trial {t.number + 1}: {reason}"
            elif t.user_attrs.get("state") == "SUCCEEDED":
                self.n_succeeded += 1

    def finish_job(self) -> str:
        """Record the job's end state (the last worker of a shared job does); returns it."""
        if self.shared is not None and self.job_error is None:
            if self.leaving:
                self.progress("job_left", {})
                return str(self.store.get_meta("state"))
            if self.cancel_requested:
                self.shared.requeue_stale()
                if self.shared.others_active():
                    return JobState.CANCELLING.value  # the last worker to stop sets CANCELLED
            elif sum(self.shared.counts()):
                return str(self.store.get_meta("state"))  # left with trials still to run
        error: dict[str, Any] | None
        if self.job_error is not None:
            state, error = JobState.FAILED, {"code": policy.JOB_FAILED_CODE, "message": self.job_error}
        elif self.cancel_requested:
            state, error = JobState.CANCELLED, {"code": 1, "message": "The job was cancelled."}
        else:
            state, error = JobState.SUCCEEDED, None
        self.store.set_meta(state=state.value, end_time=rfc3339(self.clock.wall()), error=error, controller=None)
        self.progress("job_done", {"state": state.value, "error": error})
        return state.value
