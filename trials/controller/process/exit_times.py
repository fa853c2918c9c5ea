"""When each replica's leader exited, noted by the SIGCHLD handler, not when the job loop got round to it.

The job loop reaps exits once per pass, and a pass can wait: a suggestion from the GP sampler takes
seconds at 100 trials, one from OSS Vizier 12-25 s. A trial that ended meanwhile would be recorded
as ending when the loop came back. The SIGCHLD handler (installed by ``signals.LoopSignals`` in the
main thread; Python runs it between two bytecodes of whatever the thread is doing, also inside a
sampler) looks at the watched leaders without reaping them (``waitid`` with ``WNOWAIT``) and notes
the time of each exit it finds; ``Replica.poll`` takes that time when it reaps the leader.
Without the handler (the loop outside the main thread) the time is the reap's, as before.
The times are monotonic: a trial's duration and end never depend on the wall clock being set meanwhile.
"""

from __future__ import annotations

import os
import time

_watched: dict[int, float | None] = {}  # leader pid -> monotonic time its exit was seen (None: running)


def watch(pid: int) -> None:
    """Note the exit time of this child (a replica's leader, just started).

    A leader can exit before it is watched (a short trainer while the controller was descheduled
    after the fork): its SIGCHLD came too early to be noted, so it is looked at once here.
    """
    _watched[pid] = None
    _note(pid, time.monotonic())


def note_exits() -> None:
    """The SIGCHLD handler's work: the time of every watched leader's exit seen for the first time."""
    now = time.monotonic()
    for pid, seen in list(_watched.items()):
        if seen is None:
            _note(pid, now)


def _note(pid: int, now: float) -> None:
    try:
        info = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except OSError:  # ECHILD: reaped already (its time is the reap's), or not our child. Never raise:
        return       # the handler runs inside whatever the thread was doing (a sampler, a write)
    if info is not None and _watched.get(pid, 0.0) is None:
        _watched[pid] = now


def take(pid: int) -> float | None:
    """The monotonic time ``pid``'s exit was noted (None if it was not), and forget it."""
    return _watched.pop(pid, None)
