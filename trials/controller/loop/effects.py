"""The job loop's effects behind small interfaces: replicas, the replica factory, the clock, signals.

The loop only ever touches processes, time and signals through these, so a test replays a
history with fake replicas, a fake clock and fake signals (``tests/controller/loop/test_runner.py``), and
production passes :func:`trials.controller.process.spawn.start_replica`, :class:`SystemClock` and
:class:`trials.controller.loop.signals.LoopSignals`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol, TextIO


class ReplicaHandle(Protocol):
    """One started replica, as :class:`trials.controller.process.replica.Replica` is."""

    name: str
    oom_killed: bool
    stop_requested_at: float | None

    def poll(self) -> int | None:
        """The Vertex-style exit status once the leader exited (128 + signal), else None."""
        ...

    def begin_stop(self, now: float) -> float:
        """SIGTERM the group once; returns when the stop began."""
        ...

    def advance_stop(self, now: float, grace_s: float) -> bool:
        """One non-blocking stop step (SIGKILL after ``grace_s``); True once the whole group is gone."""
        ...

    def send_signal_group(self, sig: int) -> None: ...

    def record(self) -> dict[str, Any]:
        """What a later controller needs to find the group again (``pids.json``)."""
        ...

    def close(self) -> None:
        """Flush the echo of its logs (after the leader exited)."""
        ...


class ReplicaFactory(Protocol):
    """Starts one replica: :func:`trials.controller.process.spawn.start_replica`'s signature."""

    def __call__(self, argv: Sequence[str], *, env: Mapping[str, str], cwd: str, stdout_path: str,
                 stderr_path: str, name: str, echo: TextIO | None = None,
                 memory_limit_mb: int | None = None) -> ReplicaHandle: ...


class Clock(Protocol):
    """Monotonic time for deadlines, wall time for records, and a short sleep."""

    def monotonic(self) -> float: ...
    def wall(self) -> float: ...
    def sleep(self, seconds: float) -> None: ...


class Signals(Protocol):
    """How the loop hears stop signals and waits: :class:`trials.controller.loop.signals.LoopSignals`."""

    def install(self, on_stop: Callable[[int], None]) -> Callable[[], None]: ...
    def wait(self, timeout: float) -> None: ...


class SystemClock:
    """The real clock."""

    def monotonic(self) -> float:
        return time.monotonic()

    def wall(self) -> float:
        return time.time()

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)
