"""Trial replica processes: own process group, output to log files, stop TERM -> grace -> KILL."""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from typing import Any, NamedTuple, TextIO

from trials import files
from trials.controller import shim
from trials.controller.tree import ProcessTree
from trials.errors import ConfigError
from trials.printable import printable

_PR_SET_PDEATHSIG = 1  # linux/prctl.h
_PROC = "/proc"
_ECHO_CHUNK_BYTES = 1 << 16
_ECHO_MAX_LINE_BYTES = 1 << 16  # a longer line (or a flood without newlines) is echoed in pieces
_ECHO_IDLE_S = 0.05
_ECHO_LOCK = threading.Lock()  # one lock for all echo writers so prefixed lines never interleave
_STOP_POLL_S = 0.01

Clock = Callable[[], float]


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


def _read_stat(pid: int | str) -> ProcStat | None:
    try:
        fd = os.open(f"{_PROC}/{pid}/stat", os.O_RDONLY)
        try:
            data = os.read(fd, 4096)
        finally:
            os.close(fd)
        return parse_proc_stat(data.decode("utf-8", "replace"))
    except (OSError, ValueError, IndexError):
        return None


def _group_members(pgids: Collection[int]) -> dict[int, list[tuple[int, ProcStat]]]:
    """Live (non-zombie) processes of each group from one /proc scan (~1 ms per 100 pids)."""
    members: dict[int, list[tuple[int, ProcStat]]] = {pgid: [] for pgid in pgids}
    for entry in os.listdir(_PROC):
        if not entry.isdigit():
            continue
        stat = _read_stat(entry)
        # zombies are dead: here PID 1 may never reap orphans, so they would look alive forever
        if stat is not None and stat.pgid in members and stat.state not in "ZX":
            members[stat.pgid].append((int(entry), stat))
    return members


def _has_proc() -> bool:
    return os.path.isdir(f"{_PROC}/self")


def process_start_time(pid: int) -> int | None:
    """Start time of ``pid`` (``/proc/<pid>/stat`` field 22), or None when it is gone or unknown.

    A recorded (pid, start time) pair names one process: a reused pid has another start time.
    """
    stat = _read_stat(pid)
    return None if stat is None else stat.start_time


def group_alive(pgid: int) -> bool:
    """Whether any process of group ``pgid`` is still running (zombies do not count)."""
    try:
        os.killpg(pgid, 0)  # one syscall: usually the group is simply gone
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    if _has_proc():  # something answers: make sure it is not only zombies
        return bool(_group_members([pgid])[pgid])
    return True


def group_rss_bytes(pgids: Collection[int]) -> dict[int, int]:
    """Resident memory summed over the live processes of each group, from one /proc scan."""
    if not _has_proc():
        return {pgid: 0 for pgid in pgids}
    page_bytes = os.sysconf("SC_PAGE_SIZE")
    members = _group_members(pgids)
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


def stop_action(*, elapsed_s: float, grace_s: float, running: bool) -> str:
    """The next step of stopping a replica: ``"done"``, ``"wait"`` or ``"kill"``.

    Args:
        elapsed_s: time since SIGTERM was sent to the group.
        grace_s: how long the group may take to exit after SIGTERM.
        running: whether the leader or any other process of its group is still running.
    """
    if not running:
        return "done"
    return "kill" if elapsed_s >= grace_s else "wait"  # KILL is re-sent until the group is gone


@functools.cache
def _prctl() -> Any:
    if not sys.platform.startswith("linux"):
        return None
    try:
        import ctypes

        fn = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
    fn.restype = ctypes.c_int
    return fn


def _die_with_parent(parent_pid: int, prctl: Any) -> Callable[[], None]:
    kill = int(signal.SIGKILL)

    def setup() -> None:
        # Runs in the child between fork and exec: no imports, no locks, no allocation worth naming.
        prctl(_PR_SET_PDEATHSIG, kill, 0, 0, 0)
        if os.getppid() != parent_pid:  # the controller died before prctl took effect
            os.kill(os.getpid(), kill)

    return setup


class _Echo(threading.Thread):
    """Follows a log file from an offset and copies each new line to ``out`` with a prefix, escaped.

    The replica writes straight to the file, so a slow or blocked ``out`` never blocks it.
    """

    def __init__(self, path: str, offset: int, prefix: str, out: TextIO):
        super().__init__(name=f"echo {prefix.strip()} {os.path.basename(path)}", daemon=True)
        self._path, self._offset, self._prefix, self._out = path, offset, prefix, out
        self.finishing = threading.Event()

    def run(self) -> None:
        try:
            with os.fdopen(files.open_regular(self._path, os.O_RDONLY), "rb") as log:
                log.seek(self._offset)
                pending = b""
                while True:
                    finishing = self.finishing.is_set()  # checked before reading: nothing lost
                    chunk = log.read(_ECHO_CHUNK_BYTES)
                    if chunk:
                        pending = self._emit(pending + chunk)
                    elif finishing:
                        break
                    else:
                        self.finishing.wait(_ECHO_IDLE_S)
                if pending:
                    self._write([pending])
        except (OSError, ValueError):
            return  # echo target closed or log removed: the log file still holds everything

    def _emit(self, data: bytes) -> bytes:
        lines = data.split(b"\n")
        pending = lines.pop()
        while len(pending) > _ECHO_MAX_LINE_BYTES:
            lines.append(pending[:_ECHO_MAX_LINE_BYTES])
            pending = pending[_ECHO_MAX_LINE_BYTES:]
        if lines:
            self._write(lines)
        return pending

    def _write(self, lines: list[bytes]) -> None:
        text = "".join(self._prefix + _decode_line(line) + "\n" for line in lines)
        with _ECHO_LOCK:
            self._out.write(text)
            self._out.flush()


def _decode_line(line: bytes) -> str:
    r"""One line of a trainer's output as ``--echo`` shows it: safe on a terminal, tabs kept.

    ESC sequences, BEL, NUL and other control characters are escaped (``\x1b[2J``); invalid UTF-8
    becomes U+FFFD. A carriage return inside the line (a progress bar redrawing itself) shows what
    a terminal would end with: the text after the last one.
    """
    text = line.decode("utf-8", "replace").rstrip("\r")
    if "\r" in text:
        text = next((part for part in reversed(text.split("\r")) if part), "")
    return printable(text, keep="\t")


class Replica:
    """One running replica: a process group led by ``pid``, with its output in two log files.

    Build it with :func:`start_replica`. The constructor takes the process and the signalling
    functions so tests can replay a history with a fake process and a fake clock.

    Example:
        >>> r = start_replica(["python", "train.py"], env=env, cwd=".", name="workerpool0-0",
        ...                   stdout_path="w.out", stderr_path="w.err")  # doctest: +SKIP
        >>> r.stop(grace_s=10.0)  # doctest: +SKIP
        143
    """

    def __init__(
        self,
        proc: Any,
        *,
        name: str,
        argv: Sequence[str],
        stdout_path: str,
        stderr_path: str,
        memory_limit_mb: int | None = None,
        start_time: int | None = None,
        echoes: Sequence[_Echo] = (),
        kill: Callable[[int, int], None] = kill_group,
        alive: Callable[[int], bool] = group_alive,
        tree: ProcessTree | None = None,
    ):
        self._proc = proc
        self.name = name
        self.pid: int = proc.pid
        self.pgid: int = proc.pid  # start_new_session makes the replica its group's leader
        self.argv = tuple(argv)
        self.stdout_path = stdout_path
        self.stderr_path = stderr_path
        self.memory_limit_mb = memory_limit_mb
        self.start_time = start_time
        self.started_at = time.monotonic()
        self.returncode: int | None = None
        self.oom_killed = False
        self.stop_requested_at: float | None = None
        self.killed_at: float | None = None
        self._echoes = list(echoes)
        self._kill = kill
        self._alive = alive
        self.tree = tree  # every descendant, also those that left the group with setsid()
        self.upper_dir: str | None = None  # sandboxed: where its writes to the launch folder are
        self.leftovers: list[str] = []  # "pid (name)" of descendants killed after the leader exited

    def __repr__(self) -> str:
        return f"Replica(name={self.name!r}, pid={self.pid}, returncode={self.returncode})"

    @property
    def exit_status(self) -> int | None:
        """Vertex-style status: the exit code, or 128 + the signal number (SIGKILL -> 137)."""
        rc = self.returncode
        return None if rc is None else (rc if rc >= 0 else 128 - rc)

    @property
    def signal(self) -> int | None:
        """The number of the signal that ended the leader, or None."""
        rc = self.returncode
        return -rc if rc is not None and rc < 0 else None

    def poll(self) -> int | None:
        """Reap the leader if it exited; return its Vertex-style exit status, else None."""
        if self.returncode is None:
            self.returncode = self._proc.poll()
        return self.exit_status

    def record(self) -> dict[str, Any]:
        """What :func:`reap_leftovers` needs to find this group again from another controller."""
        return {
            "name": self.name, "pid": self.pid, "pgid": self.pgid, "start_time": self.start_time
        }

    def send_signal_group(self, sig: int) -> None:
        """Send ``sig`` to the whole process group and the rest of its tree; gone is fine."""
        self._kill(self.pgid, sig)
        if self.tree is not None:
            if sig == signal.SIGKILL:
                self.tree.kill()
            else:
                self.tree.signal(sig, skip_group=self.pgid)

    def running(self) -> bool:
        """Whether the leader, any process left in its group, or any descendant still runs."""
        if self.poll() is None or self._alive(self.pgid):
            return True
        return self.tree is not None and bool(self.tree.pids())

    def _note_leftovers(self) -> None:
        if self.tree is not None and self.returncode is not None and not self.leftovers:
            self.leftovers = self.tree.describe(self.tree.pids())

    def check_memory(self) -> bool:
        """Kill the group with SIGKILL when its summed RSS is over ``memory_limit_mb``.

        The exit then looks like the kernel OOM killer's (status 137). Cheap enough to call
        every 100 ms; with many replicas prefer :func:`check_memory_all` (one /proc scan).

        Returns:
            Whether this replica was killed for memory (by this call or an earlier one).
        """
        if self.memory_limit_mb is None or self.oom_killed:
            return self.oom_killed
        return self._enforce_memory(group_rss_bytes([self.pgid])[self.pgid])

    def _enforce_memory(self, rss_bytes: int) -> bool:
        if self.memory_limit_mb is None or rss_bytes <= self.memory_limit_mb * 1024 * 1024:
            return False
        self.oom_killed = True
        self.send_signal_group(signal.SIGKILL)
        return True

    def begin_stop(self, now: float) -> float:
        """Send SIGTERM to the group (once) and start the grace period; returns when it started."""
        if self.stop_requested_at is not None:
            return self.stop_requested_at
        self.stop_requested_at = now  # RUNNING -> STOPPING
        self.poll()
        self._note_leftovers()  # the leader is gone: what still runs outlived it
        if self.running():
            self.send_signal_group(signal.SIGTERM)
        return now

    def advance_stop(self, now: float, grace_s: float) -> bool:
        """One non-blocking stop step; True once the leader is reaped and its group is gone."""
        started = self.begin_stop(now)
        action = stop_action(elapsed_s=now - started, grace_s=grace_s, running=self.running())
        if action == "kill":
            if self.killed_at is None:
                self.killed_at = now  # STOPPING -> KILLED
            self.send_signal_group(signal.SIGKILL)
        return action == "done"

    def stop(
        self,
        grace_s: float,
        *,
        clock: Clock = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> int:
        """SIGTERM the group, wait up to ``grace_s`` for all of it to exit, then SIGKILL it.

        Processes left in the group after the leader exits get the rest of the grace period, then
        SIGKILL: no child outlives its replica. Returns the leader's Vertex-style exit status.
        """
        self.begin_stop(clock())
        while not self.advance_stop(clock(), grace_s):
            sleep(_STOP_POLL_S)
        assert self.returncode is not None
        return self.exit_status  # type: ignore[return-value]

    def close(self, timeout_s: float = 5.0) -> None:
        """Echo what is left of the logs and stop the echo threads (call before a restart)."""
        for echo in self._echoes:
            echo.finishing.set()
        deadline = time.monotonic() + timeout_s
        for echo in self._echoes:
            echo.join(max(0.0, deadline - time.monotonic()))
        self._echoes = []
        if self.tree is not None and not self.running():
            self.tree.remove()


def check_memory_all(replicas: Iterable[Replica]) -> list[Replica]:
    """:meth:`Replica.check_memory` for many replicas with one /proc scan; returns those killed."""
    limited = [r for r in replicas if r.memory_limit_mb is not None and not r.oom_killed]
    if not limited:
        return []
    rss = group_rss_bytes({r.pgid for r in limited})
    return [r for r in limited if r._enforce_memory(rss[r.pgid])]


def start_replica(
    argv: Sequence[str],
    *,
    env: Mapping[str, str],
    cwd: str,
    stdout_path: str,
    stderr_path: str,
    name: str,
    echo: TextIO | None = None,
    memory_limit_mb: int | None = None,
    shim_ops: Sequence[str] = (),
    tree: ProcessTree | None = None,
) -> Replica:
    """Start one replica in its own process group.

    The child gets exactly ``env`` (the caller builds it; ``argv[0]`` is looked up on its PATH),
    stdin from /dev/null, and stdout/stderr appended to the given files so a restart's output
    follows the previous attempt's (a link or FIFO planted at a log path is replaced, never
    followed). It starts through the exec shim (``shim.c``: no fork of the controller, which
    ``preexec_fn`` would force), which makes it die with the thread that started it
    (PR_SET_PDEATHSIG; call this from the long-lived job loop thread), starts it in ``tree`` so every
    descendant can be found and killed, applies ``shim_ops`` (the sandbox), then execs ``argv``. With
    a ``tree`` the trainer is born in the cgroup (clone3): the shim stays as the group's leader and
    exits as the trainer did, so ``Replica.pid`` is the shim's and the trainer is its child.
    Without a shim (no C compiler) a Python ``preexec_fn`` sets PR_SET_PDEATHSIG instead.

    Args:
        argv: the command, never passed through a shell.
        env: the child's whole environment.
        cwd: the child's working directory.
        stdout_path: log file for stdout, opened in append mode.
        stderr_path: log file for stderr (may be the same path as ``stdout_path``).
        name: replica name (``workerpool0-0``), the echo prefix ``[name] ``.
        echo: when given, each new log line is also copied there by a thread following the file.
        memory_limit_mb: limit enforced by :meth:`Replica.check_memory`.
        shim_ops: operations for the shim before exec (see ``shim.c``); needs the shim.
        tree: the cgroup the replica and all its descendants join (or, without cgroups, how the
            controller as subreaper finds them: ``orphans.OrphanTree``).

    Raises:
        ConfigError: empty argv, missing cwd, or ``argv[0]`` missing or not executable.
    """
    argv = [os.fspath(arg) for arg in argv]
    if not argv:
        raise ConfigError(f"replica {name}: expected a command, got an empty argv")
    if memory_limit_mb is not None and memory_limit_mb <= 0:
        raise ConfigError(f"replica {name}: memory limit must be > 0 MB, got {memory_limit_mb}")
    if not os.path.isdir(cwd):
        raise ConfigError(f"replica {name}: working directory {cwd!r} does not exist")
    program = _resolve(name, argv[0], cwd, env)
    try:
        wrapper = shim.shim_path()
    except shim.ShimUnavailable:
        if shim_ops:
            raise
        wrapper = None
    errors_r, errors_w = os.pipe() if wrapper is not None else (-1, -1)
    if wrapper is not None:
        full = [wrapper, str(os.getpid()), (tree.procs_file if tree else None) or "-", str(errors_w), *shim_ops,
                "--", program, *argv[1:]]
    else:
        full = [program, *argv[1:]]
    paths = list(dict.fromkeys([stdout_path, stderr_path]))
    logs: dict[str, int] = {}
    try:
        for path in paths:  # an unwritable log is an OSError, not a ConfigError
            os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
            logs[path] = _open_log(path)
        offsets = {path: os.fstat(fd).st_size for path, fd in logs.items()}
        prctl = _prctl() if wrapper is None else None
        try:
            proc = subprocess.Popen(
                full,
                env=dict(env),
                cwd=cwd,
                stdin=subprocess.DEVNULL,
                stdout=logs[stdout_path],
                stderr=logs[stderr_path],
                start_new_session=True,
                close_fds=True,
                pass_fds=() if errors_w < 0 else (errors_w,),
                preexec_fn=None if prctl is None else _die_with_parent(os.getpid(), prctl),
            )
        except OSError as err:
            raise ConfigError(_launch_error(name, argv[0], cwd, env, err)) from err
        finally:
            if errors_w >= 0:
                os.close(errors_w)
        if errors_r >= 0:
            _raise_shim_error(proc, errors_r, name, argv[0], cwd, env)
    finally:
        for fd in logs.values():
            os.close(fd)
        if errors_r >= 0:
            os.close(errors_r)
    echoes = []
    if echo is not None:
        echoes = [_Echo(path, offsets[path], f"[{name}] ", echo) for path in paths]
    for thread in echoes:
        thread.start()
    return Replica(
        proc,
        name=name,
        argv=argv,
        stdout_path=stdout_path,
        stderr_path=stderr_path,
        memory_limit_mb=memory_limit_mb,
        start_time=process_start_time(proc.pid),
        echoes=echoes,
        tree=tree,
    )


def _raise_shim_error(proc: Any, fd: int, name: str, program: str, cwd: str,
                      env: Mapping[str, str]) -> None:
    """EOF once the trainer is exec'd; otherwise the shim's ``ERRNO message``: raise it."""
    chunks = []
    while chunk := os.read(fd, 4096):
        chunks.append(chunk)
    if not chunks:
        return
    proc.wait()
    code, _, message = b"".join(chunks).decode("utf-8", "replace").partition(" ")
    if message.startswith("exec:"):
        errno_ = int(code) if code.isdigit() else 0
        raise ConfigError(_launch_error(name, program, cwd, env, OSError(errno_, os.strerror(errno_))))
    raise ConfigError(f"replica {name}: the sandbox could not be set up: {message}")


def _open_log(path: str) -> int:
    """Append to a replica log; a symlink, FIFO or device a trainer planted there is replaced."""
    try:
        return files.open_append(path)
    except files.NotRegularFileError:
        if os.path.isdir(path) and not os.path.islink(path):
            raise
        os.unlink(path)  # the trainer's own entry: its earlier output is what it replaced
        return files.open_append(path)


def _resolve(name: str, program: str, cwd: str, env: Mapping[str, str]) -> str:
    """``program`` as the shim will exec it; the same errors Popen gave for a missing command."""
    if "/" in program:
        found: str | None = program if os.path.isabs(program) else os.path.join(cwd, program)
        if not os.path.exists(found):  # type: ignore[arg-type]
            found = None
    else:
        found = shutil.which(program, mode=os.F_OK, path=env.get("PATH", os.defpath))
    if found is None:
        raise ConfigError(_launch_error(name, program, cwd, env, FileNotFoundError()))
    if os.path.isdir(found) or not os.access(found, os.X_OK):
        raise ConfigError(_launch_error(name, program, cwd, env, PermissionError()))
    return program if "/" in program else found


def _launch_error(name: str, program: str, cwd: str, env: Mapping[str, str], err: OSError) -> str:
    if isinstance(err, FileNotFoundError):
        problem = "was not found"
    elif isinstance(err, PermissionError):
        problem = "is not executable"
    else:
        problem = f"could not be executed ({err.strerror})"
    where = f"cwd {cwd!r}" + ("" if "/" in program else f", PATH {env.get('PATH', '')!r}")
    return f"replica {name}: command {program!r} {problem} ({where})"


def reap_leftovers(
    records: Iterable[Mapping[str, Any]],
    *,
    grace_s: float = 2.0,
    clock: Clock = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> int:
    """Kill the process groups a dead controller left behind (TERM, ``grace_s``, KILL).

    Each record is ``{"pid", "pgid", "start_time"}`` from :meth:`Replica.record`. A group is
    killed when its leader still is the recorded process (same start time), or when the leader
    is gone but processes it started still run in its group (the usual case after the controller
    was SIGKILLed: PR_SET_PDEATHSIG took the leader, not its children). A record without a
    start time, or whose pid now names another process, is skipped.

    Returns:
        How many groups were found alive and signalled.
    """
    targets = []
    for record in records:
        pid, pgid, recorded = int(record["pid"]), int(record["pgid"]), record.get("start_time")
        if recorded is None or pgid <= 1 or pgid == os.getpgrp():
            continue
        current = process_start_time(pid)
        if current is not None and current != int(recorded):
            continue  # the pid was reused by another process
        members = _group_members([pgid])[pgid] if _has_proc() else []
        if any(stat.start_time >= int(recorded) for _, stat in members):
            targets.append(pgid)
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


def tail_lines(path: str, n: int = 20, max_bytes: int = 64_000) -> list[str]:
    """The last ``n`` lines of a log, reading at most ``max_bytes`` from its end ([] if missing)."""
    try:
        with os.fdopen(files.open_regular(path, os.O_RDONLY), "rb") as log:
            size = log.seek(0, os.SEEK_END)
            start = max(0, size - max_bytes)
            log.seek(start)
            data = log.read()
    except OSError:
        return []
    lines = data.decode("utf-8", "replace").splitlines()
    if start > 0 and len(lines) > 1:
        lines = lines[1:]  # the first line was cut in the middle
    return lines[-n:] if n > 0 else []


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (for MASTER_PORT)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port
