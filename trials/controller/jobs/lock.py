"""One controller per job folder: its lock, who holds it, and the clean-up the lock makes safe.

A SIGKILLed controller leaves its journal write lock, maybe a torn record, and replicas still
running; whoever holds the folder's lock next repairs the journal and reaps the replicas.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import time
from typing import TYPE_CHECKING

from trials.errors import ConfigError

if TYPE_CHECKING:
    from trials.controller.jobs.registry import JobHandle


LOCK_FILE = "controller.lock"
_PROBE_WAIT_S = 0.5  # a look at the lock (lock_holder) holds it for microseconds
_PROBE_POLL_S = 0.01


class ControllerLock:
    """One controller per job folder: an flock the kernel drops when the controller dies."""

    def __init__(self, job_dir: str):
        self.path = os.path.join(job_dir, LOCK_FILE)
        self.fd: int | None = None

    def acquire(self, *, probe_wait_s: float = _PROBE_WAIT_S) -> None:
        """Take the lock, or raise naming the controller that holds it.

        ``trials cancel``, ``resume --max-trial-count`` and ``repair`` look at the lock with a shared
        flock held for microseconds (:func:`lock_holder`); a controller starting at that instant
        waits ``probe_wait_s`` for such a look to end instead of taking it for another controller.
        """
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        deadline = time.monotonic() + probe_wait_s
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                holder = proven_holder(os.fstat(fd), os.read(fd, 200))
                if time.monotonic() < deadline:
                    time.sleep(_PROBE_POLL_S)
                    os.lseek(fd, 0, os.SEEK_SET)
                    continue
                os.close(fd)
                raise ConfigError(f"the job in {os.path.dirname(self.path)} is already being run by another "
                                  f"controller ({f'pid {holder}' if holder else 'unknown pid'})") from None
        os.ftruncate(fd, 0)
        os.write(fd, f"pid {os.getpid()}".encode())
        self.fd = fd

    def release(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


def lock_holder(job_dir: str) -> int | None:
    """The pid of the controller holding the job folder's lock; 0 if held by a process it cannot
    prove (see :func:`proven_holder`); None if free."""
    path = os.path.join(job_dir, LOCK_FILE)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            return None  # nobody holds it
        except BlockingIOError:
            return proven_holder(os.fstat(fd), os.read(fd, 200))
    finally:
        os.close(fd)


def parse_flock_holders(locks: str, *, major: int, minor: int, inode: int) -> list[int]:
    """Pids holding an flock on the file ``major:minor:inode``, from ``/proc/locks`` (pure).

    A line reads ``1: FLOCK  ADVISORY  WRITE 3795 fe:00:1466769 0 EOF``; ``->`` lines are waiters.
    """
    holders = []
    for line in locks.splitlines():
        fields = line.split()
        if len(fields) < 6 or fields[1] != "FLOCK":
            continue
        where = fields[5].split(":")
        try:
            pid = int(fields[4])
            found = (int(where[0], 16), int(where[1], 16), int(where[2]))
        except (ValueError, IndexError):
            continue
        if found == (major, minor, inode) and pid > 0 and pid not in holders:
            holders.append(pid)
    return holders


def parse_claimed_pid(text: bytes) -> int | None:
    """The ``pid N`` a controller wrote into its lock file (a claim to prove, never to act on)."""
    m = re.fullmatch(rb"\s*pid (\d{1,10})\s*", text)
    return int(m.group(1)) if m else None


def _holds(pid: int, st: os.stat_result) -> bool | None:
    """Whether ``pid`` has the file ``st`` open (None: its fds cannot be read, another user's)."""
    folder = f"/proc/{pid}/fd"
    try:
        entries = os.listdir(folder)
    except PermissionError:
        return None
    except OSError:
        return False
    for entry in entries:
        with contextlib.suppress(OSError):
            fd_st = os.stat(os.path.join(folder, entry))
            if (fd_st.st_dev, fd_st.st_ino) == (st.st_dev, st.st_ino):
                return True
    return False


def proven_holder(st: os.stat_result, text: bytes) -> int:
    """The pid holding the flock on the lock file ``st``, proven; 0 when it cannot be proven.

    The file's text is writable by whoever can reach the job folder (a trainer without the sandbox,
    or through ``/proc/<controller>/fd`` before there was a PID namespace), so its ``pid N`` is only
    a claim: the holder is the kernel's (``/proc/locks``, the flock on this device and inode) and
    must have the file open; without ``/proc/locks`` the claimed pid counts only when it has the
    file open. An empty file is 0 as before (the controller has not written its pid yet); anything
    unproven is 0 too ("held, pid unknown"): nothing is signalled.
    """
    if not text.strip():
        return 0  # held, its pid not written yet: the controller is still starting
    try:
        with open("/proc/locks", encoding="ascii", errors="replace") as f:
            locks = f.read()
    except OSError:
        locks = ""
    kernel = parse_flock_holders(locks, major=os.major(st.st_dev), minor=os.minor(st.st_dev),
                                 inode=st.st_ino)
    for pid in kernel:
        if _holds(pid, st) is not False:
            return pid
    claimed = parse_claimed_pid(text)
    if not kernel and claimed is not None and _holds(claimed, st) is True:
        return claimed  # no /proc/locks entry for this file system (overlayfs, NFS): the fd proves it
    return 0


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
    """Kill replicas a SIGKILLed controller left behind (recorded in each trial's pids.json).

    A record is the trainer's to forge (it can write its trial folder): only groups proven to be
    that trial's are signalled (:func:`process.groups.leftover_groups`).
    """
    from trials.controller.process.groups import leftover_groups, reap_groups
    from trials.controller.trial.files import read_pids

    targets: list[int] = []
    for t in h.store.running_trials():
        trial_dir = os.path.join(h.job_dir, str(t.number + 1))
        targets += [pgid for pgid in leftover_groups(read_pids(trial_dir), trial_dir=trial_dir)
                    if pgid not in targets]
    return reap_groups(targets) if targets else 0
