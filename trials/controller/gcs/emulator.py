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


class Emulator:
    """A running ``gcs.server`` subprocess; ``host`` is the trials' ``STORAGE_EMULATOR_HOST``."""

    def __init__(self, proc: subprocess.Popen[str], port: int, bind: str = "127.0.0.1"):
        self.proc = proc
        self.host = f"http://{bind}:{port}"

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


def available() -> bool:
    """Whether the extra is installed (``pip install 'trials[gcs]'``)."""
    return importlib.util.find_spec("gcp_storage_emulator") is not None


def disabled(environ: Mapping[str, str] | None = None) -> bool:
    """Turned off on purpose (``TRIALS_GCS_EMULATOR=off``): nothing to warn about."""
    environ = os.environ if environ is None else environ
    return environ.get(protocol.ENV_GCS_EMULATOR, "").strip().lower() in OFF_VALUES


def start(gcs_root: str, environ: Mapping[str, str] | None = None,
          bind: str = "127.0.0.1") -> tuple[Emulator | None, str]:
    """Serve ``gcs_root`` as Cloud Storage on ``bind`` (default loopback; a container network's gateway
    for the replicas on it); ``(None, why)`` when the extra is absent, off or failed."""
    environ = os.environ if environ is None else environ
    if disabled(environ):
        return None, f"{protocol.ENV_GCS_EMULATOR}={environ[protocol.ENV_GCS_EMULATOR]}"
    if not available():
        return None, "the gcs extra is not installed (pip install 'trials[gcs]')"
    try:
        proc = subprocess.Popen([sys.executable, "-m", "trials.controller.gcs.server", gcs_root, bind],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
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
