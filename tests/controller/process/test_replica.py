"""trials.controller.process.replica without child processes: replayed stop histories on a fake clock, pure helpers."""

from __future__ import annotations

import os
import signal
import socket
from pathlib import Path

import pytest

from trials.controller.process.groups import (
    ProcStat,
    is_leftover,
    kill_group,
    parse_proc_stat,
    process_start_time,
    reap_leftovers,
)
from trials.controller.process.replica import Replica, free_port
from trials.controller.process.spawn import start_replica
from trials.controller.trial.files import tail_lines
from trials.errors import ConfigError

TERM, KILL = signal.SIGTERM, signal.SIGKILL


class FakeProc:
    pid = 4242

    def __init__(self, returncode: int | None = None):
        self.returncode = returncode

    def poll(self) -> int | None:
        return self.returncode


class World:
    """One replayed process group on a fake clock.

    The leader exits on SIGTERM when ``honours_term``; ``survivor`` is a child left in the group
    that ignores SIGTERM. SIGKILL ends everything.
    """

    def __init__(self, *, honours_term: bool = True, survivor: bool = False, rc: int | None = None):
        self.now = 0.0
        self.signals: list[tuple[float, int, int]] = []
        self.proc = FakeProc(rc)
        self.honours_term = honours_term
        self.survivor = survivor

    def kill(self, pgid: int, sig: int) -> None:
        self.signals.append((round(self.now, 3), pgid, sig))
        if sig == KILL:
            self.survivor = False
            self._exit(-KILL)
        elif sig == TERM and self.honours_term:
            self._exit(-TERM)

    def _exit(self, rc: int) -> None:
        if self.proc.returncode is None:
            self.proc.returncode = rc

    def alive(self, pgid: int) -> bool:
        assert pgid == FakeProc.pid
        return self.proc.returncode is None or self.survivor

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds

    def replica(self) -> Replica:
        return Replica(
            self.proc,
            name="workerpool0-0",
            argv=["train"],
            stdout_path="out.log",
            stderr_path="err.log",
            kill=self.kill,
            alive=self.alive,
        )


@pytest.mark.parametrize(
    ("returncode", "status", "sig"),
    [(0, 0, None), (1, 1, None), (3, 3, None), (-9, 137, 9), (-11, 139, 11), (-6, 134, 6),
     (-15, 143, 15)],
)
def test_exit_status_is_vertex_style(returncode: int, status: int, sig: int | None) -> None:
    replica = World(rc=returncode).replica()
    ended = replica.poll()
    assert ended is not None and ended.status == status == replica.exit_status
    assert ended.signal == sig and ended.how == ("exit" if sig is None else "signal")


class OomTree:
    """A cgroup whose kernel limit killed the trainer (``memory.events``), then nothing of it runs."""

    def __init__(self) -> None:
        self.killed = 0

    def pids(self) -> list[int]:
        return []

    def oom_kills(self) -> int:
        return 1

    def kill(self) -> None:
        self.killed += 1


def test_a_kernel_oom_kill_between_two_memory_checks_is_read_at_the_exit() -> None:
    tree = OomTree()
    replica = Replica(FakeProc(-KILL), name="workerpool0-0", argv=["train"], stdout_path="out.log",
                      stderr_path="err.log", memory_limit_mb=64, tree=tree)  # type: ignore[arg-type]
    replica.kernel_memory_limit = True
    ended = replica.poll()  # exited before the loop's memory check saw it run
    assert ended is not None and (ended.status, ended.how, ended.signal) == (137, "oom", KILL)
    assert replica.failed_on_its_own and tree.killed == 1


def test_running_replica_has_no_status() -> None:
    replica = World().replica()
    assert replica.poll() is None and replica.exit_status is None


def test_stop_of_a_cooperative_replica_sends_only_term() -> None:
    world = World()
    assert world.replica().stop(10.0, clock=world.clock, sleep=world.sleep) == 143
    assert world.signals == [(0.0, 4242, TERM)]
    assert world.now < 0.1


def test_stop_kills_a_replica_ignoring_term_after_the_grace() -> None:
    world = World(honours_term=False)
    replica = world.replica()
    assert replica.stop(10.0, clock=world.clock, sleep=world.sleep) == 137
    (t_term, _, first), (t_kill, _, second) = world.signals
    assert (t_term, first, second) == (0.0, TERM, KILL)
    assert 10.0 <= t_kill < 10.05  # the first poll at or after the grace
    assert replica.killed_at == pytest.approx(t_kill, abs=0.001)


def test_a_survivor_of_the_leader_is_killed_when_the_grace_ends() -> None:
    world = World(survivor=True)
    assert world.replica().stop(2.0, clock=world.clock, sleep=world.sleep) == 143
    assert [sig for _, _, sig in world.signals] == [TERM, KILL]
    assert 2.0 <= world.signals[1][0] < 2.05
    assert not world.alive(4242)


def test_stop_of_an_exited_replica_with_an_empty_group_sends_nothing() -> None:
    world = World(rc=0)
    assert world.replica().stop(10.0, clock=world.clock, sleep=world.sleep) == 0
    assert world.signals == []


def test_advance_stop_drives_many_replicas_without_blocking() -> None:
    quick, stubborn = World(), World(honours_term=False)
    a, b = quick.replica(), stubborn.replica()
    a.begin_stop(0.0)
    b.begin_stop(0.0)
    b.begin_stop(1.0)  # a second request does not restart the grace or resend TERM
    assert a.advance_stop(0.5, grace_s=5.0) is True
    assert b.advance_stop(4.9, grace_s=5.0) is False
    assert [sig for _, _, sig in stubborn.signals] == [TERM]
    assert b.advance_stop(5.0, grace_s=5.0) is False  # KILL sent now, reaped on the next step
    assert [sig for _, _, sig in stubborn.signals] == [TERM, KILL]
    assert b.advance_stop(5.1, grace_s=5.0) is True
    assert (a.exit_status, b.exit_status) == (143, 137)


def test_advance_stop_begins_the_stop_itself() -> None:
    world = World(honours_term=False)
    replica = world.replica()
    assert replica.advance_stop(7.0, grace_s=1.0) is False
    assert replica.stop_requested_at == 7.0
    assert [sig for _, _, sig in world.signals] == [TERM]


def test_record_names_the_group() -> None:
    replica = World().replica()
    assert replica.record() == {
        "name": "workerpool0-0", "pid": 4242, "pgid": 4242, "start_time": None
    }
    assert replica.check_memory() is False  # no limit: no /proc scan, never killed


def test_parse_proc_stat_survives_parentheses_in_the_command_name() -> None:
    line = "77 (a) (b c) S 1 77 77 0 -1 4194560 5 0 0 0 1 2 0 0 20 0 1 0 123456 1000 321 rest"
    assert parse_proc_stat(line) == ("S", 77, 123456, 321)


@pytest.mark.skipif(not os.path.exists("/proc/self/stat"), reason="needs /proc")
def test_process_start_time_identifies_a_live_process() -> None:
    assert isinstance(process_start_time(os.getpid()), int)
    assert process_start_time(os.getpid()) == process_start_time(os.getpid())
    assert process_start_time(_impossible_pid()) is None


def _impossible_pid() -> int:
    try:
        return int(Path("/proc/sys/kernel/pid_max").read_text()) + 1
    except OSError:
        return 2**22 + 1


@pytest.mark.parametrize("pgid", [0, 1, os.getpgrp()])
def test_kill_group_refuses_to_signal_the_controller(pgid: int) -> None:
    with pytest.raises(ValueError, match=f"refusing to signal process group {pgid}"):
        kill_group(pgid, 0)


def test_kill_group_of_a_gone_group_is_silent() -> None:
    kill_group(_impossible_pid(), TERM)


def test_reap_leftovers_skips_unverifiable_and_gone_records() -> None:
    gone = _impossible_pid()
    records = [
        {"pid": 4242, "pgid": 4242, "start_time": None},
        {"pid": os.getpid(), "pgid": os.getpgrp(), "start_time": process_start_time(os.getpid())},
        {"pid": gone, "pgid": gone, "start_time": 1},
    ]
    assert reap_leftovers(records, trial_dir="/nonexistent/trial", grace_s=0.0) == 0


def test_tail_lines(tmp_path: Path) -> None:
    log = tmp_path / "err.log"
    assert tail_lines(str(log)) == []
    log.write_bytes(b"one\ntwo\r\nthree")
    assert tail_lines(str(log)) == ["one", "two", "three"]
    assert tail_lines(str(log), n=2) == ["two", "three"]
    assert tail_lines(str(log), n=0) == []
    log.write_bytes(b"".join(b"line %d\n" % i for i in range(10_000)) + b"bad \xff byte\n")
    assert tail_lines(str(log), n=3, max_bytes=100) == ["line 9998", "line 9999", "bad \ufffd byte"]
    log.write_bytes(b"z" * 1000)  # one line longer than the window: keep its end
    assert tail_lines(str(log), max_bytes=10) == ["z" * 10]


def test_free_port_can_be_bound() -> None:
    port = free_port()
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))


@pytest.mark.parametrize(
    ("argv", "limit", "message"),
    [([], None, "expected a command, got an empty argv"),
     (["train"], 0, "memory limit must be > 0 MB, got 0")],
)
def test_start_replica_validates_before_spawning(
    tmp_path: Path, argv: list[str], limit: int | None, message: str
) -> None:
    with pytest.raises(ConfigError, match=f"replica workerpool0-0: {message}"):
        start_replica(argv, env={}, cwd=str(tmp_path), stdout_path=str(tmp_path / "o"),
                      stderr_path=str(tmp_path / "e"), name="workerpool0-0",
                      memory_limit_mb=limit)
    assert not (tmp_path / "o").exists()


def _stat(start_time: int) -> ProcStat:
    return ProcStat("S", 4242, start_time, 1)


def test_a_pids_record_names_a_group_only_with_a_proven_member_of_the_trial() -> None:
    record = {"pid": 4242, "pgid": 4242, "start_time": 100}
    members = [(4242, _stat(100)), (4250, _stat(120))]
    mine = {4242, 4250}.__contains__
    assert is_leftover(record, members, leader_start=100, owned=mine)
    assert is_leftover(record, [(4250, _stat(120))], leader_start=None, owned=mine)  # leader gone
    assert not is_leftover(record, members, leader_start=99, owned=mine)  # the pid was reused
    assert not is_leftover(record, members, leader_start=None, owned=lambda pid: False)  # forged
    assert not is_leftover(record, [(4250, _stat(50))], leader_start=None, owned=mine)  # older
    assert not is_leftover({**record, "start_time": None}, members, leader_start=100, owned=mine)
    assert not is_leftover({"pid": "x", "pgid": 1}, members, leader_start=100, owned=mine)
    assert not is_leftover({**record, "pgid": 1}, members, leader_start=100, owned=mine)
