"""The host backend: each replica a local process tree, in its container view where Linux allows.

What the job loop's :class:`trials.controller.backend.protocol.ReplicaBackend` asks, done with the exec
shim (:mod:`spawn`), the namespace sandbox (:mod:`sandbox`), a cgroup or the subreaper (:mod:`tree`,
:mod:`orphans`), memory limits read from /proc (:mod:`replica`) and the local Cloud Storage endpoint.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence

from trials import protocol
from trials.controller.backend.protocol import ReplicaStart
from trials.controller.gcs import emulator as gcs_emulator
from trials.controller.process import sandbox as sandboxing
from trials.controller.process.layers import Layers
from trials.controller.process.replica import Replica, check_memory_all
from trials.printable import printable


class HostBackend:
    """Replicas as host processes of one job.

    Args:
        launch_dir: the folder trials start in (each replica gets a private copy-on-write view of it).
        job_dir: the job's folder (hidden from replicas, but for their own trial folder).
        gcs_root: the job's buckets (``/gcs`` in every replica; served as Cloud Storage when the
            ``gcs`` extra is installed).
        sandbox: the view to use (default: :func:`sandbox.detect` when the backend opens).
        gcs_endpoint: start the local Cloud Storage endpoint (``trials check`` does not).
        environ: where ``TRIALS_SANDBOX``, ``TRIALS_GCS_EMULATOR`` and the user's own
            ``STORAGE_EMULATOR_HOST`` are read (default: os.environ).
        pass_env: the host variables passed to replicas on purpose (``--pass-env``): a
            ``STORAGE_EMULATOR_HOST`` among them is the user's own endpoint, which then wins.
        warm_endpoint: the endpoint's process, started by the caller ahead of the job
            (:func:`warm_endpoint`); else :meth:`open` starts it before the sandbox probe, so
            the two overlap.
        keep_layers: every replica start's copy-on-write layers stay for the caller (``trials check``
            reads them, then removes its folder); else they go when the attempt ends (:mod:`layers`).
    """

    def __init__(self, *, launch_dir: str, job_dir: str, gcs_root: str,
                 sandbox: sandboxing.Sandbox | None = None, gcs_endpoint: bool = True,
                 environ: Mapping[str, str] | None = None, pass_env: Sequence[str] = (),
                 warm_endpoint: gcs_emulator.Warm | None = None, keep_layers: bool = False):
        self.launch_dir = launch_dir
        self.job_dir = job_dir
        self.gcs_root = gcs_root
        self.sandbox = sandbox
        self.gcs_endpoint = gcs_endpoint
        self.environ = environ
        self.pass_env = tuple(pass_env)
        self._gcs: gcs_emulator.Emulator | None = None
        self._warm = warm_endpoint
        self._extra_env: dict[str, str] = {}
        self._live: list[Replica] = []
        self.layers = None if keep_layers else Layers()

    @property
    def view(self) -> sandboxing.Sandbox:
        """The replicas' container view (detected on first use)."""
        if self.sandbox is None:
            self.sandbox = sandboxing.detect(launch_dir=self.launch_dir, job_dir=self.job_dir,
                                             gcs_root=self.gcs_root, environ=self.environ)
        return self.sandbox

    def open(self, say: Callable[[str], None]) -> None:
        if self.gcs_endpoint and self._warm is None:
            self._warm = warm_endpoint(self.environ, self.pass_env)  # its imports overlap the probe
        if self.view.namespace != "mount":  # what the view does not protect, once
            say(self.view.describe())
        if self.gcs_endpoint:
            self._gcs, self._extra_env = start_endpoint(self.gcs_root, self.environ, self.pass_env, say,
                                                        warm=self._warm)

    def start(self, request: ReplicaStart) -> Replica:
        replica = sandboxing.start_sandboxed(
            self.view, request.argv, env={**request.env, **self._extra_env}, trial_dir=request.trial_dir,
            outputs=request.outputs, replica=request.name, stdout_path=request.stdout_path,
            stderr_path=request.stderr_path, name=request.label, echo=request.echo,
            memory_limit_mb=request.memory_limit_mb, layers=self.layers)
        self._live = [r for r in self._live if r.returncode is None]
        self._live.append(replica)
        return replica

    def check_memory(self) -> None:
        check_memory_all(r for r in self._live if r.poll() is None)

    def close(self) -> None:
        if self.layers is not None:
            self.layers.drain()  # the ended attempts' layers removed (or kept) before the job ends
        if self._warm is not None:
            self._warm.close()  # (a no-op once the endpoint took it)
        if self._gcs is not None:
            self._gcs.stop()
            self._gcs = None


def _users_own(environ: Mapping[str, str] | None, pass_env: Sequence[str]) -> str | None:
    """The shell's ``STORAGE_EMULATOR_HOST``; None unless set (it wins when passed with --pass-env)."""
    return (os.environ if environ is None else environ).get(protocol.ENV_STORAGE_EMULATOR_HOST) or None


def warm_endpoint(environ: Mapping[str, str] | None, pass_env: Sequence[str]) -> gcs_emulator.Warm | None:
    """Start the endpoint's process ahead of its job (its imports overlap the controller's), or None
    when :func:`start_endpoint` would start none."""
    if _users_own(environ, pass_env) and protocol.ENV_STORAGE_EMULATOR_HOST in pass_env:
        return None
    return gcs_emulator.warm_up(environ)


def start_endpoint(gcs_root: str, environ: Mapping[str, str] | None, pass_env: Sequence[str],
                   say: Callable[[str], None], *,
                   warm: gcs_emulator.Warm | None = None) -> tuple[gcs_emulator.Emulator | None, dict[str, str]]:
    """The job's local Cloud Storage endpoint (when the gcs extra is installed) and what replicas get
    to reach it; the user's own ``STORAGE_EMULATOR_HOST`` passed with ``--pass-env`` wins (no endpoint).
    ``warm``: its process started ahead (:func:`warm_endpoint`), used or closed."""
    own = _users_own(environ, pass_env)
    if own and protocol.ENV_STORAGE_EMULATOR_HOST in pass_env:
        if warm is not None:
            warm.close()
        return None, {}  # the user's own endpoint, passed on purpose: replicas keep it, no endpoint of ours
    gcs, why = gcs_emulator.start(gcs_root, environ, warm=warm)
    if gcs is not None and own:
        say(f"{protocol.ENV_STORAGE_EMULATOR_HOST}={printable(own)} of this shell is not given to trials: "
            f"they get the job's endpoint {gcs.host}, serving {gcs_root} as /gcs does; keep yours "
            f"with --pass-env {protocol.ENV_STORAGE_EMULATOR_HOST}")
    if gcs is None and gcs_emulator.available() and not gcs_emulator.disabled(environ):
        say(f"no local Cloud Storage endpoint: {why}")
    return gcs, ({protocol.ENV_STORAGE_EMULATOR_HOST: gcs.host} if gcs is not None else {})
