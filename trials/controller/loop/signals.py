"""How the job loop sleeps and hears signals: SIGINT/SIGTERM/SIGHUP handlers, and a SIGCHLD wake-up.

SIGHUP (the terminal or the SSH session closed) is a stop request like SIGTERM: the job is
cancelled cleanly, its replicas stopped, instead of the controller dying at once (exit 129) and
leaving the job RUNNING with replicas behind.

A replica's exit wakes the loop at once (SIGCHLD → the wake-up fd → ``select``) instead of after
a poll interval, so a finished trial's slot is refilled without delay; the handler also notes when
each replica exited (``exit_times``), for a loop busy elsewhere meanwhile. Outside the main thread
(where Python cannot install handlers) the loop just sleeps.
"""

from __future__ import annotations

import os
import select
import signal
import threading
import time
from collections.abc import Callable, Sequence

from trials.controller.process import exit_times

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class LoopSignals:
    """Install with ``install(on_stop)``; ``wait(timeout)`` sleeps until a child exits or time is up.

    ``hold()`` installs the handlers before the loop exists (a controller's start: opening the job,
    taking its lock): a stop signal then is kept and given to ``on_stop`` when ``install`` is called,
    so no moment of a run leaves SIGTERM to its default action (the process killed with the job
    recorded RUNNING). ``tell(fn)`` also hands every stop signal to ``fn`` (a database outage's wait).
    """

    def __init__(self) -> None:
        self._wake_r: int | None = None
        self._on_stop: Callable[[int], None] | None = None
        self._listeners: list[Callable[[int], None]] = []
        self.held: list[int] = []  # stop signals that came while no loop listened
        self._restore: Callable[[], None] | None = None

    def _on_signal(self, signum: int) -> None:
        for listener in self._listeners:
            listener(signum)
        if self._on_stop is None:
            self.held.append(signum)
        else:
            self._on_stop(signum)

    def tell(self, listener: Callable[[int], None]) -> None:
        """Hand every stop signal, those held so far first, to ``listener`` too."""
        for signum in self.held:
            listener(signum)
        self._listeners.append(listener)

    def hold(self) -> Callable[[], None]:
        """Catch the stop signals from now on, keeping them for ``install``; returns the release."""
        if self._restore is None:
            self._restore = self._install_handlers()
        restore = self._restore

        def release() -> None:
            if self._restore is restore:
                self._restore = None
                restore()

        return release

    def install(self, on_stop: Callable[[int], None]) -> Callable[[], None]:
        """Route SIGINT/SIGTERM/SIGHUP to ``on_stop(signum)`` (held ones first) and SIGCHLD to the wake-up fd.

        Returns the function that undoes it: the previous handlers come back, or, when ``hold``
        installed them, stop signals are held again.
        """
        held = self._restore is not None
        if not held:
            self._restore = self._install_handlers()
        self._on_stop = on_stop
        pending, self.held = self.held, []
        for signum in pending:
            on_stop(signum)

        def restore() -> None:
            self._on_stop = None
            if not held and self._restore is not None:
                self._restore()
                self._restore = None

        return restore

    def _install_handlers(self) -> Callable[[], None]:
        if threading.current_thread() is not threading.main_thread():
            return lambda: None
        previous = {}
        for sig in STOP_SIGNALS:
            previous[sig] = signal.signal(sig, lambda signum, frame: self._on_signal(signum))
        r, w = os.pipe()
        os.set_blocking(r, False)
        os.set_blocking(w, False)
        self._wake_r = r
        old_wakeup = signal.set_wakeup_fd(w, warn_on_full_buffer=False)
        previous[signal.SIGCHLD] = signal.signal(signal.SIGCHLD, lambda s, f: exit_times.note_exits())

        def restore() -> None:
            signal.set_wakeup_fd(old_wakeup)
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            os.close(r)
            os.close(w)
            self._wake_r = None

        return restore

    def wait(self, timeout: float, fds: Sequence[int] = ()) -> None:
        """Until a signal, a replica's exit, one of ``fds`` readable (a suggestion's answer) or ``timeout``."""
        if self._wake_r is None:
            if fds:
                select.select(list(fds), [], [], timeout)
            else:
                time.sleep(timeout)
            return
        try:
            ready, _, _ = select.select([self._wake_r, *fds], [], [], timeout)
            if self._wake_r in ready:
                os.read(self._wake_r, 4096)
        except InterruptedError:
            pass
