"""How the job loop hears signals and waits inside a caller's process (``trials.tune``): it does neither."""

from __future__ import annotations

import contextlib
import select
from collections.abc import Callable, Sequence


class CallerSignals:
    """Installs no handler and never waits.

    ``trials.tune`` runs inside a program that owns its signals, maybe not in its main thread (where
    Python cannot install handlers anyway): Ctrl-C stays the caller's ``KeyboardInterrupt``. And there
    is nothing to wait for between the loop's passes: an in-process replica's ``poll`` returns when its
    objective reported its next step or ended — but for a suggestion being made ahead of time (``fds``:
    its answer pipe), which is waited for, not spun on.
    """

    def install(self, on_stop: Callable[[int], None]) -> Callable[[], None]:
        return lambda: None

    def wait(self, timeout: float, fds: Sequence[int] = ()) -> None:
        if fds:
            with contextlib.suppress(InterruptedError):
                select.select(list(fds), [], [], timeout)
