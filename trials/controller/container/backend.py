"""The container backend: each replica a container of its pool's image, as Vertex runs it.

``containerSpec.imageUri`` runs as the image: ``command`` replaces its ENTRYPOINT, ``args`` and then
the tuning flags replace its CMD; the image's WORKDIR, file system and Python; its environment is the
spec's ``env`` and the Vertex variables, nothing of the host's. ``/gcs`` is the job's bucket folder
and the trial's folder (its metric file, logs) is mounted at the same path as on the host, so the
controller reads the metric file with every rule of the metric reader. Each container is labelled
with the job, trial, replica, attempt and its controller; a container a killed controller left is
found by label and removed by the next one.

Every trial has a network of its own, never the host's (:mod:`network`): nothing of the host's loopback
is reachable from it, the job's local Cloud Storage endpoint listens on its gateway
(``STORAGE_EMULATOR_HOST``), two trials never see each other. The replicas of a trial of several are
each reachable there by its replica name (``workerpool0-0``, ``workerpool1-0``…) on port 2222, and
CLUSTER_SPEC, TF_CONFIG and MASTER_ADDR/MASTER_PORT name those hosts, as on Vertex. Every runtime call
puts ``--`` before its operands.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import signal
import socket
import urllib.parse
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from trials import protocol
from trials.controller.backend.protocol import BackendError, ReplicaExit, ReplicaStart
from trials.controller.backend.stopping import StopSteps
from trials.controller.container import runtime as rt
from trials.controller.container.network import KEEPER_REPLICA, TrialNetwork, TrialNetworks, remove_left_networks
from trials.controller.container.reference import check_reference
from trials.controller.gcs import emulator as gcs_emulator
from trials.controller.process.groups import process_start_time
from trials.controller.process.replica import Replica
from trials.controller.process.spawn import start_replica
from trials.errors import ConfigError

GCS_MOUNT = "/gcs"
PACKAGES_MOUNT = "/trials-packages"

# A pythonPackageSpec replica, as Vertex's prebuilt containers run it: install the packages, then
# `python -m MODULE ARGS`. argv: N, the N package paths, the module, its arguments.
_PACKAGE_RUNNER = (
    "import runpy, subprocess, sys\n"
    "n = int(sys.argv[1]); packages = sys.argv[2:2 + n]; module = sys.argv[2 + n]\n"
    "subprocess.check_call([sys.executable, '-m', 'pip', 'install', '--quiet', '--no-input',"
    " '--disable-pip-version-check', *packages], stdout=sys.stderr)\n"
    "sys.argv = [module, *sys.argv[3 + n:]]\n"
    "runpy.run_module(module, run_name='__main__', alter_sys=True)\n"
)


class ContainerReplica(StopSteps):
    """One replica attempt running as a container (the runtime's ``run`` client is its child process)."""

    def __init__(self, client: Replica, *, runtime: rt.Runtime, container: str, memory_limited: bool = False):
        self.client = client
        self.memory_limited = memory_limited
        self.runtime = runtime
        self.container = container
        self.name = client.name
        self._exit: ReplicaExit | None = None
        self._killed = False  # we sent SIGKILL (else a 137 under a memory limit is the OOM killer's)

    @property
    def upper_dir(self) -> str | None:
        return None  # its writes stay in its container

    def poll(self) -> ReplicaExit | None:
        if self._exit is not None:
            return self._exit
        ended = self.client.poll()
        if ended is None:
            return None
        # The client exits as the container did (128 + a signal too), and the container is gone (--rm). A
        # SIGKILL we did not send, under a memory limit, is the kernel's OOM killer (the cgroup's limit).
        status = ended.status
        oom = self.memory_limited and status == 128 + signal.SIGKILL and not self._killed
        self._exit = ReplicaExit.of_status(status, exited_mono=ended.exited_mono, oom=oom, killed=self._killed)
        return self._exit

    def send_signal_group(self, sig: int) -> None:
        """Signal the container's main process (the runtime forwards it); a gone container is fine."""
        if self.poll() is None:
            self._killed = self._killed or sig == signal.SIGKILL
            with contextlib.suppress(rt.RuntimeUnavailable):  # a runtime too slow to answer: the next stop step
                self.runtime.call("kill", "--signal", str(int(sig)), "--", self.container, timeout=30)

    def record(self) -> dict[str, Any] | None:
        return {"name": self.name, "container": self.container, "runtime": self.runtime.name,
                "pid": self.client.pid, "pgid": self.client.pgid, "start_time": self.client.start_time}

    def close(self) -> None:
        self.client.close()


class ContainerBackend:
    """Replicas as containers of one job, under ``podman`` or ``docker``.

    Args:
        runtime: the runtime (see :func:`runtime.find`).
        job_dir: the job's folder (its hash names the containers; labels name it).
        gcs_root: the job's buckets, mounted at ``/gcs``.
        images: local images that stand in for the spec's registry URIs (``--image URI=LOCAL``).
        pass_env: host variables passed into the containers on purpose (``--pass-env``).
        gcs_endpoint: start the local Cloud Storage endpoint (one on each trial network's gateway).
        environ: the host environment (the runtime's own client runs in it).
    """

    def __init__(self, *, runtime: rt.Runtime, job_dir: str, gcs_root: str, images: Mapping[str, str] | None = None,
                 pass_env: Sequence[str] = (), gcs_endpoint: bool = True, environ: Mapping[str, str] | None = None):
        self.runtime = runtime
        self.job_dir = os.path.abspath(job_dir)
        self.gcs_root = os.path.abspath(gcs_root)
        self.images = dict(images or {})
        self.pass_env = tuple(pass_env)
        self.gcs_endpoint = gcs_endpoint
        self.environ = dict(os.environ if environ is None else environ)
        self.me = f"{socket.gethostname()}:{os.getpid()}:{process_start_time(os.getpid()) or 0}"
        self._networks: TrialNetworks | None = None

    def open(self, say: Callable[[str], None]) -> None:
        removed = remove_left_containers(self.runtime, self.job_dir, keep=self.me)
        remove_left_networks(self.runtime, self.job_dir)  # a dead controller's (one in use stays: rm refuses)
        if removed:
            say(f"removed {len(removed)} container(s) an earlier controller of this job left: {', '.join(removed[:3])}")
        os.makedirs(self.gcs_root, exist_ok=True)
        self._networks = TrialNetworks(self.runtime, job_dir=self.job_dir, me=self.me, environ=self.environ,
                                       gcs_root=self.endpoint_root(say), say=say)

    def endpoint_root(self, say: Callable[[str], None]) -> str | None:
        """What the trial networks' endpoints serve: the job's buckets, unless there is to be no endpoint
        (off, not installed, or the user's own ``STORAGE_EMULATOR_HOST`` passed on purpose)."""
        own = self.environ.get(protocol.ENV_STORAGE_EMULATOR_HOST)
        if own and protocol.ENV_STORAGE_EMULATOR_HOST in self.pass_env:
            if is_loopback_url(own):
                say(f"{protocol.ENV_STORAGE_EMULATOR_HOST}={rt.printable_line(own)} (--pass-env) is on this host's "
                    f"loopback, which container trials cannot reach from their own network: give an address they "
                    f"reach, or leave it out and they get the job's endpoint on their network's gateway")
            return None
        if not self.gcs_endpoint:
            return None
        if gcs_emulator.disabled(self.environ):
            return None
        if not gcs_emulator.available():
            return None  # (the extra is optional: a host job says nothing about it either)
        if own:
            say(f"{protocol.ENV_STORAGE_EMULATOR_HOST}={rt.printable_line(own)} of this shell is not given to "
                f"trials: they get the job's endpoint on their network's gateway, serving {self.gcs_root} as /gcs "
                f"does; keep yours with --pass-env {protocol.ENV_STORAGE_EMULATOR_HOST}")
        return self.gcs_root

    def image_of(self, image: str | None) -> str:
        if not image:
            raise ConfigError("a worker pool has no image to run (containerSpec.imageUri / executorImageUri)")
        return check_reference(self.images.get(image, image), "the worker pool's image")

    def run_args(self, request: ReplicaStart, container: str, network: TrialNetwork | None = None) -> list[str]:
        """The runtime's ``run`` arguments for one replica attempt on its trial's ``network`` (None: no network)."""
        env = {**{k: self.environ[k] for k in self.pass_env if k in self.environ}, **request.env,
               protocol.ENV_GCS_ROOT: GCS_MOUNT, **(network.env() if network is not None else {})}
        trial = env.get(protocol.ENV_TRIAL_ID, "")
        labels = {rt.LABEL: "1", rt.LABEL_JOB_DIR: self.job_dir, rt.LABEL_JOB: env.get(protocol.ENV_JOB_ID, ""),
                  rt.LABEL_TRIAL: trial, rt.LABEL_REPLICA: request.name,
                  rt.LABEL_ATTEMPT: env.get(protocol.ENV_ATTEMPT, "0"), rt.LABEL_CONTROLLER: self.me}
        # --rm: the runtime removes it when it exits; podman's --replace a same-named one a dead controller left
        args = ["run", "--rm", "--name", container]
        args += network.run_args(request.name, replica_count(request.env)) if network else ["--network=none"]
        if self.runtime.name == "podman":
            args.append("--replace")
        for key, value in labels.items():
            args += ["--label", f"{key}={value}"]
        mounts = {self.gcs_root: GCS_MOUNT, os.path.abspath(request.trial_dir): os.path.abspath(request.trial_dir)}
        for out in request.outputs:  # a local AIP_* base (a gs:// one is under /gcs already)
            path = os.path.abspath(out)
            if not (path + "/").startswith(self.gcs_root + "/"):
                os.makedirs(path, exist_ok=True)
                mounts[path] = path
        entrypoint = list(request.entrypoint) if request.entrypoint else None
        after = list(request.args)
        if request.package_uris:
            packages = []
            for k, uri in enumerate(request.package_uris):
                if protocol.is_gcs_uri(uri):
                    packages.append(protocol.local_path(uri, GCS_MOUNT))
                else:  # a local sdist or wheel, read-only in the container
                    host = os.path.abspath(uri)
                    inside = f"{PACKAGES_MOUNT}/{k}/{os.path.basename(host)}"
                    mounts[host] = inside + ":ro"
                    packages.append(inside)
            module = entrypoint[-1] if entrypoint else ""
            entrypoint = ["python3", "-c", _PACKAGE_RUNNER, str(len(packages)), *packages, module]
        for host, inside in mounts.items():
            args += ["--volume", f"{host}:{inside}"]
        if request.memory_limit_mb is not None:
            args += ["--memory", f"{request.memory_limit_mb}m", "--memory-swap", f"{request.memory_limit_mb}m"]
        if request.devices:
            if self.runtime.name == "podman":
                for device in request.devices:
                    args += ["--device", f"nvidia.com/gpu={device}"]
            else:
                args += ["--gpus", '"device=' + ",".join(request.devices) + '"']
        for key, value in env.items():
            args += ["--env", f"{key}={value}"]
        if entrypoint:  # replaces the image's ENTRYPOINT, and with it its CMD (as on Vertex)
            args += [f"--entrypoint={entrypoint[0]}", "--", self.image_of(request.image), *entrypoint[1:], *after]
        else:
            args += ["--", self.image_of(request.image), *after]
        return args

    def start(self, request: ReplicaStart) -> ContainerReplica:
        try:
            return self._start(request)
        except rt.RuntimeUnavailable as err:  # the runtime failed us, not the trainer: an internal error
            raise BackendError(f"replica {request.name}: {err}") from err

    def _start(self, request: ReplicaStart) -> ContainerReplica:
        attempt = int(request.env.get(protocol.ENV_ATTEMPT, "0") or 0)
        container = rt.container_name(self.job_dir, request.env.get(protocol.ENV_TRIAL_ID, "x"), request.name, attempt)
        if self.runtime.name != "podman":  # docker has no --replace: one a dead controller left goes first
            self.runtime.call("rm", "--force", "--", container)
        if self._networks is None:
            raise BackendError(f"replica {request.name}: the container backend was not opened")
        network = self._networks.take(request.env.get(protocol.ENV_TRIAL_ID, "x"), self.image_of(request.image))
        args = self.run_args(request, container, network)
        try:
            client = start_replica([*self.runtime.command, *args], env=self.environ, cwd=self.job_dir,
                                   stdout_path=request.stdout_path, stderr_path=request.stderr_path,
                                   name=request.label, echo=request.echo)
        except ConfigError as err:  # the runtime's own program is gone: not the trainer's fault
            raise BackendError(f"replica {request.name}: {self.runtime.name} could not be started: {err}") from err
        replica = ContainerReplica(client, runtime=self.runtime, container=container,
                                   memory_limited=request.memory_limit_mb is not None)
        network.replicas.append(replica)
        return replica

    def check_memory(self) -> None:
        """The runtime enforces ``--memory`` (the kernel's OOM killer; its flag is read at exit)."""

    def close(self) -> None:
        with contextlib.suppress(rt.RuntimeUnavailable):  # the job's end is written whatever the runtime does
            remove_left_containers(self.runtime, self.job_dir, only=self.me)
        if self._networks is not None:
            with contextlib.suppress(rt.RuntimeUnavailable):
                self._networks.close()
            self._networks = None


def is_loopback_url(url: str) -> bool:
    """Whether ``url`` (a ``STORAGE_EMULATOR_HOST``) names this host's loopback (unreachable from a trial network)."""
    try:
        host = urllib.parse.urlsplit(url if "//" in url else f"http://{url}").hostname or ""
        return host == "localhost" or host.endswith(".localhost") or ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def replica_count(env: Mapping[str, str]) -> int:
    """How many replicas the trial has, from its CLUSTER_SPEC (1 when it cannot tell)."""
    try:
        cluster = json.loads(env.get(protocol.ENV_CLUSTER_SPEC, "{}")).get("cluster", {})
        return sum(len(v) for v in cluster.values()) or 1
    except (ValueError, AttributeError, TypeError):
        return 1


def remove_left_containers(runtime: rt.Runtime, job_dir: str, *, keep: str | None = None,
                           only: str | None = None) -> list[str]:
    """Remove this job's containers: those of controllers that are gone (``keep``: this one's), or
    those of controller ``only``. Returns the names of the replicas' (their networks' keepers go
    after them, unnamed: a runtime removes no container whose network namespace another uses)."""
    listed = runtime.call("ps", "--all", "--filter", f"label={rt.LABEL_JOB_DIR}={os.path.abspath(job_dir)}",
                          "--format", "{{.Names}}\t{{index .Labels \"" + rt.LABEL_CONTROLLER + "\"}}\t"
                          "{{index .Labels \"" + rt.LABEL_REPLICA + "\"}}")
    if listed.returncode != 0:
        return []
    names: list[str] = []
    keepers: list[str] = []
    for line in listed.stdout.decode("utf-8", "replace").splitlines():
        name, _, rest = line.partition("\t")
        owner, _, replica = rest.partition("\t")
        if not name.startswith("trials-"):
            continue
        if only is not None and owner != only:
            continue
        if only is None and (owner == keep or controller_alive(owner)):
            continue
        (keepers if replica == KEEPER_REPLICA else names).append(name)
    for batch in (names, keepers):
        if batch:
            runtime.call("rm", "--force", "--", *batch)
    return names


def controller_alive(owner: str) -> bool:
    """Whether the controller ``host:pid:start_time`` still runs (another host's: assumed so)."""
    host, _, rest = owner.partition(":")
    pid_text, _, start = rest.partition(":")
    if host != socket.gethostname() or not pid_text.isdigit():
        return host != socket.gethostname()
    pid = int(pid_text)
    with contextlib.suppress(ValueError):
        return process_start_time(pid) == int(start or 0) and pid != 0
    return False
