"""Each container trial's own network, off the host's: made by the runtime, its gateway serving the job's
local Cloud Storage endpoint, reused by the next trial once every replica of the last one is gone.

A trial network is a bridge network of the runtime (``podman network create``), its gateway the host's
address on it. The host's loopback (a PostgreSQL on 127.0.0.1, the controller's own ports) is not
reachable from it; egress is what the runtime gives a bridge network (NAT to the host's routes, the
runtime's DNS). The job's storage endpoint listens on the gateway only (never on a wildcard address),
so it is reached by the containers of that network and from this host, and a trial is told
``STORAGE_EMULATOR_HOST=http://GATEWAY:PORT``: the ``Host`` it sends is that address and port.

A keeper container (the runtime's pause program, ``catatonit -P``, run in the trial's own image) holds
each network's namespace: a one-replica trial joins it (``--network container:KEEPER``) instead of
being attached itself, which costs a replica start what the host network did (attaching a container
to a bridge network sets its firewall up and down with it: ~190 ms more a start here). The replicas
of a trial of several are attached to the network each under its Vertex name (``workerpool1-0``).
A network is used by one trial at a time; at most as many exist as trials ran at once.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from trials import protocol
from trials.controller.backend.protocol import BackendError, ReplicaExit
from trials.controller.container import runtime as rt
from trials.controller.gcs import emulator as gcs_emulator
from trials.printable import printable

KEEPER_MOUNT = "/trials-keeper"
KEEPER_REPLICA = "keeper"  # a keeper's trials.replica label
# Where podman's and Debian's packages put catatonit (static: it runs in any image of this machine's arch)
KEEPER_PROGRAMS = ("/usr/libexec/podman/catatonit", "/usr/lib/podman/catatonit", "/usr/bin/catatonit")
_KEEPER_START_TIMEOUT_S = 60.0


class Exited(Protocol):
    """A replica on a network: whether (and how) it exited, its container's name."""

    container: str

    def poll(self) -> ReplicaExit | None: ...


@dataclass(slots=True, kw_only=True)
class TrialNetwork:
    """One network: its name, gateway, keeper container, endpoint, and the trial using it."""

    name: str
    gateway: str
    keeper: str | None = None
    endpoint: gcs_emulator.Emulator | None = None
    owner: str = ""
    replicas: list[Exited] = field(default_factory=list)

    def free(self) -> bool:
        """No replica of its trial runs on it."""
        return all(r.poll() is not None for r in self.replicas)

    def run_args(self, replica: str, n_replicas: int) -> list[str]:
        """How a replica joins it: the keeper's namespace (one replica), else attached under its name."""
        if n_replicas < 2 and self.keeper is not None:
            return [f"--network=container:{self.keeper}"]
        return [f"--network={self.name}", f"--network-alias={replica}", f"--hostname={replica}"]

    def env(self) -> dict[str, str]:
        """What its replicas get to reach the job's storage endpoint (nothing when it has none)."""
        return {protocol.ENV_STORAGE_EMULATOR_HOST: self.endpoint.host} if self.endpoint is not None else {}


def endpoint_host(gateway: str, port: int) -> str:
    """The ``STORAGE_EMULATOR_HOST`` of a network's endpoint; its ``Host`` header is what follows ``http://``."""
    return f"http://[{gateway}]:{port}" if ":" in gateway else f"http://{gateway}:{port}"


def keeper_program() -> str | None:
    """The runtime's static pause program on this host (None: one-replica trials are attached directly)."""
    found = [*KEEPER_PROGRAMS, shutil.which("catatonit") or ""]
    return next((p for p in found if p and os.path.isfile(p) and os.access(p, os.X_OK)), None)


class TrialNetworks:
    """The trial networks of one controller of one job.

    Args:
        runtime: the runtime.
        job_dir: the job's folder (labels name it, its hash names the networks).
        me: this controller's ``host:pid:start`` (a label: a later controller removes what a dead one left).
        gcs_root: the buckets the endpoints serve (None: no endpoint).
        environ: the host environment (the endpoint's own).
        say: one-line notes (said once each).
    """

    def __init__(self, runtime: rt.Runtime, *, job_dir: str, me: str, gcs_root: str | None,
                 environ: Mapping[str, str], say: Callable[[str], None] = lambda line: None):
        self.runtime = runtime
        self.job_dir = job_dir
        self.me = me
        self.gcs_root = gcs_root
        self.environ = environ
        self.say = say
        self.networks: list[TrialNetwork] = []
        self._prefix = f"trials-{rt.job_tag(job_dir)}-{os.getpid()}"
        self._keeper_program = keeper_program()
        self._said: set[str] = set()
        self._is_rootless: bool | None = None

    def take(self, trial: str, image: str) -> TrialNetwork:
        """The network of ``trial``: its own, else a free one (taken over), else a new one."""
        for net in self.networks:
            if net.owner == trial:
                return net
        free = next((n for n in self.networks if n.free()), None)
        if free is None:
            net = self._make(len(self.networks), image)
            self.networks.append(net)
        else:
            net = free
            self._clear(net)
        net.owner, net.replicas = trial, []
        return net

    def _clear(self, net: TrialNetwork) -> None:
        """A replica whose runtime client was killed may have left its container: gone before reuse."""
        left = [r.container for r in net.replicas if (ended := r.poll()) is not None and ended.status >= 128]
        if left:
            self.runtime.call("rm", "--force", "--", *left)

    def _make(self, k: int, image: str) -> TrialNetwork:
        name = f"{self._prefix}-net{k}"
        labels = ["--label", f"{rt.LABEL_JOB_DIR}={self.job_dir}", "--label", f"{rt.LABEL_CONTROLLER}={self.me}"]
        made = self.runtime.call("network", "create", *labels, "--", name)
        if made.returncode != 0:  # one of a dead controller of this pid (open() removes those not in use)
            self.runtime.call("network", "rm", "--force", "--", name)
            made = self.runtime.call("network", "create", *labels, "--", name)
        if made.returncode != 0:
            raise BackendError(f"{self.runtime.name} could not create a trial network: {_last_line(made.stderr)}")
        fmt = "{{range .Subnets}}{{.Gateway}} {{end}}" if self.runtime.name == "podman" else \
            "{{range .IPAM.Config}}{{.Gateway}} {{end}}"
        out = self.runtime.call("network", "inspect", "--format", fmt, "--", name)
        gateway = next(iter(out.stdout.decode("ascii", "replace").split()), "") if out.returncode == 0 else ""
        net = TrialNetwork(name=name, gateway=gateway)
        keeper = self._start_keeper(f"{self._prefix}-keeper{k}", name, image)  # overlaps the endpoint's start
        net.endpoint = self._serve(gateway)
        net.keeper = self._keeper_started(keeper)
        return net

    def _start_keeper(self, name: str, network: str,
                      image: str) -> tuple[str, subprocess.Popen[bytes]] | None:
        if self._keeper_program is None:
            self._note("keeper", "no catatonit on this host: a one-replica trial is attached to its network itself "
                                 "(~190 ms more a replica start than joining a kept network namespace)")
            return None
        args = ["run", "--detach", "--rm", f"--name={name}", f"--network={network}", "--cap-drop=all",
                "--label", f"{rt.LABEL}=1", "--label", f"{rt.LABEL_JOB_DIR}={self.job_dir}",
                "--label", f"{rt.LABEL_REPLICA}={KEEPER_REPLICA}", "--label", f"{rt.LABEL_CONTROLLER}={self.me}",
                f"--volume={self._keeper_program}:{KEEPER_MOUNT}:ro", f"--entrypoint={KEEPER_MOUNT}", "--", image, "-P"]
        if self.runtime.name == "podman":
            args.insert(1, "--replace")
        try:
            return name, subprocess.Popen([*self.runtime.command, *args], stdout=subprocess.DEVNULL,
                                          stderr=subprocess.PIPE, env=None if self.runtime.environ is None
                                          else dict(self.runtime.environ))
        except OSError as err:
            raise rt.RuntimeUnavailable(f"{self.runtime.program} could not be run: {err.strerror or err}") from err

    def _keeper_started(self, started: tuple[str, subprocess.Popen[bytes]] | None) -> str | None:
        if started is None:
            return None
        name, proc = started
        try:
            _, err = proc.communicate(timeout=_KEEPER_START_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            err = b"it did not start in time"
        if proc.returncode == 0:
            return name
        self._note("keeper-failed", f"the keeper of a trial network did not start ({_last_line(err)}): one-replica "
                                    f"trials are attached to their network themselves (a slower start)")
        return None

    def _serve(self, gateway: str) -> gcs_emulator.Emulator | None:
        if self.gcs_root is None:
            return None
        if self._rootless():  # its gateway is in the user's own namespace: on the host it may be another's
            self._note("endpoint", f"no local Cloud Storage endpoint for container trials: rootless "
                                   f"{self.runtime.name}'s networks are not on this host (/gcs works as ever)")
            return None
        if not gateway:
            self._note("gateway", f"{self.runtime.name} names no gateway of its trial networks: container trials "
                                  f"get no local Cloud Storage endpoint")
            return None
        gcs, why = gcs_emulator.start(self.gcs_root, self.environ, bind=gateway)
        if gcs is None:
            self._note("endpoint", f"no local Cloud Storage endpoint for container trials on {gateway}: {why}")
            return None
        gcs.host = endpoint_host(gateway, int(gcs.host.rpartition(":")[2]))
        return gcs

    def _rootless(self) -> bool:
        """Whether the runtime's networks live in a user namespace of their own (rootless podman or docker)."""
        if self._is_rootless is None:
            if self.runtime.name == "podman":
                self._is_rootless = os.geteuid() != 0
            else:
                out = self.runtime.call("info", "--format", "{{json .SecurityOptions}}", timeout=30)
                self._is_rootless = out.returncode != 0 or b"rootless" in out.stdout
        return self._is_rootless

    def _note(self, key: str, line: str) -> None:
        if key not in self._said:
            self._said.add(key)
            self.say(line)

    def close(self) -> None:
        """Remove the networks (their keepers first: docker removes no network in use) and stop their endpoints."""
        keepers = [n.keeper for n in self.networks if n.keeper]
        try:
            if keepers:
                self.runtime.call("rm", "--force", "--", *keepers)
            for net in self.networks:
                self.runtime.call("network", "rm", "--force", "--", net.name)
        finally:
            for net in self.networks:
                if net.endpoint is not None:
                    net.endpoint.stop()
            self.networks.clear()


def remove_left_networks(runtime: rt.Runtime, job_dir: str) -> None:
    """Remove this job's networks that no container uses (a dead controller's: the runtime refuses the others)."""
    listed = runtime.call("network", "ls", "--filter", f"label={rt.LABEL_JOB_DIR}={job_dir}", "--format", "{{.Name}}")
    names = listed.stdout.decode("utf-8", "replace").split() if listed.returncode == 0 else []
    for name in names:
        if name.startswith("trials-"):
            runtime.call("network", "rm", "--", name)


def _last_line(stderr: bytes) -> str:
    said = stderr.decode("utf-8", "replace").strip().splitlines()
    return printable(said[-1] if said else "no message", limit=300)
