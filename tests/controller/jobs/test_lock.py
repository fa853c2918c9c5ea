"""trials/controller/jobs/lock.py: the lock's holder is the kernel's, never the file's word."""

from __future__ import annotations

import os
import subprocess
import sys

from trials.controller.jobs import lock as job_lock
from trials.controller.jobs.lock import ControllerLock, lock_holder, parse_claimed_pid, parse_flock_holders

LOCKS = """\
1: POSIX  ADVISORY  WRITE 3795 fe:00:1466769 0 EOF
2: FLOCK  ADVISORY  WRITE 4242 fe:00:77 0 EOF
2: -> FLOCK  ADVISORY  WRITE 5555 fe:00:77 0 EOF
3: FLOCK  ADVISORY  READ 4343 fe:01:77 0 EOF
4: FLOCK  ADVISORY  WRITE 4444 fe:00:78 0 EOF
junk
"""


def test_flock_holders_match_device_and_inode_and_skip_waiters_and_posix_locks():
    assert parse_flock_holders(LOCKS, major=0xFE, minor=0, inode=77) == [4242]
    assert parse_flock_holders(LOCKS, major=0xFE, minor=1, inode=77) == [4343]
    assert parse_flock_holders(LOCKS, major=0xFE, minor=0, inode=1466769) == []  # a POSIX lock
    assert parse_flock_holders("", major=1, minor=2, inode=3) == []


def test_the_claimed_pid_is_exactly_what_a_controller_writes():
    assert parse_claimed_pid(b"pid 4242") == 4242
    assert parse_claimed_pid(b"pid 4242\n") == 4242
    assert parse_claimed_pid(b"") is None
    assert parse_claimed_pid(b"pid 1 pid 2") is None
    assert parse_claimed_pid(b"pid 99999999999") is None


def test_a_forged_pid_in_a_held_lock_is_replaced_by_the_holder(tmp_path):
    lock = ControllerLock(str(tmp_path))
    lock.acquire()
    try:
        assert lock_holder(str(tmp_path)) == os.getpid()
        victim = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        try:
            with open(lock.path, "w") as f:  # what a trainer wrote through /proc/<pid>/fd/<n>
                f.write(f"pid {victim.pid}")
            assert lock_holder(str(tmp_path)) == os.getpid()
        finally:
            victim.kill()
            victim.wait()
    finally:
        lock.release()
    assert lock_holder(str(tmp_path)) is None


def test_without_a_kernel_entry_a_claim_counts_only_with_the_file_open(tmp_path, monkeypatch):
    path = tmp_path / "controller.lock"
    path.write_text("")
    st = os.stat(path)
    real_open = open

    def no_locks(file, *args, **kwargs):  # a file system /proc/locks does not name (overlayfs)
        if file == "/proc/locks":
            raise FileNotFoundError(file)
        return real_open(file, *args, **kwargs)

    monkeypatch.setattr("builtins.open", no_locks)
    assert job_lock.proven_holder(st, b"") == 0  # not written yet
    assert job_lock.proven_holder(st, f"pid {os.getppid()}".encode()) == 0  # does not hold it
    with real_open(path) as held:
        assert held.fileno() >= 0
        assert job_lock.proven_holder(st, f"pid {os.getpid()}".encode()) == os.getpid()


def test_a_controller_starting_during_a_look_at_its_lock_waits_for_the_look_to_end(tmp_path):
    # lock_holder's look holds a shared flock for an instant; a controller starting then took it
    # for another controller ("already being run by another controller") and exited 2.
    import fcntl
    import threading

    (tmp_path / job_lock.LOCK_FILE).write_text("")
    look = os.open(tmp_path / job_lock.LOCK_FILE, os.O_RDONLY)
    fcntl.flock(look, fcntl.LOCK_SH | fcntl.LOCK_NB)
    threading.Timer(0.05, os.close, (look,)).start()
    lock = ControllerLock(str(tmp_path))
    lock.acquire(probe_wait_s=30.0)
    try:
        assert lock_holder(str(tmp_path)) == os.getpid()
    finally:
        lock.release()


def test_a_lock_held_by_another_controller_is_still_refused(tmp_path):
    import pytest

    from trials.errors import ConfigError

    first = ControllerLock(str(tmp_path))
    first.acquire()
    try:
        with pytest.raises(ConfigError, match="already being run by another controller"):
            ControllerLock(str(tmp_path)).acquire(probe_wait_s=0.05)
    finally:
        first.release()
