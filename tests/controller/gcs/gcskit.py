"""Helpers of the Cloud Storage endpoint tests: a running endpoint over a folder, raw HTTP to it,
and the things a hostile trainer plants in its bucket folder."""

from __future__ import annotations

import ctypes
import ctypes.util
import http.client
import importlib.util
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import quote, urlsplit

import pytest

from trials.controller.gcs import emulator

needs_gcs = pytest.mark.skipif(not all(importlib.util.find_spec(m) for m in ("gcp_storage_emulator", "google.cloud")),
                               reason="the gcs extra is not installed (pip install 'trials[gcs]')")
SECRET = b"SECRET-0600-CONTENT"


@contextmanager
def endpoint(root: Path, bind: str = "127.0.0.1") -> Iterator[emulator.Emulator]:
    gcs, why = emulator.start(str(root), {}, bind=bind)
    assert gcs is not None, why
    try:
        yield gcs
    finally:
        gcs.stop()


def call(host: str, method: str, path: str, body: bytes | None = None, headers: dict[str, str] | None = None,
         timeout: float = 30) -> tuple[int, bytes]:
    """One request; a dropped connection (the old endpoint's answer to an exception) raises."""
    where = urlsplit(host)
    conn = http.client.HTTPConnection(where.hostname, where.port, timeout=timeout)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        answer = conn.getresponse()
        return answer.status, answer.read()
    finally:
        conn.close()


def media_upload(host: str, bucket: str, name: str, data: bytes,
                 headers: dict[str, str] | None = None) -> tuple[int, bytes]:
    return call(host, "POST", f"/upload/storage/v1/b/{bucket}/o?uploadType=media&name={quote(name, safe='')}",
                data, {"Content-Type": "application/octet-stream", **(headers or {})})


def download(host: str, bucket: str, name: str) -> tuple[int, bytes]:
    return call(host, "GET", f"/download/storage/v1/b/{bucket}/o/{quote(name, safe='')}?alt=media")


def secret_file(folder: Path) -> Path:
    """A 0600 file outside every bucket."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "secret"
    path.write_bytes(SECRET)
    path.chmod(0o600)
    return path


_RENAME_EXCHANGE = 2


def exchange(a: Path, b: Path) -> None:
    """Swap two names atomically (renameat2 RENAME_EXCHANGE): a folder and a link trade places."""
    libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    at_fdcwd = -100
    if libc.renameat2(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), _RENAME_EXCHANGE) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err), str(a))


def can_exchange(tmp: Path) -> bool:
    (tmp / "x1").mkdir()
    (tmp / "x2").symlink_to("/")
    try:
        exchange(tmp / "x1", tmp / "x2")
        return True
    except (OSError, AttributeError):
        return False
    finally:
        for name in ("x1", "x2"):
            p = tmp / name
            if p.is_symlink():
                p.unlink()
            else:
                p.rmdir()
