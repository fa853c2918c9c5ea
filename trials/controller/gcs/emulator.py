"""Start and stop the local Cloud Storage endpoint (extra ``trials[gcs]``) with a job's controller."""

from __future__ import annotations

import contextlib
import importlib.util
import os
import subprocess
import sys
from collections.abc import Mapping

from trials import protocol

OFF_VALUES = ("off", "0", "no", "false")
_START_TIMEOUT_S = 30.0
_SERVER = "trials.controller.gcs.server"
_LOOPBACK = "127.0.0.1"


class Emulator:
    """A running ``gcs.server`` subprocess; ``host`` is the trials' ``STORAGE_EMULATOR_HOST``."""

    def __init__(self, proc: subprocess.Popen[str], port: int, bind: str = "127.0.0.1"):
        self.proc = proc
        self.host = f"http://[{bind}]:{port}" if ":" in bind else f"http://{bind}:{port}"

    def stop(self) -> None:
        """Close its stdin (it stops on EOF), then make sure it is gone."""
        with contextlib.suppress(OSError):
            if self.proc.stdin is not None:
                self.proc.stdin.close()
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


class Warm:
    """An endpoint started ahead of its job: it loads its libraries (~0.1 s) while the controller
    does its own start-up, then waits on stdin for the folder to serve (:func:`start` sends it).
    Never used, it exits at :meth:`close` (or when the controller dies: its stdin closes)."""

    def __init__(self, proc: subprocess.Popen[str]):
        self._proc: subprocess.Popen[str] | None = proc

    def take(self) -> subprocess.Popen[str] | None:
        """The waiting process, once (None after)."""
        proc, self._proc = self._proc, None
        return proc

    def close(self) -> None:
        proc = self.take()
        if proc is not None:
            Emulator(proc, 0).stop()


def warm_up(environ: Mapping[str, str] | None = None) -> Warm | None:
    """Start the loopback endpoint's process before its folder is known (None: off or not installed)."""
    if disabled(environ) or not available():
        return None
    try:
        return Warm(_popen("-", _LOOPBACK))
    except OSError:
        return None  # start() says why, starting it again


def _popen(root: str, bind: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", _SERVER, root, bind],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def available() -> bool:
    """Whether the extra is installed (``pip install 'trials[gcs]'``)."""
    return importlib.util.find_spec("gcp_storage_emulator") is not None


def disabled(environ: Mapping[str, str] | None = None) -> bool:
    """Turned off on purpose (``TRIALS_GCS_EMULATOR=off``): nothing to warn about."""
    environ = os.environ if environ is None else environ
    return environ.get(protocol.ENV_GCS_EMULATOR, "").strip().lower() in OFF_VALUES


def start(gcs_root: str, environ: Mapping[str, str] | None = None,
          bind: str = _LOOPBACK, *, warm: Warm | None = None) -> tuple[Emulator | None, str]:
    """Serve ``gcs_root`` as Cloud Storage on ``bind`` (default loopback; a container network's gateway
    for the replicas on it); ``(None, why)`` when the extra is absent, off or failed. ``warm``: a
    loopback endpoint :func:`warm_up` started, used (and closed when it cannot be)."""
    environ = os.environ if environ is None else environ
    proc = warm.take() if warm is not None else None
    if proc is not None and (bind != _LOOPBACK or "\n" in gcs_root or disabled(environ)):
        Emulator(proc, 0).stop()  # it cannot serve this: a fresh start below (or none)
        proc = None
    if disabled(environ):
        return None, f"{protocol.ENV_GCS_EMULATOR}={environ[protocol.ENV_GCS_EMULATOR]}"
    if proc is None and not available():
        return None, "the gcs extra is not installed (pip install 'trials[gcs]')"
    if proc is not None:
        assert proc.stdin is not None
        with contextlib.suppress(OSError):  # gone already: its stderr says why below
            proc.stdin.write(gcs_root + "\n")
            proc.stdin.flush()
    else:
        try:
            proc = _popen(gcs_root, bind)
        except OSError as err:
            return None, f"the local Cloud Storage endpoint could not be started: {err}"
    assert proc.stdout is not None
    line = proc.stdout.readline().strip()
    if not line.isdigit():
        proc.kill()
        _, stderr = proc.communicate(timeout=_START_TIMEOUT_S)
        last = (stderr.strip().splitlines() or ["no output"])[-1]
        return None, f"the local Cloud Storage endpoint did not start: {last}"
    return Emulator(proc, int(line), bind), ""
