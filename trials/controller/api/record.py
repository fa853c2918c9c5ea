"""A job's API record (its path's project and location, its kind), written in its folder before the job.

Creating a job is two writes (the job's storage, then the API's keys in it); the record written
first, with the job's folder that claims its id, lets a server that stopped between them adopt the
job (it gets the keys it lacks and runs) and remove a creation that never reached the job at all.
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
from dataclasses import replace
from typing import Any

from trials.errors import TrialsError
from trials.storage_url import JOURNAL_FILE

RECORD_FILE = "serve-api.json"
_MAX_BYTES = 4096


def claim(job_dir: str, *, parent: str, kind: str) -> None:
    """Make the job's folder (``FileExistsError``: the id is taken) and write its record in it, synced."""
    os.mkdir(job_dir)
    try:
        fd = os.open(os.path.join(job_dir, RECORD_FILE), os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
        try:
            os.write(fd, json.dumps({"parent": parent, "kind": kind}).encode("utf-8"))
            os.fsync(fd)
        finally:
            os.close(fd)
        _sync_dir(os.path.dirname(job_dir))
    except BaseException:
        abandon(job_dir)
        raise


def read(job_dir: str) -> dict[str, str] | None:
    """The record (``parent``, ``kind``), or None: none there, a link, or not one (never followed)."""
    try:
        fd = os.open(os.path.join(job_dir, RECORD_FILE), os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        if not _is_regular(fd):
            return None
        data = os.read(fd, _MAX_BYTES + 1)
    finally:
        os.close(fd)
    try:
        value: Any = json.loads(data.decode("utf-8")) if len(data) <= _MAX_BYTES else None
    except (UnicodeDecodeError, ValueError):
        return None
    if not (isinstance(value, dict) and isinstance(value.get("parent"), str) and isinstance(value.get("kind"), str)):
        return None
    return {"parent": value["parent"], "kind": value["kind"]}


def adopt(root: str, storage: str | None) -> tuple[list[str], list[str]]:
    """On a server's start, what one stopped mid-create left: ``(adopted, removed)``, the jobs given the API
    keys they lacked (they are then resumed as any other), and the creations that never made a job (their
    folders removed)."""
    from trials.controller.jobs import registry, view

    if not os.path.isdir(root):
        return [], []
    listed = {row["job_id"] for row in view.list_jobs(root, storage)} if storage else None
    adopted, removed = [], []
    for name in sorted(os.listdir(root)):
        job_dir = os.path.join(root, name)
        made = read(job_dir)
        if made is None or os.path.islink(job_dir):
            continue
        exists = (name in listed) if listed is not None else os.path.exists(os.path.join(job_dir, JOURNAL_FILE))
        if not exists:
            if abandon(job_dir):
                removed.append(name)
            continue
        try:
            h = registry.open_job(name, root=root, storage=storage)
        except TrialsError:
            continue
        meta = h.store.meta()
        if not meta.api_parent:
            h.store.write_meta(replace(meta, api_parent=made["parent"], api_kind=made["kind"]), since=meta)
            adopted.append(name)
    return adopted, removed


def abandon(job_dir: str) -> bool:
    """Remove a creation that never made its job: the record, then the folder if nothing else is in it."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(os.path.join(job_dir, RECORD_FILE))
    try:
        os.rmdir(job_dir)
    except OSError:
        return False
    return True


def _is_regular(fd: int) -> bool:
    return stat.S_ISREG(os.fstat(fd).st_mode)


def _sync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
