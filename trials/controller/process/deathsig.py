"""A child that dies with its parent (``PR_SET_PDEATHSIG``): the exec shim's replicas, a Slurm entry's trainer.

Standard library only and light: a Slurm node's entry imports it before each trainer starts.
"""

from __future__ import annotations

import functools
import os
import signal
import sys
from collections.abc import Callable
from typing import Any

_PR_SET_PDEATHSIG = 1  # linux/prctl.h


@functools.cache
def libc_prctl() -> Any:
    """libc's prctl(2) through ctypes (cached), or None off Linux or without ctypes."""
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


def die_with_parent(parent_pid: int, prctl: Any) -> Callable[[], None]:
    """A ``preexec_fn``: the child gets SIGKILL when ``parent_pid`` (its parent) dies."""
    kill = int(signal.SIGKILL)

    def setup() -> None:
        # Runs in the child between fork and exec: no imports, no locks, no allocation worth naming.
        prctl(_PR_SET_PDEATHSIG, kill, 0, 0, 0)
        if os.getppid() != parent_pid:  # the controller died before prctl took effect
            os.kill(os.getpid(), kill)

    return setup
