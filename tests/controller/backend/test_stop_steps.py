"""The stop steps written once (:mod:`trials.controller.backend.stopping`): the pure decision, the steps a
handle that only delivers signals takes on a fake clock, and the exit record (:mod:`..protocol`) they end with."""

from __future__ import annotations

import signal

import pytest

from trials.controller.backend.protocol import ExitHow, ReplicaExit
from trials.controller.backend.stopping import StopSteps, stop_action


@pytest.mark.parametrize(
    ("elapsed_s", "running", "action"),
    [(0.0, True, "wait"), (9.99, True, "wait"), (10.0, True, "kill"), (50.0, True, "kill"),
     (0.0, False, "done"), (50.0, False, "done")],
)
def test_stop_action(elapsed_s: float, running: bool, action: str) -> None:
    assert stop_action(elapsed_s=elapsed_s, grace_s=10.0, running=running) == action


class Deaf(StopSteps):
    """A handle whose replica ends only at the ``n_kills``-th SIGKILL (a hung node, a slow runtime)."""

    def __init__(self, n_kills: int = 1):
        self.sent: list[tuple[float, int]] = []
        self.now = 0.0
        self.n_kills = n_kills
        self._exit: ReplicaExit | None = None

    def poll(self) -> ReplicaExit | None:
        return self._exit

    def send_signal_group(self, sig: int) -> None:
        self.sent.append((self.now, sig))
        if sum(s == signal.SIGKILL for _, s in self.sent) >= self.n_kills:
            self._exit = ReplicaExit.of_returncode(-signal.SIGKILL, exited_mono=self.now)


def test_term_once_then_kill_after_the_grace_again_every_kill_every_s() -> None:
    h = Deaf(n_kills=3)
    h.now = 5.0
    assert h.begin_stop(5.0) == 5.0 and h.begin_stop(6.0) == 5.0  # once: the first stop's time
    for t in (5.0, 6.0, 14.9, 15.0, 15.5, 16.0, 16.5, 17.0):
        h.now = t
        assert not h.advance_stop(t, 10.0)
    h.now = 17.5
    assert h.advance_stop(17.5, 10.0)
    assert h.sent == [(5.0, signal.SIGTERM), (15.0, signal.SIGKILL), (16.0, signal.SIGKILL), (17.0, signal.SIGKILL)]
    assert h.stop_requested_at == 5.0 and h.killed_at == 15.0


def test_a_replica_that_exited_gets_no_signal() -> None:
    h = Deaf()
    h._exit = ReplicaExit(status=0, exited_mono=1.0)
    assert h.advance_stop(2.0, 0.0)
    assert h.sent == [] and h.stop_requested_at == 2.0 and h.killed_at is None


def test_an_exit_record_checks_itself_and_reads_a_returncode_or_a_status() -> None:
    assert ReplicaExit(status=143, exited_mono=1.0, how="signal", signal=15).how is ExitHow.SIGNAL  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="128 \\+ signal"):
        ReplicaExit(status=143, exited_mono=1.0, how=ExitHow.SIGNAL, signal=None)
    with pytest.raises(ValueError, match="status must be >= 0"):
        ReplicaExit(status=-9, exited_mono=1.0)
    term = ReplicaExit.of_returncode(-15, exited_mono=1.0)
    assert (term.status, term.how, term.signal) == (143, ExitHow.SIGNAL, 15)
    # a status-only backend: its own SIGKILL is a signal, a 143 an exit, a lost job no signal
    assert ReplicaExit.of_status(137, exited_mono=1.0, killed=True).signal == signal.SIGKILL
    assert ReplicaExit.of_status(143, exited_mono=1.0, killed=True).how is ExitHow.EXIT
    lost = ReplicaExit.of_status(137, exited_mono=1.0, lost=True, placement={"node": "n1"})
    assert (lost.how, lost.signal, dict(lost.placement)) == (ExitHow.LOST, None, {"node": "n1"})
    oom = ReplicaExit.of_status(137, exited_mono=1.0, oom=True)
    assert oom.oom_killed and oom.signal == signal.SIGKILL and f"{oom.how}" == "oom"
    with pytest.raises(TypeError):
        lost.placement["node"] = "n2"  # type: ignore[index]
