"""The stop steps every remote handle takes, written once: SIGTERM once, the grace, then SIGKILL again
every ``kill_every_s`` until the replica's exit is seen (modelled on syne-tune's ``TrialBackend``: the
public stop does the shared work and calls the backend's own part).

A handle extends :class:`StopSteps` with its own delivery: ``poll`` (its exit, once seen) and
``send_signal_group`` (how a signal reaches it: the container runtime, Slurm's signal files or
``scancel``); ``deliver_term`` where the first step differs (a Slurm replica never submitted ends there).
The host's replicas keep their own steps (``process/replica.py``): their stop also waits for the process
group and its tree to be gone, which only the host can see.
"""

from __future__ import annotations

import signal


class StopSteps:
    """``begin_stop``/``advance_stop`` of :class:`~trials.controller.backend.protocol.ReplicaHandle`."""

    kill_every_s: float = 1.0  # SIGKILL is sent again at most this often while the exit is not seen
    stop_requested_at: float | None = None
    _last_kill: float | None = None

    def poll(self) -> int | None:  # pragma: no cover - each handle's own
        raise NotImplementedError

    def send_signal_group(self, sig: int) -> None:  # pragma: no cover - each handle's own
        raise NotImplementedError

    def deliver_term(self) -> None:
        """The first step: SIGTERM, unless it exited already."""
        if self.poll() is None:
            self.send_signal_group(signal.SIGTERM)

    def begin_stop(self, now: float) -> float:
        """Ask it to stop (once); returns when the stop began."""
        if self.stop_requested_at is not None:
            return self.stop_requested_at
        self.stop_requested_at = now
        self.deliver_term()
        return now

    def advance_stop(self, now: float, grace_s: float) -> bool:
        """One non-blocking step: True once its exit is seen; SIGKILL after ``grace_s``."""
        started = self.begin_stop(now)
        if self.poll() is not None:
            return True
        if now - started >= grace_s and (self._last_kill is None or now - self._last_kill >= self.kill_every_s):
            self._last_kill = now
            self.send_signal_group(signal.SIGKILL)
        return False
