"""Starting a replica: through the exec shim (``shim.c``), in its own process group, output to its logs."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from typing import Any, TextIO

from trials import files
from trials.controller.backend.protocol import BackendError
from trials.controller.process import exit_times, shim
from trials.controller.process.deathsig import die_with_parent, libc_prctl
from trials.controller.process.echo import Echo
from trials.controller.process.groups import process_start_time
from trials.controller.process.replica import Replica
from trials.controller.process.tree import ProcessTree
from trials.errors import ConfigError


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
    program = resolve_program(name, argv[0], cwd, env)
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
            logs[path] = files.open_log(path)
        offsets = {path: os.fstat(fd).st_size for path, fd in logs.items()}
        # the kernel's limit where the replica's cgroup has a memory controller: set before the trainer is born
        # in it; else the controller polls the tree's resident memory (Replica.check_memory)
        limited = tree is not None and memory_limit_mb is not None and tree.limit_memory(memory_limit_mb * 1024 * 1024)
        prctl = libc_prctl() if wrapper is None else None
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
                preexec_fn=None if prctl is None else die_with_parent(os.getpid(), prctl),
            )
        except OSError as err:
            raise ConfigError(_launch_error(name, argv[0], cwd, env, err)) from err
        finally:
            if errors_w >= 0:
                os.close(errors_w)
        exit_times.watch(proc.pid)
        if errors_r >= 0:
            _raise_shim_error(proc, errors_r, name, argv[0], cwd, env)
    finally:
        for fd in logs.values():
            os.close(fd)
        if errors_r >= 0:
            os.close(errors_r)
    echoes = []
    if echo is not None:
        echoes = [Echo(path, offsets[path], f"[{name}] ", echo) for path in paths]
    for thread in echoes:
        thread.start()
    replica = Replica(
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
    replica.kernel_memory_limit = limited
    return replica


def _raise_shim_error(proc: Any, fd: int, name: str, program: str, cwd: str,
                      env: Mapping[str, str]) -> None:
    """EOF once the trainer is exec'd; otherwise the shim's ``ERRNO message``: raise it."""
    chunks = []
    while chunk := os.read(fd, 4096):
        chunks.append(chunk)
    if not chunks:
        return
    proc.wait()
    exit_times.take(proc.pid)
    code, _, message = b"".join(chunks).decode("utf-8", "replace").partition(" ")
    if message.startswith("exec:"):
        errno_ = int(code) if code.isdigit() else 0
        raise ConfigError(_launch_error(name, program, cwd, env, OSError(errno_, os.strerror(errno_))))
    raise BackendError(f"replica {name}: the sandbox could not be set up: {message}")


def resolve_program(name: str, program: str, cwd: str, env: Mapping[str, str]) -> str:
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

