"""Process groups seen through /proc: who is in a group, whether it lives, its memory, its start time.

A replica leads its own process group; a (pid, start time) pair names one process across pid reuse,
which is what ``pids.json`` records so a later controller can find and kill what a dead one left.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Callable, Collection, Iterable, Mapping
from typing import Any, NamedTuple

from trials import protocol

PROC = "/proc"

Now = Callable[[], float]


class ProcStat(NamedTuple):
    """The fields of ``/proc/<pid>/stat`` this module uses."""

    state: str
    pgid: int
    start_time: int  # clock ticks after boot (field 22): with the pid, identifies one process
    rss_pages: int  # field 24, the same number as VmRSS in /proc/<pid>/status


def parse_proc_stat(text: str) -> ProcStat:
    """Parse one ``/proc/<pid>/stat`` line; the command name may hold spaces and parentheses."""
    fields = text[text.rindex(")") + 2 :].split()  # fields[0] is field 3 (state)
    return ProcStat(fields[0], int(fields[2]), int(fields[19]), int(fields[21]))


def read_stat(pid: int | str) -> ProcStat | None:
    try:
        fd = os.open(f"{PROC}/{pid}/stat", os.O_RDONLY)
        try:
            data = os.read(fd, 4096)
        finally:
            os.close(fd)
        return parse_proc_stat(data.decode("utf-8", "replace"))
    except (OSError, ValueError, IndexError):
        return None


def group_members(pgids: Collection[int]) -> dict[int, list[tuple[int, ProcStat]]]:
    """Live (non-zombie) processes of each group from one /proc scan (~1 ms per 100 pids)."""
    members: dict[int, list[tuple[int, ProcStat]]] = {pgid: [] for pgid in pgids}
    for entry in os.listdir(PROC):
        if not entry.isdigit():
            continue
        stat = read_stat(entry)
        # zombies are dead: here PID 1 may never reap orphans, so they would look alive forever
        if stat is not None and stat.pgid in members and stat.state not in "ZX":
            members[stat.pgid].append((int(entry), stat))
    return members


def has_proc() -> bool:
    return os.path.isdir(f"{PROC}/self")


def process_start_time(pid: int) -> int | None:
    """Start time of ``pid`` (``/proc/<pid>/stat`` field 22), or None when it is gone or unknown.

    A recorded (pid, start time) pair names one process: a reused pid has another start time.
    """
    stat = read_stat(pid)
    return None if stat is None else stat.start_time


def group_alive(pgid: int) -> bool:
    """Whether any process of group ``pgid`` is still running (zombies do not count)."""
    try:
        os.killpg(pgid, 0)  # one syscall: usually the group is simply gone
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    if has_proc():  # something answers: make sure it is not only zombies
        return bool(group_members([pgid])[pgid])
    return True


def group_rss_bytes(pgids: Collection[int]) -> dict[int, int]:
    """Resident memory summed over the live processes of each group, from one /proc scan."""
    if not has_proc():
        return {pgid: 0 for pgid in pgids}
    page_bytes = os.sysconf("SC_PAGE_SIZE")
    members = group_members(pgids)
    return {
        pgid: sum(stat.rss_pages for _, stat in procs) * page_bytes
        for pgid, procs in members.items()
    }


def kill_group(pgid: int, sig: int) -> None:
    """Send ``sig`` to every process of group ``pgid``; a group that is already gone is fine.

    Raises:
        ValueError: ``pgid`` is 0, 1 or this process's own group (it would signal the controller).
    """
    if pgid <= 1 or pgid == os.getpgrp():
        raise ValueError(f"refusing to signal process group {pgid} (expected a replica's group)")
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, sig)


def environ_has(pid: int, items: Collection[str]) -> bool:
    """Whether one of ``items`` (``NAME=value``) is in the environment ``pid`` started with (False if unreadable)."""
    try:
        fd = os.open(f"{PROC}/{pid}/environ", os.O_RDONLY)
    except OSError:
        return False
    try:
        data = b""
        while chunk := os.read(fd, 1 << 16):
            data += chunk
            if len(data) > 1 << 22:  # a real environment is far smaller: not a replica's
                return False
    except OSError:
        return False
    finally:
        os.close(fd)
    wanted = {item.encode() for item in items}
    return any(entry in wanted for entry in data.split(b"\0"))


def is_leftover(record: Mapping[str, Any], members: Iterable[tuple[int, ProcStat]], *,
                leader_start: int | None, owned: Callable[[int], bool]) -> bool:
    """Whether a ``pids.json`` record names a group of the trial still running (pure).

    The record is hostile (the trainer can write its trial folder): it names a group only when the
    leader is the recorded process or gone (``leader_start``), a member started no earlier than the
    recorded leader, and a member is proven the trial's (``owned``: the replica environment's
    ``TRIALS_TRIAL_DIR`` of this trial, which no unrelated process carries).
    """
    try:
        pid, pgid = int(record["pid"]), int(record["pgid"])
        recorded = record.get("start_time")
        recorded = None if recorded is None else int(recorded)
    except (KeyError, TypeError, ValueError):
        return False
    if recorded is None or pid <= 1 or pgid <= 1:
        return False
    if leader_start is not None and leader_start != recorded:
        return False  # the pid was reused by another process
    later = [member for member, stat in members if stat.start_time >= recorded]
    return any(owned(member) for member in later)


def leftover_groups(records: Iterable[Mapping[str, Any]], *, trial_dir: str) -> list[int]:
    """The process groups of ``records`` (one trial's ``pids.json``) proven to be that trial's."""
    marks = {f"{protocol.ENV_TRIAL_DIR}={path}" for path in (trial_dir, os.path.realpath(trial_dir))}
    found: list[int] = []
    if not has_proc():
        return found
    for record in records:
        try:
            pid, pgid = int(record["pid"]), int(record["pgid"])
        except (KeyError, TypeError, ValueError):
            continue
        if pgid <= 1 or pgid == os.getpgrp() or pgid in found:
            continue
        members = group_members([pgid])[pgid]
        if is_leftover(record, members, leader_start=process_start_time(pid),
                       owned=lambda member: environ_has(member, marks)):
            found.append(pgid)
    return found


def reap_leftovers(
    records: Iterable[Mapping[str, Any]],
    *,
    trial_dir: str,
    grace_s: float = 2.0,
    clock: Now = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> int:
    """Kill the process groups a dead controller left behind for one trial (TERM, ``grace_s``, KILL).

    Each record is ``{"pid", "pgid", "start_time"}`` from :meth:`Replica.record`, read from the
    ``pids.json`` of ``trial_dir``. A group is killed when :func:`leftover_groups` proves it the
    trial's: its leader still is the recorded process (same start time) or gone while processes it
    started still run in its group (the usual case after the controller was SIGKILLed:
    PR_SET_PDEATHSIG took the leader, not its children), and one of them carries the trial's
    ``TRIALS_TRIAL_DIR``. A record without a start time, whose pid now names another process, or
    whose group holds nothing of the trial (a record the trainer forged) is skipped.

    Returns:
        How many groups were found alive and signalled.
    """
    return reap_groups(leftover_groups(records, trial_dir=trial_dir), grace_s=grace_s, clock=clock,
                       sleep=sleep)


def reap_groups(targets: Iterable[int], *, grace_s: float = 2.0, clock: Now = time.monotonic,
                sleep: Callable[[float], None] = time.sleep) -> int:
    """TERM each group, wait up to ``grace_s`` for them, then KILL what is left; returns how many."""
    signalled = []
    for pgid in targets:
        try:
            kill_group(pgid, signal.SIGTERM)
            signalled.append(pgid)
        except PermissionError:
            continue  # not ours: another user's process took over the group id
    deadline = clock() + grace_s
    while any(group_alive(pgid) for pgid in signalled) and clock() < deadline:
        sleep(0.05)
    deadline = clock() + 1.0  # SIGKILL is not instantaneous: give the kernel a moment
    while (alive := [pgid for pgid in signalled if group_alive(pgid)]) and clock() < deadline:
        for pgid in alive:
            kill_group(pgid, signal.SIGKILL)
        sleep(0.01)
    return len(signalled)
