"""A running replica: its own process group, output in log files, stop TERM -> grace -> KILL.

Started by :func:`trials.controller.process.spawn.start_replica`; the process groups themselves are read
through /proc by :mod:`trials.controller.process.groups`. The stop steps are
:class:`~trials.controller.backend.stopping.StopSteps`'; a host replica adds its delivery (the group and
the rest of its tree) and what only the host sees: it runs until its group and tree are gone.
"""

from __future__ import annotations

import os
import signal
import socket
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from trials.controller.backend.protocol import ReplicaExit
from trials.controller.backend.stopping import StopSteps
from trials.controller.process import exit_times
from trials.controller.process.echo import Echo
from trials.controller.process.groups import Now, group_alive, group_rss_bytes, kill_group, read_stat
from trials.controller.process.tree import ProcessTree

_STOP_POLL_S = 0.01


class Replica(StopSteps):
    """One running replica: a process group led by ``pid``, with its output in two log files.

    Build it with :func:`start_replica`. The constructor takes the process and the signalling
    functions so tests can replay a history with a fake process and a fake clock.

    Example:
        >>> r = start_replica(["python", "train.py"], env=env, cwd=".", name="workerpool0-0",
        ...                   stdout_path="w.out", stderr_path="w.err")  # doctest: +SKIP
        >>> r.stop(grace_s=10.0)  # doctest: +SKIP
        143
    """

    kill_every_s = 0.0  # SIGKILL at every stop step after the grace: a fork bomb's new children go too

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
        self._exit: ReplicaExit | None = None
        self._echoes = list(echoes)
        self._kill = kill
        self._alive = alive
        self.tree = tree  # every descendant, also those that left the group with setsid()
        # the kernel holds the tree to memory_limit_mb (the cgroup's memory.max, set before the trainer started)
        self.kernel_memory_limit = False
        self._upper_dir: str | None = None  # sandboxed: where its writes to the launch folder are
        self.leftovers: tuple[str, ...] = ()  # "pid (name)" of descendants killed after the leader exited
        self.on_end: Callable[[Replica], None] | None = None  # once all of it is gone (its sandbox layers)
        self._stopped_running = False  # told to stop while the leader still ran

    def __repr__(self) -> str:
        return f"Replica(name={self.name!r}, pid={self.pid}, returncode={self.returncode})"

    @property
    def upper_dir(self) -> str | None:
        return self._upper_dir

    def place_upper_dir(self, path: str) -> None:
        """Where its writes to the launch folder go (its sandbox's upper layer), set by who started it."""
        self._upper_dir = path

    @property
    def exit_status(self) -> int | None:
        """Vertex-style status: the exit code, or 128 + the signal number (SIGKILL -> 137)."""
        rc = self.returncode
        return None if rc is None else (rc if rc >= 0 else 128 - rc)

    @property
    def failed_on_its_own(self) -> bool:
        """It exited non-zero without being told to stop, or was killed for going over its memory limit."""
        return self.oom_killed or (self.exit_status not in (None, 0) and not self._stopped_running)

    def poll(self) -> ReplicaExit | None:
        """Reap the leader if it exited; how it ended, else None."""
        if self.returncode is None:
            self.returncode = self._proc.poll()
            if self.returncode is None:
                return None
            self.exited_mono = self._exit_time()
            if self.kernel_memory_limit and not self.oom_killed:
                self._kernel_oom()  # an OOM kill between two memory checks is read at the exit
        if self._exit is None or self._exit.leftovers != self.leftovers or self._exit.oom_killed != self.oom_killed:
            assert self.exited_mono is not None
            self._exit = ReplicaExit.of_returncode(self.returncode, exited_mono=self.exited_mono,
                                                   oom=self.oom_killed, leftovers=self.leftovers)
        return self._exit

    def _exit_time(self) -> float:
        """When the leader exited: noted by the SIGCHLD handler, else now."""
        return exit_times.take(self.pid) or time.monotonic()

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
        """Whether the leader, any process left in its group, or any descendant still runs (the stop's end)."""
        if self.poll() is None or self._alive(self.pgid):
            return True
        return self.tree is not None and bool(self.tree.pids())

    def _note_leftovers(self) -> None:
        if self.tree is not None and self.returncode is not None and not self.leftovers:
            self.leftovers = tuple(self.tree.describe(self.tree.pids()))

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

    def deliver_term(self) -> None:
        """SIGTERM to the group and its tree, noting first what outlived a leader that exited."""
        self._stopped_running = self.poll() is None
        self._note_leftovers()  # the leader is gone: what still runs outlived it
        super().deliver_term()

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
