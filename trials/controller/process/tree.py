"""A replica's whole process tree as a cgroup v2: descendants that call setsid() are still in it."""

from __future__ import annotations

import atexit
import contextlib
import functools
import itertools
import os
import signal
from typing import Protocol

from trials import protocol

_PROC = "/proc"
_counter = itertools.count()


def _cgroup2_mount(mountinfo: str) -> str | None:
    for line in mountinfo.splitlines():
        fields = line.split(" - ", 1)
        if len(fields) == 2 and fields[1].split()[0] == "cgroup2":
            return fields[0].split()[4].replace("\\040", " ")
    return None


def own_cgroup(proc_cgroup: str) -> str | None:
    """This process's cgroup v2 path from ``/proc/self/cgroup`` (the ``0::PATH`` line)."""
    for line in proc_cgroup.splitlines():
        if line.startswith("0::"):
            return line[3:]
    return None


@functools.cache
def cgroup_parent() -> str | None:
    """A cgroup v2 folder this controller may create replica cgroups in, or None.

    ``<cgroup2 mount><our cgroup>/trials-<pid>``: created once; None when there is no cgroup v2
    hierarchy, it is not ours to write, or ``TRIALS_CGROUP=off`` (then a replica is tracked by its
    process group and the controller as subreaper: :mod:`trials.controller.process.orphans`).
    """
    if os.environ.get(protocol.ENV_CGROUP, "").strip().lower() in ("off", "0", "no", "false"):
        return None
    try:
        with open(f"{_PROC}/self/mountinfo", encoding="utf-8") as f:
            mount = _cgroup2_mount(f.read())
        with open(f"{_PROC}/self/cgroup", encoding="utf-8") as f:
            path = own_cgroup(f.read())
    except OSError:
        return None
    if mount is None or path is None:
        return None
    own = os.path.join(mount, path.lstrip("/"))
    remove_stale(own)
    folder = os.path.join(own, f"trials-{os.getpid()}")
    try:
        os.makedirs(folder, exist_ok=True)
        if not os.access(os.path.join(folder, "cgroup.procs"), os.W_OK):
            return None
    except OSError:
        return None
    # replicas' memory limits by the kernel (memory.max) where the hierarchy has the controller to give
    with contextlib.suppress(OSError), open(os.path.join(folder, "cgroup.subtree_control"), "w", encoding="ascii") as f:
        f.write("+memory")
    atexit.register(_remove, folder)
    return folder


def _remove(folder: str) -> None:
    """Remove a controller's cgroup folder and its empty replica cgroups (busy ones stay)."""
    with contextlib.suppress(OSError):
        for entry in os.scandir(folder):
            if entry.is_dir(follow_symlinks=False):
                with contextlib.suppress(OSError):
                    os.rmdir(entry.path)
    with contextlib.suppress(OSError):
        os.rmdir(folder)


def remove_stale(parent: str) -> None:
    """Remove what controllers that died without cleaning up (SIGKILL) left: ``trials-<dead pid>``."""
    try:
        entries = list(os.scandir(parent))
    except OSError:
        return
    for entry in entries:
        pid = entry.name.removeprefix("trials-")
        if entry.name.startswith("trials-") and pid.isdigit() and not os.path.exists(f"{_PROC}/{pid}"):
            _remove(entry.path)


def _comm(pid: int) -> str:
    try:
        with open(f"{_PROC}/{pid}/comm", encoding="utf-8", errors="replace") as f:
            return f.read().strip()
    except OSError:
        return "?"


def parse_nspid(status: str) -> list[int]:
    """The ``NSpid:`` line of ``/proc/<pid>/status``: the pid in each PID namespace, outermost first."""
    for line in status.splitlines():
        if line.startswith("NSpid:"):
            try:
                return [int(field) for field in line.split()[1:]]
            except ValueError:
                return []
    return []


def _ns_pids(pid: int) -> list[int]:
    try:
        with open(f"{_PROC}/{pid}/status", encoding="utf-8", errors="replace") as f:
            return parse_nspid(f.read())
    except OSError:
        return []


def describe_one(pid: int, comm: str, ns_pids: list[int]) -> str | None:
    """``pid (name)``, with the pid the trial saw when it is in the replica's PID namespace; None
    for the namespace's init (the shim, PID 1 there): it is the replica's, never a leftover."""
    if len(ns_pids) > 1 and ns_pids[-1] == 1:
        return None
    inner = f", pid {ns_pids[-1]} in the trial" if len(ns_pids) > 1 else ""
    return f"{pid} ({comm}{inner})"


def describe(pids: list[int]) -> list[str]:
    """``pid (name)`` of each process: what a warning says was killed."""
    named = (describe_one(pid, _comm(pid), _ns_pids(pid)) for pid in pids)
    return [text for text in named if text is not None]


class ProcessTree(Protocol):
    """A replica's descendants, wherever they went: :class:`CgroupTree` or ``orphans.OrphanTree``."""

    @property
    def procs_file(self) -> str | None:
        """The ``cgroup.procs`` the shim joins before exec, or None (nothing to join)."""
        ...

    def pids(self) -> list[int]: ...
    def describe(self, pids: list[int]) -> list[str]: ...
    def signal(self, sig: int, *, skip_group: int | None = None) -> list[int]: ...
    def kill(self) -> None: ...
    def remove(self) -> None: ...
    def limit_memory(self, limit_bytes: int) -> bool: ...
    def oom_kills(self) -> int: ...


def memory_events_oom_kills(path: str) -> int:
    """The ``oom_kill`` count of a cgroup's ``memory.events`` (0 when it cannot be read)."""
    try:
        with open(path, encoding="ascii") as f:
            text = f.read(4096)
    except (OSError, ValueError):
        return 0
    for line in text.splitlines():
        key, _, value = line.partition(" ")
        if key == "oom_kill" and value.strip().isdigit():
            return int(value)
    return 0


class CgroupTree:
    """A replica's cgroup: the shim starts the trainer in it (born there with clone3, or joining
    before exec on older kernels), and every process the trainer starts stays in it."""

    def __init__(self, path: str):
        self.path = path
        self.procs_file = os.path.join(path, "cgroup.procs")

    @classmethod
    def create(cls, name: str) -> CgroupTree | None:
        """A new, empty cgroup for one replica start, or None where cgroups are not available."""
        parent = cgroup_parent()
        if parent is None:
            return None
        safe = "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in name)
        path = os.path.join(parent, f"{safe}-{next(_counter)}")
        try:
            os.mkdir(path)
        except OSError:
            return None
        return cls(path)

    def pids(self) -> list[int]:
        """The processes in the tree now (zombies are already out of it)."""
        try:
            with open(self.procs_file, encoding="ascii") as f:
                return [int(line) for line in f.read().split()]
        except (OSError, ValueError):
            return []

    def describe(self, pids: list[int]) -> list[str]:
        return describe(pids)

    def signal(self, sig: int, *, skip_group: int | None = None) -> list[int]:
        """Send ``sig`` to every process of the tree (not those of ``skip_group``); returns the pids."""
        sent = []
        for pid in self.pids():
            with contextlib.suppress(OSError):
                if skip_group is not None and os.getpgid(pid) == skip_group:
                    continue
                os.kill(pid, sig)
                sent.append(pid)
        return sent

    def limit_memory(self, limit_bytes: int) -> bool:
        """Make the kernel hold the tree to ``limit_bytes`` (``memory.max``, no swap beyond it, the whole tree
        killed together on an OOM: ``memory.oom.group``); False where this cgroup has no memory controller
        (cgroup v1 machines, a parent that does not delegate it): the controller then polls the tree's RSS."""
        try:
            with open(os.path.join(self.path, "memory.max"), "w", encoding="ascii") as f:
                f.write(str(int(limit_bytes)))
        except OSError:
            return False
        for name, value in (("memory.swap.max", "0"), ("memory.oom.group", "1")):
            with contextlib.suppress(OSError), open(os.path.join(self.path, name), "w", encoding="ascii") as f:
                f.write(value)
        return True

    def oom_kills(self) -> int:
        """How many processes the kernel killed in the tree for its memory limit (``memory.events``)."""
        return memory_events_oom_kills(os.path.join(self.path, "memory.events"))

    def kill(self) -> None:
        """SIGKILL the whole tree (``cgroup.kill`` where the kernel has it: no process escapes)."""
        try:
            with open(os.path.join(self.path, "cgroup.kill"), "w", encoding="ascii") as f:
                f.write("1")
            return
        except OSError:
            pass
        self.signal(signal.SIGKILL)

    def remove(self) -> None:
        """Delete the cgroup once it is empty (a no-op while processes remain)."""
        with contextlib.suppress(OSError):
            os.rmdir(self.path)
