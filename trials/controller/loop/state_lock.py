"""The job state's short lock: a controller's end, a cancel and an extension change a job one at a time.

Each of them reads the job (its state, its waiting trials, whether a controller holds the folder's
``controller.lock``) and then writes it. Without one lock around both, a ``trials cancel`` that read
RUNNING could write CANCELLING after the controller wrote SUCCEEDED and exited (the job stayed
CANCELLING for good), and ``trials resume --max-trial-count`` could add trials just after the
controller found none left (it ended SUCCEEDED without them, and the extender said it would run them).

The rule the lock makes true: a controller takes its last look at the job (a cancel, trials added)
and ends (final state written, ``controller.lock`` released) inside one hold of this lock. So whoever
holds it and sees ``controller.lock`` held knows that controller will still see what it writes now.

The lock is an ``flock`` on ``state.lock`` in the job folder, held for milliseconds; the kernel drops
it when its holder dies. It serializes processes on one host (a journal job, or the controller of a
database job on its host).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator

STATE_LOCK_FILE = "state.lock"


@contextlib.contextmanager
def state_lock(job_dir: str) -> Iterator[None]:
    """Hold the job's state lock (blocking; it is only ever held for a few reads and writes)."""
    os.makedirs(job_dir, exist_ok=True)
    fd = os.open(os.path.join(job_dir, STATE_LOCK_FILE), os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC,
                 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing drops the lock
