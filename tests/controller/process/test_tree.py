"""trials/controller/process/tree.py: cgroup folders of dead controllers are cleaned up, busy ones kept."""

from __future__ import annotations

import os

from trials.controller.process import tree


def _dead_pid() -> int:
    pid = 4_000_000
    while os.path.exists(f"/proc/{pid}"):
        pid += 1
    return pid


def test_stale_controller_folders_go_and_live_ones_stay(tmp_path):
    dead = tmp_path / f"trials-{_dead_pid()}"
    (dead / "3-workerpool0-0-2").mkdir(parents=True)
    busy = tmp_path / f"trials-{_dead_pid() + 1}"
    (busy / "1-workerpool0-0-0" / "still-has-a-child").mkdir(parents=True)  # rmdir refuses, as with processes
    live = tmp_path / f"trials-{os.getpid()}"
    (live / "1-workerpool0-0-0").mkdir(parents=True)
    other = tmp_path / "not-ours"
    other.mkdir()
    tree.remove_stale(str(tmp_path))
    assert not dead.exists()
    assert (busy / "1-workerpool0-0-0").exists()
    assert (live / "1-workerpool0-0-0").exists() and other.exists()


def test_own_cgroup_is_read_from_the_unified_line():
    assert tree.own_cgroup("4:memory:/x\n0::/user.slice/session-1.scope\n") == "/user.slice/session-1.scope"
    assert tree.own_cgroup("4:memory:/x\n") is None


def test_nspid_is_read_from_the_status_line():
    status = "Name:\tsleep\nNSpid:\t4242\t3\nNSsid:\t1\n"
    assert tree.parse_nspid(status) == [4242, 3]
    assert tree.parse_nspid("Name:\tsleep\n") == []
    assert tree.parse_nspid("NSpid:\tx\n") == []


def test_a_leftover_is_named_with_the_pid_its_trial_saw_and_the_namespace_init_is_not_one():
    assert tree.describe_one(4242, "sleep", [4242]) == "4242 (sleep)"
    assert tree.describe_one(4242, "sleep", [4242, 3]) == "4242 (sleep, pid 3 in the trial)"
    assert tree.describe_one(4240, "trials-shim", [4240, 1]) is None  # the replica's PID 1
    assert tree.describe_one(1, "init", [1]) == "1 (init)"  # outside any namespace of ours
