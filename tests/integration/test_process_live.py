"""trials.controller.process.replica with real children: exit statuses, stopping, groups, echo, memory, orphans."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from trials.controller.process.groups import group_alive, parse_proc_stat, process_start_time, reap_leftovers
from trials.controller.process.replica import check_memory_all
from trials.controller.process.spawn import start_replica
from trials.controller.trial.files import tail_lines
from trials.errors import ConfigError

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="uses /proc and prctl"),
]

SCRIPTS = Path(__file__).resolve().parent.parent / "scripts"
ENV = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}


def py(script: str, *args: str) -> list[str]:
    return [sys.executable, "-I", "-S", str(SCRIPTS / script), *args]


_started: list = []


@pytest.fixture(autouse=True)
def _stop_what_a_failed_test_left() -> object:
    yield
    while _started:
        replica = _started.pop()
        replica.stop(grace_s=0.2)
        replica.close()


def start(tmp_path: Path, argv: list[str], name: str = "workerpool0-0", **kwargs):
    replica = start_replica(
        argv,
        env=kwargs.pop("env", ENV),
        cwd=kwargs.pop("cwd", str(tmp_path)),
        stdout_path=kwargs.pop("stdout_path", str(tmp_path / f"{name}.stdout.log")),
        stderr_path=kwargs.pop("stderr_path", str(tmp_path / f"{name}.stderr.log")),
        name=name,
        **kwargs,
    )
    _started.append(replica)
    return replica


def wait_exit(replica, timeout_s: float = 5.0) -> int:
    deadline = time.monotonic() + timeout_s
    while replica.poll() is None:
        assert time.monotonic() < deadline, f"{replica} did not exit"
        time.sleep(0.005)
    return replica.exit_status


def wait_for_line(path: Path, timeout_s: float = 5.0) -> str:
    deadline = time.monotonic() + timeout_s
    while True:
        text = path.read_text() if path.exists() else ""
        if text.endswith("\n"):
            return text.splitlines()[0]
        assert time.monotonic() < deadline, f"nothing written to {path}"
        time.sleep(0.005)


def _with_this_trials() -> dict[str, str]:
    """The environment for a stand-in controller that imports the ``trials`` under test."""
    import trials

    return dict(os.environ, PYTHONPATH=str(Path(trials.__file__).resolve().parent.parent))


def running(pid: int) -> bool:
    """A zombie is dead (this machine's PID 1 may never reap orphans)."""
    try:
        return parse_proc_stat(Path(f"/proc/{pid}/stat").read_text()).state not in "ZX"
    except FileNotFoundError:
        return False


def wait_gone(pid: int, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while running(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


@pytest.mark.parametrize(("name", "status"), [("SIGSEGV", 139), ("SIGABRT", 134)])
def test_death_by_signal_is_128_plus_signal(tmp_path: Path, name: str, status: int) -> None:
    replica = start(tmp_path, py("proc_signal.py", name))
    assert wait_exit(replica) == status
    assert replica.poll().signal == getattr(signal, name)


def test_env_is_exact_and_output_is_appended_across_attempts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TRIALS_TEST_LEAK", "1")
    work = tmp_path / "work"
    work.mkdir()
    for attempt in range(2):
        env = {**ENV, "ATTEMPT": str(attempt)}
        replica = start(tmp_path, py("proc_env.py"), env=env, cwd=str(work))
        assert wait_exit(replica) == 0
        replica.close()
    first, second = [json.loads(line) for line in tail_lines(replica.stdout_path)]
    assert first["env"]["ATTEMPT"] == "0" and second["env"]["ATTEMPT"] == "1"
    assert "TRIALS_TEST_LEAK" not in second["env"]
    assert second["cwd"] == str(work)


@pytest.mark.parametrize("leader", ["exit", "wait"])
def test_grandchild_that_outlives_its_parent_is_stopped_with_the_group(
    tmp_path: Path, leader: str
) -> None:
    replica = start(tmp_path, py("proc_fork.py", leader))
    grandchild = int(wait_for_line(tmp_path / "workerpool0-0.stdout.log"))
    if leader == "exit":
        assert wait_exit(replica) == 0
        assert running(grandchild) and group_alive(replica.pgid)
    replica.stop(grace_s=0.3)
    assert not running(grandchild)
    assert not group_alive(replica.pgid)


def test_stdout_flood_with_echo_does_not_deadlock(tmp_path: Path) -> None:
    echo = io.StringIO()
    replica = start(tmp_path, py("proc_flood.py", "10"), echo=echo)
    assert wait_exit(replica, timeout_s=10) == 0
    replica.close()
    assert os.path.getsize(replica.stdout_path) > 10 * 1024 * 1024
    lines = echo.getvalue().splitlines()
    assert all(line.startswith("[workerpool0-0] ") for line in lines)
    assert lines.count("[workerpool0-0] " + "x" * 99) == 10 * 1024 * 1024 // 100
    assert "[workerpool0-0] done" in lines
    long_pieces = [line for line in lines if line.startswith("[workerpool0-0] y")]
    assert sum(len(line) - len("[workerpool0-0] ") for line in long_pieces) == 300_000


class BlockedEcho(io.StringIO):
    """An echo target that blocks every write until released: the child must not notice."""

    def __init__(self) -> None:
        super().__init__()
        self.release = threading.Event()

    def write(self, text: str) -> int:
        self.release.wait()
        return super().write(text)


def test_a_blocked_echo_never_blocks_the_child(tmp_path: Path) -> None:
    echo = BlockedEcho()
    replica = start(tmp_path, py("proc_flood.py", "2"), echo=echo)
    assert wait_exit(replica, timeout_s=5) == 0  # finished while nothing was echoed
    assert echo.getvalue() == ""
    echo.release.set()
    replica.close()
    assert echo.getvalue().count("\n") > 2 * 1024 * 1024 // 100


def test_memory_watchdog_kills_the_group_like_the_oom_killer(tmp_path: Path) -> None:
    replica = start(tmp_path, py("proc_memory.py"), memory_limit_mb=64)
    deadline = time.monotonic() + 5
    while replica.poll() is None and time.monotonic() < deadline:
        check_memory_all([replica])
        time.sleep(0.02)
    assert replica.exit_status == 137
    assert replica.oom_killed is True
    assert replica.check_memory() is True


def test_replica_dies_with_a_sigkilled_controller(tmp_path: Path) -> None:
    log = tmp_path / "replica.log"
    parent = subprocess.Popen(
        [sys.executable, str(SCRIPTS / "proc_parent.py"), str(log)],
        stdout=subprocess.PIPE,
        cwd=tmp_path,
        env=_with_this_trials(),
    )
    try:
        replica_pid = int(parent.stdout.readline())
        wait_for_line(log)
        assert running(replica_pid)
    finally:
        parent.kill()
        parent.wait()
        parent.stdout.close()
    assert wait_gone(replica_pid, timeout_s=1.0)


def test_reap_leftovers_kills_recorded_groups_and_their_orphans(tmp_path: Path) -> None:
    trial = {**ENV, "TRIALS_TRIAL_DIR": str(tmp_path)}
    live = start(tmp_path, py("proc_sleep.py"), name="workerpool0-0", env=trial)
    forked = start(tmp_path, py("proc_fork.py", "exit"), name="workerpool1-0", env=trial)
    orphan = int(wait_for_line(tmp_path / "workerpool1-0.stdout.log"))
    assert wait_exit(forked) == 0  # the leader is gone; its child still runs in the group
    other = start(tmp_path, py("proc_sleep.py"), name="workerpool2-0", env=trial)
    mismatched = {**other.record(), "start_time": other.start_time - 1}
    stranger = start(tmp_path, py("proc_sleep.py"), name="workerpool3-0")  # not of this trial
    try:
        records = [live.record(), forked.record(), mismatched, {**stranger.record(), "pid": 2**22 + 7}]
        assert reap_leftovers(records, trial_dir=str(tmp_path), grace_s=0.3) == 2
        assert wait_exit(live) == 128 + signal.SIGTERM
        assert not running(orphan)
        assert other.poll() is None  # the pid did not match the recorded process
        assert stranger.poll() is None  # its group carries nothing of the trial: a forged record
    finally:
        other.stop(grace_s=0.3)
        stranger.stop(grace_s=0.3)
    assert reap_leftovers([live.record()], trial_dir=str(tmp_path)) == 0


def test_records_carry_the_kernel_start_time(tmp_path: Path) -> None:
    replica = start(tmp_path, py("proc_sleep.py"))
    try:
        assert replica.start_time == process_start_time(replica.pid) is not None
    finally:
        replica.stop(grace_s=0.3)


def test_missing_or_unexecutable_commands_are_config_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"'no-such-trainer' was not found \(cwd '.*', PATH"):
        start(tmp_path, ["no-such-trainer", "--lr=0.1"])
    script = tmp_path / "train.sh"
    script.write_text("#!/bin/sh\n")
    with pytest.raises(ConfigError, match=r"'\./train\.sh' is not executable \(cwd '.*'\)"):
        start(tmp_path, ["./train.sh"])
    with pytest.raises(ConfigError, match="working directory '/nonexistent/dir' does not exist"):
        start(tmp_path, ["true"], cwd="/nonexistent/dir")


def test_one_log_for_both_streams_is_echoed_once(tmp_path: Path) -> None:
    echo = io.StringIO()
    log = str(tmp_path / "both.log")
    replica = start(tmp_path, py("proc_exit.py", "0"), "workerpool1-0", stdout_path=log,
                    stderr_path=log, echo=echo)
    assert wait_exit(replica) == 0
    replica.close()
    assert sorted(echo.getvalue().splitlines()) == [
        "[workerpool1-0] err line",
        "[workerpool1-0] out line",
    ]
    assert sorted(tail_lines(log)) == ["err line", "out line"]


def test_exec_format_error_is_a_config_error(tmp_path: Path) -> None:
    script = tmp_path / "train"
    script.write_bytes(b"\x00\x01 not a program")
    script.chmod(0o755)
    with pytest.raises(ConfigError, match=r"'\./train' could not be executed \(Exec format error\)"):
        start(tmp_path, ["./train"])


# --- with a cgroup: the replica is born in it (clone3 CLONE_INTO_CGROUP) under a waiting shim --------------
def _tree_or_skip(name: str):
    from trials.controller.process.tree import CgroupTree

    tree = CgroupTree.create(name)
    if tree is None:
        pytest.skip("no writable cgroup v2 here")
    return tree


def _first_line(path: Path) -> tuple[int, str]:
    pid, cgroup = wait_for_line(path).split(" ", 1)
    return int(pid), cgroup


@pytest.mark.parametrize(
    ("args", "status", "sig"),
    [(["exit", "0"], 0, None), (["exit", "3"], 3, None), (["signal", "SIGSEGV"], 139, signal.SIGSEGV),
     (["signal", "SIGABRT"], 134, signal.SIGABRT), (["signal", "SIGKILL"], 137, signal.SIGKILL)],
)
def test_in_a_cgroup_the_trainer_runs_in_it_from_the_start_and_its_status_is_the_replicas(
    tmp_path: Path, args: list[str], status: int, sig: int | None
) -> None:
    tree = _tree_or_skip("live-status")
    replica = start(tmp_path, py("proc_cgroup.py", *args), tree=tree)
    assert wait_exit(replica) == status
    assert replica.poll().signal == sig
    pid, cgroup = _first_line(Path(replica.stdout_path))
    assert tree.path.endswith(cgroup.split("::", 1)[1])  # its first instruction already ran in the cgroup
    assert pid != replica.pid  # the shim waits as the group's leader; the trainer is its child
    replica.close()


@pytest.mark.parametrize(("script", "status"), [("sleep", 143), ("trap", 143)])
def test_in_a_cgroup_a_group_sigterm_reaches_the_trainer_not_the_waiter(
    tmp_path: Path, script: str, status: int
) -> None:
    tree = _tree_or_skip("live-term")
    replica = start(tmp_path, py("proc_cgroup.py", script), tree=tree)
    pid, _ = _first_line(Path(replica.stdout_path))
    assert tree.pids() == [pid]
    # (a grace far beyond the exit's few ms, far short of the child's 60 s sleep: a lost SIGTERM ends in a
    # SIGKILL, 137; a 5 s grace was once exceeded on a 2-core machine under 2 CPU-bound loads and 4 workers)
    assert replica.stop(grace_s=20.0) == status
    assert replica.killed_at is None  # it ended within the grace: the waiter did not hold it up
    assert not running(pid)
    replica.close()


def test_in_a_cgroup_the_trainer_dies_with_a_sigkilled_controller(tmp_path: Path) -> None:
    log = tmp_path / "replica.log"
    parent = subprocess.Popen(
        [sys.executable, str(SCRIPTS / "proc_parent.py"), str(log), "cgroup"],
        stdout=subprocess.PIPE,
        cwd=tmp_path,
        env=_with_this_trials(),
    )
    try:
        line = parent.stdout.readline()
        if line.strip() == b"no-cgroup":
            pytest.skip("no writable cgroup v2 here")
        waiter_pid = int(line)
        trainer_pid = int(wait_for_line(log).split()[0])
        assert running(waiter_pid) and running(trainer_pid)
    finally:
        parent.kill()
        parent.wait()
        parent.stdout.close()
    assert wait_gone(waiter_pid, timeout_s=5.0)
    assert wait_gone(trainer_pid, timeout_s=5.0)


def test_an_exit_while_the_controller_is_busy_is_timed_at_its_sigchld_not_at_the_reap(tmp_path: Path) -> None:
    # The job loop reaps once per pass; a pass waits while a sampler computes a suggestion (seconds,
    # OSS Vizier's 12-25 s). The SIGCHLD handler notes the exit's time; the reap takes it.
    from trials.controller.loop.signals import LoopSignals

    restore = LoopSignals().install(lambda signum: None)
    try:
        started = time.monotonic()
        replica = start(tmp_path, py("proc_exit.py", "0"))
        seen = None
        while seen is None or time.monotonic() < seen + 3.0:  # busy in Python, as a sampler is
            if seen is None and os.waitid(os.P_PID, replica.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT):
                seen = time.monotonic()
        reaped = time.monotonic()
        # if it fails: was SIGCHLD blocked here, pending, or its handler replaced?
        state = {"blocked": signal.SIGCHLD in signal.pthread_sigmask(signal.SIG_BLOCK, []),
                 "pending": signal.SIGCHLD in signal.sigpending(), "handler": signal.getsignal(signal.SIGCHLD)}
        assert replica.poll().status == 0
    finally:
        restore()
    assert replica.exited_mono is not None
    assert started <= replica.exited_mono <= seen + 1.0 < reaped - 1.0, (
        started, replica.exited_mono, seen, reaped, state)


def test_memory_limit_holds_a_child_that_left_the_group_with_setsid(tmp_path: Path) -> None:
    """The limit is the replica's whole tree (its cgroup), not its process group: a grandchild that called setsid()
    and grows past it is killed, and the replica ends as an OOM (137), as a container would."""
    from trials.controller.process.tree import CgroupTree

    tree = CgroupTree.create("workerpool0-0")
    if tree is None:
        pytest.skip("no writable cgroup v2 here: the subreaper fallback (orphans.OrphanTree) tracks the tree instead")
    replica = start(tmp_path, py("proc_memory_setsid.py"), memory_limit_mb=64, tree=tree)
    deadline = time.monotonic() + 20
    while replica.poll() is None and time.monotonic() < deadline:
        check_memory_all([replica])
        time.sleep(0.02)
    assert replica.oom_killed is True, "the setsid() grandchild outgrew the limit unseen"
    assert replica.exit_status == 137
    # SIGKILL is sent to all of the tree at once, but a process that holds hundreds of MB takes a while to free them
    # and leave cgroup.procs under load: the leader's exit can come first. Nothing of the tree may be left after that.
    deadline = time.monotonic() + 30
    while tree.pids() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert tree.pids() == []  # nothing of the tree is left
    assert not replica.running()


def test_a_kernel_memory_limit_is_written_to_the_cgroup_and_its_oom_kill_read_back(tmp_path: Path) -> None:
    """Where the cgroup has a memory controller (not on this kind of machine: cgroup v1 memory), the kernel holds
    the limit: memory.max, no swap beyond it, the whole tree killed together; an oom_kill in memory.events is the
    replica's OOM. A folder with the controller's files stands in for the cgroup."""
    from trials.controller.process.tree import CgroupTree

    for name in ("memory.max", "memory.swap.max", "memory.oom.group", "memory.events"):
        (tmp_path / name).write_text("")
    tree = CgroupTree(str(tmp_path))
    assert tree.limit_memory(64 * 1024 * 1024) is True
    assert [(tmp_path / n).read_text() for n in ("memory.max", "memory.swap.max", "memory.oom.group")] == [
        str(64 * 1024 * 1024), "0", "1"]
    (tmp_path / "memory.events").write_text("low 0\nhigh 0\nmax 12\noom 1\noom_kill 1\noom_group_kill 1\n")
    assert tree.oom_kills() == 1
    assert CgroupTree(str(tmp_path / "none")).limit_memory(1) is False  # no controller: the poll, as before
