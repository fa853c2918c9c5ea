"""One controller per job folder: its lock, who holds it, and the clean-up the lock makes safe.

A SIGKILLed controller leaves its journal write lock, maybe a torn record, and replicas still
running; whoever holds the folder's lock next repairs the journal and reaps the replicas.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
from typing import TYPE_CHECKING

from trials import protocol
from trials.errors import ConfigError

if TYPE_CHECKING:
    from trials.controller.jobs import JobHandle


LOCK_FILE = "controller.lock"


class ControllerLock:
    """One controller per job folder: an flock the kernel drops when the controller dies."""

    def __init__(self, job_dir: str):
        self.path = os.path.join(job_dir, LOCK_FILE)
        self.fd: int | None = None

    def acquire(self) -> None:
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 200).decode(errors="replace").strip()
            os.close(fd)
            raise ConfigError(f"the job in {os.path.dirname(self.path)} is already being run "
                              f"by another controller ({holder or 'unknown pid'})") from None
        os.ftruncate(fd, 0)
        os.write(fd, f"pid {os.getpid()}".encode())
        self.fd = fd

    def release(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


def lock_holder(job_dir: str) -> int | None:
    """The pid of the controller holding the job folder's lock; 0 if held, pid not yet written; None if free."""
    path = os.path.join(job_dir, LOCK_FILE)
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            return None  # nobody holds it
        except BlockingIOError:
            text = os.read(fd, 200).decode(errors="replace")
            m = re.search(r"pid (\d+)", text)
            return int(m.group(1)) if m else 0  # held, its pid not written yet
    finally:
        os.close(fd)


def repair_journal(url: str) -> None:
    """Undo what a SIGKILLed controller can leave in a journal file: its write lock, a torn record.

    Optuna waits 30 s before breaking a journal lock file whose owner died, and a record cut short
    by the kill would glue itself to the next one. Call with the controller lock held: then no
    other controller is alive, and the remaining writers (``trials cancel``) hold the journal lock
    for milliseconds.
    """
    if url.startswith("journal:"):
        path = url[len("journal:"):]
    elif url.endswith((".log", ".journal")) and "://" not in url:
        path = url
    else:
        return
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path + ".lock")
    try:
        with open(path, "rb+") as f:
            size = f.seek(0, os.SEEK_END)
            if size == 0 or (f.seek(size - 1), f.read(1))[1] == b"\n":
                return
            start = max(0, size - (1 << 20))
            f.seek(start)
            tail = f.read()
            cut = tail.rfind(b"\n")
            f.truncate(start + cut + 1 if cut >= 0 else (0 if start == 0 else size))
    except FileNotFoundError:
        return


def reap_job_leftovers(h: JobHandle) -> int:
    """Kill replicas a SIGKILLed controller left behind (recorded in each trial's pids.json)."""
    from trials.controller.proc_groups import reap_leftovers

    records = []
    for t in h.store.running_trials():
        path = os.path.join(h.job_dir, str(t.number + 1), protocol.PIDS_FILE)
        try:
            with open(path, encoding="utf-8") as f:
                records.extend(json.load(f))
        except (OSError, ValueError):
            continue
    return reap_leftovers(records) if records else 0
