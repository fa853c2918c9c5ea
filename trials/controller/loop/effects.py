"""The job loop's clock and signals behind small interfaces (its replicas: :mod:`.backend`).

The loop only ever touches processes, time and signals through these and its replica backend, so
a test replays a history with a scripted backend, a fake clock and fake signals
(``tests/controller/loop/test_runner.py``), and production passes :class:`SystemClock` and
:class:`trials.controller.loop.signals.LoopSignals`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from trials.study.ahead import Suggestion


class Clock(Protocol):
    """Monotonic time for deadlines, wall time for records, and a short sleep."""

    def monotonic(self) -> float: ...
    def wall(self) -> float: ...
    def sleep(self, seconds: float) -> None: ...


class Signals(Protocol):
    """How the loop hears stop signals and waits: :class:`trials.controller.loop.signals.LoopSignals`."""

    def install(self, on_stop: Callable[[int], None]) -> Callable[[], None]: ...
    def wait(self, timeout: float, fds: Sequence[int] = ()) -> None: ...


class Suggestions(Protocol):
    """Parameters suggested ahead of time: :class:`trials.study.ahead.AheadSuggester`."""

    def prefetch(self, *, needed: bool = False) -> None: ...
    def take(self) -> Suggestion | None: ...
    def give_back(self, suggestion: Suggestion) -> None: ...
    def pump(self) -> None: ...
    def fileno(self) -> int | None: ...
    def close(self) -> None: ...
    def stats(self) -> dict[str, float]: ...


class SystemClock:
    """The real clock."""

    def monotonic(self) -> float:
        return time.monotonic()

    def wall(self) -> float:
        return time.time()

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)
