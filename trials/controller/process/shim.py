"""The exec shim replicas start through: ``shim.c`` compiled once per user and machine, then reused."""

from __future__ import annotations

import functools
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile

SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "shim.c")
ENV_CC = "CC"
_BUILD_TIMEOUT_S = 120.0


class ShimUnavailable(Exception):
    """The shim cannot be built here (not Linux, no C compiler, build failed); the message says why."""


def _cache_dir() -> str:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    for folder in (os.path.join(base, "trials"), os.path.join(tempfile.gettempdir(), f"trials-{os.getuid()}")):
        try:
            os.makedirs(folder, mode=0o700, exist_ok=True)
            st = os.lstat(folder)
            if st.st_uid == os.getuid() and not st.st_mode & 0o022 and os.access(folder, os.W_OK):
                return folder  # ours and not writable by others: nobody can plant a binary here
        except OSError:
            continue
    raise ShimUnavailable("no private cache folder to build the sandbox helper in")


@functools.cache
def shim_path() -> str:
    """The compiled shim, built on first use (about a second, once).

    Raises:
        ShimUnavailable: why there is none.
    """
    if not sys.platform.startswith("linux"):
        raise ShimUnavailable(f"the sandbox needs Linux, this is {sys.platform}")
    with open(SOURCE, "rb") as source:
        digest = hashlib.sha256(source.read() + os.uname().machine.encode()).hexdigest()[:16]  # (platform.machine())
    folder = _cache_dir()
    path = os.path.join(folder, f"trials-shim-{digest}")
    if os.access(path, os.X_OK):
        return path
    compiler = os.environ.get(ENV_CC) or shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if not compiler:
        raise ShimUnavailable("no C compiler (cc) to build the sandbox helper trials/controller/process/shim.c")
    tmp = f"{path}.{os.getpid()}.tmp"
    try:
        proc = subprocess.run([compiler, "-O2", "-o", tmp, SOURCE], capture_output=True, text=True,
                              timeout=_BUILD_TIMEOUT_S, check=False)
    except (OSError, subprocess.SubprocessError) as err:
        raise ShimUnavailable(f"building the sandbox helper with {compiler} failed: {err}") from None
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise ShimUnavailable(f"building the sandbox helper with {compiler} failed: {last}")
    os.replace(tmp, path)
    return path
