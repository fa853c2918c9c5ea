"""What the controller writes and reads in a trial folder: args, env, pids, the STOP request.

A trial folder belongs to the trainer as much as to the controller (DESIGN.md §3.13): every access
goes through :mod:`trials.files`, so a planted symlink is replaced or refused, never followed, and a
FIFO never blocks. JSON files are written whole or not at all: a controller killed mid-write must
not leave a torn ``pids.json`` (its replicas' children would never be reaped).
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Collection, Mapping, Sequence
from typing import Any

from trials import files, protocol

MAX_PIDS_BYTES = 1 << 20  # a pids.json is a few hundred bytes per replica start


def write_readable_json(path: str, data: Any) -> None:
    """Replace ``path`` with ``data`` as indented JSON, keys sorted (for a reader; the Slurm entry's
    ``launchfile.write_json`` is compact), atomically, never through a link planted there."""
    text = json.dumps(data, indent=1, sort_keys=True, default=str)
    files.write_text_atomic(path, text)


def write_args(trial_dir: str, trial_id: str, params: Mapping[str, Any],
               argvs: Mapping[str, Sequence[str]]) -> None:
    """``args.json``: the trial's parameters and each replica's command line."""
    write_readable_json(os.path.join(trial_dir, protocol.ARGS_FILE), {
        "trial_id": trial_id, "parameters": dict(params),
        "replicas": {name: list(argv) for name, argv in argvs.items()},
    })


def write_env(trial_dir: str, envs: Mapping[str, Mapping[str, str]], host: Mapping[str, str],
              keep: Collection[str] = ()) -> None:
    """``env.json``: what each replica's environment sets or changes compared to ``host``, and the
    variables in ``keep`` it has whatever the host's are (its devices)."""
    write_readable_json(os.path.join(trial_dir, protocol.ENV_FILE), {
        name: {k: v for k, v in env.items() if host.get(k) != v or k in keep} for name, env in envs.items()
    })


def write_pids(trial_dir: str, records: Sequence[Mapping[str, Any]]) -> None:
    """``pids.json``: every replica group started for the trial (a resumed controller reaps them)."""
    write_readable_json(os.path.join(trial_dir, protocol.PIDS_FILE), list(records))


def read_pids(trial_dir: str) -> list[dict[str, Any]]:
    """The records of ``pids.json``; [] when it is missing, unreadable, not a regular file or not JSON."""
    try:
        data = json.loads(files.read_regular(os.path.join(trial_dir, protocol.PIDS_FILE),
                                             max_bytes=MAX_PIDS_BYTES))
    except (OSError, ValueError):
        return []
    if not isinstance(data, list):
        return []
    return [r for r in data if isinstance(r, dict)]


def request_stop(trial_dir: str) -> bool:
    """Create the ``STOP`` file the runtime watches (for trainers that mask SIGTERM).

    Never truncates or follows what is there: a planted symlink or FIFO is left alone (the
    replicas get SIGTERM anyway). Returns whether the file is there now.
    """
    path = os.path.join(trial_dir, protocol.STOP_FILE)
    try:
        os.close(files.open_regular(path, os.O_WRONLY | os.O_CREAT))
    except OSError:
        return False
    return True


def clear_stop(trial_dir: str) -> None:
    """Remove a ``STOP`` file left by an earlier attempt (``unlink`` never follows a link)."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(os.path.join(trial_dir, protocol.STOP_FILE))


FULL_DISK_BYTES = 64 * 1024  # less free space than this under a trial directory: the disk is full


def stderr_tail(trial_dir: str, replica: str, status: int, n: int = 20) -> list[str]:
    """The last lines of a replica's stderr log, for its exit message.

    A replica that failed without a word on stderr may have found its disk full: then say so.
    """
    tail = tail_lines(os.path.join(trial_dir, protocol.stderr_log(replica)), n)
    if status and not any(line.strip() for line in tail):
        return full_disk_reason(trial_dir)
    return tail


def full_disk_reason(path: str) -> list[str]:
    try:
        st = os.statvfs(path)
    except OSError:
        return []
    if st.f_bavail * st.f_frsize >= FULL_DISK_BYTES:
        return []
    return [f"No space left on device: the filesystem of {path} is full "
            f"({st.f_bavail * st.f_frsize} bytes free) and the replica wrote nothing to stderr"]


def tail_lines(path: str, n: int = 20, max_bytes: int = 64_000) -> list[str]:
    """The last ``n`` lines of a log in a trial folder, reading at most ``max_bytes`` from its end.

    [] when it is missing or not a regular file (a link or FIFO a trainer put there is not opened).
    """
    try:
        fd = files.open_regular(path, os.O_RDONLY)
    except OSError:
        return []
    try:
        size = os.fstat(fd).st_size
        start = max(0, size - max_bytes)
        os.lseek(fd, start, os.SEEK_SET)
        data = os.read(fd, max_bytes)
    except OSError:
        return []
    finally:
        os.close(fd)
    lines = data.decode("utf-8", "replace").splitlines()
    if start > 0 and len(lines) > 1:
        lines = lines[1:]  # the first line was cut in the middle
    return lines[-n:] if n > 0 else []
