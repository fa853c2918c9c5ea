"""A running replica: its own process group, output in log files, stop TERM -> grace -> KILL.

Started by :func:`trials.controller.process.spawn.start_replica`; the process groups themselves are read
through /proc by :mod:`trials.controller.process.groups`.
"""

from __future__ import annotations

import os
import signal
import socket
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from trials.controller.process import exit_times
from trials.controller.process.echo import Echo
from trials.controller.process.groups import Now, group_alive, group_rss_bytes, kill_group, read_stat
from trials.controller.process.tree import ProcessTree

_STOP_POLL_S = 0.01



def stop_action(*, elapsed_s: float, grace_s: float, running: bool) -> str:
    """The next step of stopping a replica: ``"done"``, ``"wait"`` or ``"kill"``.

    Args:
        elapsed_s: time since SIGTERM was sent to the group.
        grace_s: how long the group may take to exit after SIGTERM.
        running: whether the leader or any other process of its group is still running.
    """
    if not running:
        return "done"
    return "kill" if elapsed_s >= grace_s else "wait"  # KILL is re-sent until the group is gone



class Replica:
    """One running replica: a process group led by ``pid``, with its output in two log files.

    Build it with :func:`start_replica`. The constructor takes the process and the signalling
    functions so tests can replay a history with a fake process and a fake clock.

    Example:
        >>> r = start_replica(["python", "train.py"], env=env, cwd=".", name="workerpool0-0",
        ...                   stdout_path="w.out", stderr_path="w.err")  # doctest: +SKIP
        >>> r.stop(grace_s=10.0)  # doctest: +SKIP
        143
    """

    def __init__(
        self,
        proc: Any,
        *,
        name: str,
        argv: Sequence[str],
        stdout_path: str,
        stderr_path: str,
        memory_limit_mb: int | None = None,
        start_time: int | None = None,
        echoes: Sequence[Echo] = (),
        kill: Callable[[int, int], None] = kill_group,
        alive: Callable[[int], bool] = group_alive,
        tree: ProcessTree | None = None,
    ):
        self._proc = proc
        self.name = name
        self.pid: int = proc.pid
        self.pgid: int = proc.pid  # start_new_session makes the replica its group's leader
        self.argv = tuple(argv)
        self.stdout_path = stdout_path
        self.stderr_path = stderr_path
        self.memory_limit_mb = memory_limit_mb
        self.start_time = start_time
        self.returncode: int | None = None
        self.exited_mono: float | None = None  # monotonic time the leader exited (see ``exit_times``)
        self.oom_killed = False
        self.stop_requested_at: float | None = None
        self.killed_at: float | None = None
        self._echoes = list(echoes)
        self._kill = kill
        self._alive = alive
        self.tree = tree  # every descendant, also those that left the group with setsid()
        # the kernel holds the tree to memory_limit_mb (the cgroup's memory.max, set before the trainer started)
        self.kernel_memory_limit = False
        self.upper_dir: str | None = None  # sandboxed: where its writes to the launch folder are
        self.placement: dict[str, Any] = {}  # on this host
        self.leftovers: list[str] = []  # "pid (name)" of descendants killed after the leader exited
        self.on_end: Callable[[Replica], None] | None = None  # once all of it is gone (its sandbox layers)
        self._stopped_running = False  # told to stop while the leader still ran

    def __repr__(self) -> str:
        return f"Replica(name={self.name!r}, pid={self.pid}, returncode={self.returncode})"

    @property
    def exit_status(self) -> int | None:
        """Vertex-style status: the exit code, or 128 + the signal number (SIGKILL -> 137)."""
        rc = self.returncode
        return None if rc is None else (rc if rc >= 0 else 128 - rc)

    @property
    def signal(self) -> int | None:
        """The number of the signal that ended the leader, or None."""
        rc = self.returncode
        return -rc if rc is not None and rc < 0 else None

    @property
    def failed_on_its_own(self) -> bool:
        """It exited non-zero without being told to stop, or was killed for going over its memory limit."""
        return self.oom_killed or (self.exit_status not in (None, 0) and not self._stopped_running)

    def poll(self) -> int | None:
        """Reap the leader if it exited; return its Vertex-style exit status, else None."""
        if self.returncode is None:
            self.returncode = self._proc.poll()
            if self.returncode is not None:
                self.exited_mono = exit_times.take(self.pid) or time.monotonic()
        return self.exit_status

    def record(self) -> dict[str, Any]:
        """What :func:`reap_leftovers` needs to find this group again from another controller."""
        return {
            "name": self.name, "pid": self.pid, "pgid": self.pgid, "start_time": self.start_time
        }

    def send_signal_group(self, sig: int) -> None:
        """Send ``sig`` to the whole process group and the rest of its tree; gone is fine."""
        self._kill(self.pgid, sig)
        if self.tree is not None:
            if sig == signal.SIGKILL:
                self.tree.kill()
            else:
                self.tree.signal(sig, skip_group=self.pgid)

    def running(self) -> bool:
        """Whether the leader, any process left in its group, or any descendant still runs."""
        if self.poll() is None or self._alive(self.pgid):
            return True
        return self.tree is not None and bool(self.tree.pids())

    def _note_leftovers(self) -> None:
        if self.tree is not None and self.returncode is not None and not self.leftovers:
            self.leftovers = self.tree.describe(self.tree.pids())

    def check_memory(self) -> bool:
        """Kill the group with SIGKILL when its summed RSS is over ``memory_limit_mb``.

        The exit then looks like the kernel OOM killer's (status 137). Cheap enough to call
        every 100 ms; with many replicas prefer :func:`check_memory_all` (one /proc scan).

        Returns:
            Whether this replica was killed for memory (by this call or an earlier one).
        """
        if self.memory_limit_mb is None or self.oom_killed:
            return self.oom_killed
        if self.kernel_memory_limit:
            return self._kernel_oom()
        return self._enforce_memory(self._tree_rss() if self.tree is not None else
                                    group_rss_bytes([self.pgid])[self.pgid])

    def _tree_rss(self) -> int:
        """Resident memory summed over the whole tree: a child that called setsid() counts too."""
        assert self.tree is not None
        page = os.sysconf("SC_PAGE_SIZE")
        return sum(stat.rss_pages for pid in self.tree.pids() if (stat := read_stat(pid)) is not None) * page

    def _kernel_oom(self) -> bool:
        """The kernel holds the tree to the limit (``memory.max``): an OOM kill it made is this replica's."""
        if self.tree is not None and self.tree.oom_kills() > 0:
            self.oom_killed = True
            self.tree.kill()  # (memory.oom.group killed them all; a kernel without it: the rest now)
        return self.oom_killed

    def _enforce_memory(self, rss_bytes: int) -> bool:
        if self.memory_limit_mb is None or rss_bytes <= self.memory_limit_mb * 1024 * 1024:
            return False
        self.oom_killed = True
        self.send_signal_group(signal.SIGKILL)
        if self.tree is not None:
            self.tree.kill()  # what left the group (setsid) goes too: the limit is the tree's
        return True

    def begin_stop(self, now: float) -> float:
        """Send SIGTERM to the group (once) and start the grace period; returns when it started."""
        if self.stop_requested_at is not None:
            return self.stop_requested_at
        self.stop_requested_at = now  # RUNNING -> STOPPING
        self._stopped_running = self.poll() is None
        self._note_leftovers()  # the leader is gone: what still runs outlived it
        if self.running():
            self.send_signal_group(signal.SIGTERM)
        return now

    def advance_stop(self, now: float, grace_s: float) -> bool:
        """One non-blocking stop step; True once the leader is reaped and its group is gone."""
        started = self.begin_stop(now)
        action = stop_action(elapsed_s=now - started, grace_s=grace_s, running=self.running())
        if action == "kill":
            if self.killed_at is None:
                self.killed_at = now  # STOPPING -> KILLED
            self.send_signal_group(signal.SIGKILL)
        return action == "done"

    def stop(
        self,
        grace_s: float,
        *,
        clock: Now = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> int:
        """SIGTERM the group, wait up to ``grace_s`` for all of it to exit, then SIGKILL it.

        Processes left in the group after the leader exits get the rest of the grace period, then
        SIGKILL: no child outlives its replica. Returns the leader's Vertex-style exit status.
        """
        self.begin_stop(clock())
        while not self.advance_stop(clock(), grace_s):
            sleep(_STOP_POLL_S)
        assert self.returncode is not None
        return self.exit_status  # type: ignore[return-value]

    def close(self, timeout_s: float = 5.0) -> None:
        """Echo what is left of the logs and stop the echo threads (call before a restart); once all of
        it is gone, remove its cgroup and call ``on_end`` (its sandbox layers go)."""
        for echo in self._echoes:
            echo.finishing.set()
        deadline = time.monotonic() + timeout_s
        for echo in self._echoes:
            echo.join(max(0.0, deadline - time.monotonic()))
        self._echoes = []
        if (self.tree is None and self.on_end is None) or self.running():
            return
        if self.tree is not None:
            self.tree.remove()
        if self.on_end is not None:
            on_end, self.on_end = self.on_end, None
            on_end(self)


def check_memory_all(replicas: Iterable[Replica]) -> list[Replica]:
    """:meth:`Replica.check_memory` for many replicas with one /proc scan; returns those killed."""
    limited = [r for r in replicas if r.memory_limit_mb is not None and not r.oom_killed]
    if not limited:
        return []
    killed = [r for r in limited if (r.kernel_memory_limit or r.tree is not None) and r.check_memory()]
    by_group = [r for r in limited if not r.kernel_memory_limit and r.tree is None]
    rss = group_rss_bytes({r.pgid for r in by_group}) if by_group else {}
    return killed + [r for r in by_group if r._enforce_memory(rss[r.pgid])]



def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (for MASTER_PORT)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port
