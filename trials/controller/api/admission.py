"""Which API jobs' controllers run: at most ``--max-running-jobs`` at once, the others wait in creation order.

As Vertex keeps a job ``JOB_STATE_QUEUED`` until resources free up, a job created beyond the limit
keeps its state until a running one ends. Pure bookkeeping: :class:`~trials.controller.api.server.Api`
starts what :meth:`Admission.submit` and :meth:`Admission.done` say, under its own lock.
"""

from __future__ import annotations

import os
from collections import deque
from dataclasses import dataclass, field


def default_max_running_jobs() -> int:
    """The machine's cores (a job's controller and its trials need one at least)."""
    return os.cpu_count() or 1


@dataclass
class Admission:
    """Jobs running (a controller each) and jobs waiting, first created first.

    Example:
        >>> a = Admission(max_running=1)
        >>> a.submit("1"), a.submit("2"), a.done("1")
        (True, False, ['2'])
    """

    max_running: int
    running: set[str] = field(default_factory=set)
    waiting: deque[str] = field(default_factory=deque)

    def __post_init__(self) -> None:
        if self.max_running < 1:
            raise ValueError(f"max_running must be >= 1, got {self.max_running}")

    def submit(self, job_id: str) -> bool:
        """A job to run: True when it may start now, else it waits behind the others."""
        if job_id in self.running:
            return True
        if job_id in self.waiting:
            return False
        if len(self.running) < self.max_running and not self.waiting:
            self.running.add(job_id)
            return True
        self.waiting.append(job_id)
        return False

    def adopt(self, job_id: str) -> None:
        """A job already running under a controller the server did not start: it holds a place."""
        self.running.add(job_id)

    def done(self, job_id: str) -> list[str]:
        """A job's controller ended for good (or it was cancelled waiting): the jobs to start now, in order."""
        self.running.discard(job_id)
        if job_id in self.waiting:
            self.waiting.remove(job_id)
        started = []
        while self.waiting and len(self.running) < self.max_running:
            nxt = self.waiting.popleft()
            self.running.add(nxt)
            started.append(nxt)
        return started

    def is_waiting(self, job_id: str) -> bool:
        return job_id in self.waiting
