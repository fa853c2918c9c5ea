"""The exec shim built as a shared library for warm launchers (``shim.c`` with ``-DSHIM_LIBRARY``)."""

from __future__ import annotations

import functools
import hashlib
import os
import shutil
import subprocess

from trials.controller.process import shim

_BUILD_TIMEOUT_S = 120.0


@functools.cache
def library_path() -> str:
    """The compiled library (built on first use, kept beside the shim in the private cache folder).

    Raises:
        shim.ShimUnavailable: why there is none.
    """
    shim.shim_path()  # the same checks (Linux, a compiler, a private cache folder)
    with open(shim.SOURCE, "rb") as source:
        digest = hashlib.sha256(source.read() + os.uname().machine.encode()).hexdigest()[:16]
    folder = os.path.dirname(shim.shim_path())
    path = os.path.join(folder, f"trials-shim-{digest}.so")
    if os.path.exists(path):
        return path
    compiler = os.environ.get(shim.ENV_CC) or shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if not compiler:
        raise shim.ShimUnavailable("no C compiler (cc) to build the warm launcher's library")
    tmp = f"{path}.{os.getpid()}.tmp"
    try:
        proc = subprocess.run([compiler, "-O2", "-shared", "-fPIC", "-DSHIM_LIBRARY", "-o", tmp, shim.SOURCE],
                              capture_output=True, text=True, timeout=_BUILD_TIMEOUT_S, check=False)
    except (OSError, subprocess.SubprocessError) as err:
        raise shim.ShimUnavailable(f"building the warm launcher's library with {compiler} failed: {err}") from None
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise shim.ShimUnavailable(f"building the warm launcher's library with {compiler} failed: {last}")
    os.replace(tmp, path)
    return path
