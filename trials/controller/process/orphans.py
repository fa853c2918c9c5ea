"""A replica's escaped descendants without a cgroup: the controller as child subreaper.

Where no cgroup v2 is ours to write (a non-root user, ``TRIALS_CGROUP=off``), a grandchild that
calls ``setsid()`` leaves its replica's process group. The controller then marks itself a child
subreaper (``PR_SET_CHILD_SUBREAPER``): such a process, once its parent exits, becomes the
controller's child instead of init's. A replica's :class:`OrphanTree` finds its own among them by
the variables the controller gave the replica (``TRIALS_TRIAL_DIR``, ``TRIALS_REPLICA``,
``TRIALS_ATTEMPT``, in ``/proc/PID/environ``; nothing new is visible to the trainer), adds their
descendants, and signals and reaps exactly those pids (``waitpid(pid)``, never ``waitpid(-1)``:
``subprocess.Popen`` owns the replica leaders). Known limit: a descendant that replaced its whole
environment (``env -i``) before its parent exited is not attributed to any trial.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import os
import signal
import sys
import time
from collections.abc import Mapping
from typing import NamedTuple

from trials import protocol
from trials.controller.process import tree as tree_mod
from trials.controller.process.deathsig import libc_prctl

_PR_SET_CHILD_SUBREAPER = 36  # linux/prctl.h
_PROC = "/proc"
_MARKS = (protocol.ENV_TRIAL_DIR, protocol.ENV_REPLICA, protocol.ENV_ATTEMPT)
_EXIT_GRACE_S = 2.0
_leaders: set[int] = set()  # replica leaders (subprocess.Popen's to reap): never attributed, never reaped


class _Stat(NamedTuple):
    state: str
    ppid: int
    pgid: int
    start_time: int


def _stat(pid: int | str) -> _Stat | None:
    try:
        with open(f"{_PROC}/{pid}/stat", "rb") as f:
            text = f.read().decode("utf-8", "replace")
        fields = text[text.rindex(")") + 2:].split()  # fields[0] is field 3 (state)
        return _Stat(fields[0], int(fields[1]), int(fields[2]), int(fields[19]))
    except (OSError, ValueError, IndexError):
        return None


def _table() -> dict[int, _Stat]:
    """Every process now (zombies included), from one /proc scan."""
    table = {}
    with contextlib.suppress(OSError):
        for entry in os.listdir(_PROC):
            if entry.isdigit() and (st := _stat(entry)) is not None:
                table[int(entry)] = st
    return table


# A process read in the middle of its execve has no environment to read for a moment: a trainer's escaped
# child that was just exec'ing `sleep` when its trainer exited went unnoticed (seen under load), so an
# empty one is read again a few times before the process counts as nobody's.
_EXEC_RETRIES = 5
_EXEC_RETRY_S = 0.01


def _environ(pid: int) -> set[bytes]:
    try:
        with open(f"{_PROC}/{pid}/environ", "rb") as f:
            return set(f.read().split(b"\0")) - {b""}
    except OSError:
        return set()


def _dead(st: _Stat | None) -> bool:
    return st is None or st.state in "ZX"


@functools.cache
def become_subreaper() -> bool:
    """Make this process a child subreaper (once); False where the kernel does not offer it."""
    prctl = libc_prctl()
    if prctl is None or prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        return False
    atexit.register(sweep_at_exit)
    return True


class OrphanTree:
    """One replica start's descendants that outlived their parents, found among the controller's children.

    Has :class:`trials.controller.process.tree.CgroupTree`'s methods, so a :class:`Replica` uses either alike.
    """

    procs_file: str | None = None  # nothing for the shim to join

    def __init__(self, marks: Mapping[str, str]):
        self.marks = {f"{k}={v}".encode() for k, v in marks.items()}
        self.leader: int | None = None
        self._seen: dict[int, int] = {}  # pid -> start time of each process found to be ours

    @classmethod
    def create(cls, env: Mapping[str, str]) -> OrphanTree | None:
        """A tree for a replica started with ``env``; None without a trial folder or a subreaper."""
        if not env.get(protocol.ENV_TRIAL_DIR) or not become_subreaper():
            return None
        return cls({k: env[k] for k in _MARKS if k in env})

    def adopt(self, leader: int) -> None:
        """The replica's leader: ``subprocess.Popen``'s child, never one of the tree's."""
        self.leader = leader
        _leaders.add(leader)

    def _ours(self, pid: int, st: _Stat) -> bool:
        if pid == self.leader or pid in _leaders:
            return False
        if self._seen.get(pid) == st.start_time:
            return True
        if _dead(st):
            return False
        env = _environ(pid)
        for _ in range(_EXEC_RETRIES):  # empty: mid-execve (its memory being replaced), or an env -i process
            if env:
                break
            time.sleep(_EXEC_RETRY_S)
            env = _environ(pid)
        return self.marks <= env

    def _scan(self) -> tuple[list[int], dict[int, _Stat]]:
        """The tree's processes (zombies included), and the table they were found in."""
        me = os.getpid()
        table = _table()
        children: dict[int, list[int]] = {}
        for pid, st in table.items():
            children.setdefault(st.ppid, []).append(pid)
        todo = [pid for pid in children.get(me, []) if self._ours(pid, table[pid])]
        found: list[int] = []
        while todo:
            pid = todo.pop()
            if pid in found or pid == self.leader or pid in _leaders:
                continue
            found.append(pid)
            self._seen[pid] = table[pid].start_time
            todo.extend(children.get(pid, []))
        return found, table

    def _reap(self, table: Mapping[int, _Stat]) -> None:
        """``waitpid`` the tree's zombies that are the controller's children: those pids only."""
        me = os.getpid()
        for pid, start in list(self._seen.items()):
            st = table.get(pid)
            if st is None or st.start_time != start:
                del self._seen[pid]  # gone (reaped, or reparented and reaped elsewhere)
            elif st.state in "ZX" and st.ppid == me:
                with contextlib.suppress(ChildProcessError):
                    os.waitpid(pid, os.WNOHANG)

    def pids(self) -> list[int]:
        """The tree's live processes now; its zombies that are ours to reap are reaped."""
        found, table = self._scan()
        self._reap(table)
        return [pid for pid in found if not _dead(table.get(pid))]

    def describe(self, pids: list[int]) -> list[str]:
        return tree_mod.describe(pids)

    def signal(self, sig: int, *, skip_group: int | None = None) -> list[int]:
        """Send ``sig`` to every live process of the tree (not those of ``skip_group``); returns the pids."""
        sent = []
        table = _table()
        for pid in self.pids():
            st = table.get(pid)
            if st is not None and skip_group is not None and st.pgid == skip_group:
                continue
            with contextlib.suppress(OSError):
                os.kill(pid, sig)
                sent.append(pid)
        return sent

    def kill(self) -> None:
        """SIGKILL every process of the tree (called again while any is left)."""
        self.signal(signal.SIGKILL)

    def remove(self) -> None:
        """Reap what is left to reap and forget the leader."""
        self.pids()
        if self.leader is not None:
            _leaders.discard(self.leader)

    def limit_memory(self, limit_bytes: int) -> bool:
        """No cgroup here: the controller polls the tree's resident memory (False)."""
        return False

    def oom_kills(self) -> int:
        return 0


def _trial_orphans() -> list[int]:
    """Every live child of the controller started for a trial, other than the replica leaders."""
    me, mark = os.getpid(), f"{protocol.ENV_TRIAL_DIR}=".encode()
    return [pid for pid, st in _table().items()
            if st.ppid == me and pid not in _leaders and not _dead(st)
            and any(item.startswith(mark) for item in _environ(pid))]


def sweep_at_exit(grace_s: float = _EXIT_GRACE_S) -> list[str]:
    """At the controller's exit: TERM, then KILL, any trial's process still its child; say which.

    A safety net behind each replica's :class:`OrphanTree`: what a killed process's own children
    become (the controller's children too) is found in the next round.
    """
    found = _trial_orphans()
    if not found:
        return []
    names = tree_mod.describe(found)
    for pid in found:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and any(not _dead(_stat(pid)) for pid in found):
        time.sleep(0.05)
    for _ in range(10):
        for pid in found:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        for pid in found:
            with contextlib.suppress(OSError):
                os.waitpid(pid, 0)  # our child, SIGKILLed: its exact pid only
        found = _trial_orphans()
        if not found:
            break
        names += tree_mod.describe(found)
    with contextlib.suppress(OSError, ValueError):
        print(f"trials: warning: {len(names)} processes of trials were still running at exit; "
              f"killed them: {', '.join(names)}", file=sys.stderr, flush=True)
    return names
