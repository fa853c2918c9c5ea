"""The stop steps every replica handle takes, written once: SIGTERM once, the grace, then SIGKILL again
every ``kill_every_s`` until all of the replica is gone (modelled on syne-tune's ``TrialBackend``: the
public stop does the shared work and calls the backend's own part).

A handle extends :class:`StopSteps` with its own delivery: ``send_signal_group`` (how a signal reaches
it: the process group and tree, the container runtime, a Slurm entry's signal file, a stop request to an
in-process call) and ``running`` (whether any of it still runs: by default until its exit is seen; the
host's also waits for its process group and tree to be gone); ``deliver_term`` where the first step
differs (a Slurm replica never submitted ends there, an in-process call is asked to stop).
"""

from __future__ import annotations

import signal

from trials.controller.backend.protocol import ReplicaExit


def stop_action(*, elapsed_s: float, grace_s: float, running: bool) -> str:
    """The next step of stopping a replica: ``"done"``, ``"wait"`` or ``"kill"`` (pure).

    Args:
        elapsed_s: time since its stop began (SIGTERM).
        grace_s: how long it may take to end after SIGTERM.
        running: whether any of it still runs.
    """
    if not running:
        return "done"
    return "kill" if elapsed_s >= grace_s else "wait"  # KILL is re-sent until all of it is gone


class StopSteps:
    """``begin_stop``/``advance_stop`` of :class:`~trials.controller.backend.protocol.ReplicaHandle`.

    Attributes:
        stop_requested_at: when the stop began (monotonic), or None.
        killed_at: when the stop first sent SIGKILL (the grace was over), or None.
    """

    kill_every_s: float = 1.0  # SIGKILL is sent again at most this often while some of it runs
    _stop_requested_at: float | None = None
    _killed_at: float | None = None
    _last_kill: float | None = None

    @property
    def stop_requested_at(self) -> float | None:
        return self._stop_requested_at

    @property
    def killed_at(self) -> float | None:
        return self._killed_at

    def poll(self) -> ReplicaExit | None:  # pragma: no cover - each handle's own
        raise NotImplementedError

    def send_signal_group(self, sig: int) -> None:  # pragma: no cover - each handle's own
        raise NotImplementedError

    def running(self) -> bool:
        """Whether any of it still runs: until its exit is seen, unless the handle sees more."""
        return self.poll() is None

    def deliver_term(self) -> None:
        """The first step: SIGTERM, unless all of it is gone already."""
        if self.running():
            self.send_signal_group(signal.SIGTERM)

    def begin_stop(self, now: float) -> float:
        """Ask it to stop (once); returns when the stop began."""
        if self._stop_requested_at is not None:
            return self._stop_requested_at
        self._stop_requested_at = now  # RUNNING -> STOPPING
        self.deliver_term()
        return now

    def advance_stop(self, now: float, grace_s: float) -> bool:
        """One non-blocking step: True once all of it is gone; SIGKILL after ``grace_s``."""
        started = self.begin_stop(now)
        action = stop_action(elapsed_s=now - started, grace_s=grace_s, running=self.running())
        if action == "kill" and (self._last_kill is None or now - self._last_kill >= self.kill_every_s):
            if self._killed_at is None:
                self._killed_at = now  # STOPPING -> KILLED
            self._last_kill = now
            self.send_signal_group(signal.SIGKILL)
        return action == "done"
