"""The container runtime a job's replicas run under: podman or docker, found, checked and driven.

Every call is a short subprocess of the runtime's command line (``podman run``, ``kill``, ``inspect``,
``rm``), its operands after ``--`` (an image or a name is never read as an option); nothing is parsed
from what a trainer wrote. The few settings a machine may need (an OCI
runtime, a cgroup manager) come from ``TRIALS_CONTAINER_ARGS`` (global options put before every
subcommand, e.g. ``--runtime runc --cgroup-manager=cgroupfs``); podman also reads ``CONTAINERS_CONF``.
"""

from __future__ import annotations

import hashlib
import os
import shlex
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from trials.controller.container.reference import check_reference
from trials.errors import ConfigError

RUNTIMES = ("podman", "docker")
HOST = "host"
CHOICES = (HOST, *RUNTIMES)
ENV_GLOBAL_ARGS = "TRIALS_CONTAINER_ARGS"
LABEL = "trials"  # every container of ours: label trials=1; the others below name it
LABEL_JOB, LABEL_TRIAL, LABEL_REPLICA, LABEL_ATTEMPT = "trials.job", "trials.trial", "trials.replica", "trials.attempt"
LABEL_JOB_DIR, LABEL_CONTROLLER = "trials.job_dir", "trials.controller"
_CALL_TIMEOUT_S = 60.0
_PROBE_ENTRYPOINT = "/trials-probe-nonexistent"  # exec fails after the runtime set the container up


# What the runtime prints when this machine needs a setting, and the one line that names it.
_KNOWN_FAILURES = (
    ("rlimit", "the container runtime may not raise resource limits here: set `default_ulimits = []` under "
                  "[containers] in a containers.conf and point CONTAINERS_CONF at it"),
    ("cgroups in hybrid mode not supported", "crun does not support this machine's hybrid cgroups: use runc, "
                                             f"e.g. {ENV_GLOBAL_ARGS}='--runtime runc --cgroup-manager=cgroupfs'"),
    ("cannot connect to the docker daemon", "the docker daemon is not running (or this user may not reach it): "
                                            "start it, or use --runtime podman"),
    ("is the docker daemon running", "the docker daemon is not running: start it, or use --runtime podman"),
    ("permission denied while trying to connect", "this user may not use the docker daemon: join the docker "
                                                  "group, or use --runtime podman (rootless)"),
)


class RuntimeUnavailable(ConfigError):
    """The runtime is missing or cannot start containers on this machine (one line: the fix)."""


@dataclass(frozen=True, slots=True)
class Runtime:
    """One container runtime command line: ``podman`` or ``docker`` and its global options."""

    name: str
    program: str
    global_args: tuple[str, ...] = ()
    environ: Mapping[str, str] | None = field(default=None, compare=False)  # the client's (None: os.environ)

    @property
    def command(self) -> list[str]:
        return [self.program, *self.global_args]

    def call(self, *args: str, timeout: float = _CALL_TIMEOUT_S, stdin: bytes | None = None,
             env: Mapping[str, str] | None = None) -> subprocess.CompletedProcess[bytes]:
        """Run one runtime subcommand to its end (its output captured, never printed raw)."""
        try:
            env = env if env is not None else self.environ
            return subprocess.run([*self.command, *args], input=stdin, capture_output=True, timeout=timeout,
                                  env=None if env is None else dict(env), check=False)
        except subprocess.TimeoutExpired as err:
            raise RuntimeUnavailable(f"`{self.name} {args[0]}` did not answer within {timeout:.0f} s") from err
        except OSError as err:
            raise RuntimeUnavailable(f"{self.program} could not be run: {err.strerror or err}") from err

    def fix_for(self, output: str) -> str | None:
        """The one-line fix for a failure this runtime printed, when it is a known machine setting."""
        low = output.lower()
        return next((fix for needle, fix in _KNOWN_FAILURES if needle in low), None)

    def image_exists(self, image: str) -> bool:
        return self.call("image", "inspect", "--format", "{{.Id}}", "--", image).returncode == 0

    def check_starts(self, image: str) -> None:
        """Start a throwaway container of ``image`` whose exec must fail: a runtime that cannot set a
        container up (resource limits, cgroups) fails before the exec, with its own message."""
        run = self.call("run", "--rm", "--network=none", f"--entrypoint={_PROBE_ENTRYPOINT}", "--", image)
        said = run.stderr.decode("utf-8", "replace")
        fix = self.fix_for(said)
        if fix is not None:
            raise RuntimeUnavailable(f"--runtime {self.name}: {self.name} cannot start a container of {image}: {fix}")
        if run.returncode == 0 or (run.returncode in (126, 127) and _PROBE_ENTRYPOINT in said
                                   and ("not found" in said or "no such file" in said.lower())):
            return  # set up, then no such program: the runtime works
        last = next((ln for ln in reversed(said.strip().splitlines()) if ln.strip()), "no message")
        raise RuntimeUnavailable(f"--runtime {self.name}: {self.name} cannot start a container of {image} "
                                 f"(exit {run.returncode}): {printable_line(last)}")


def printable_line(text: str, limit: int = 300) -> str:
    from trials.printable import printable

    return printable(text[:limit])


def find(name: str, environ: Mapping[str, str] | None = None) -> Runtime:
    """The runtime ``name`` (podman or docker) on PATH, with the global options of ``TRIALS_CONTAINER_ARGS``.

    Raises:
        RuntimeUnavailable: it is not installed, or the options cannot be split.
    """
    environ = os.environ if environ is None else environ
    if name not in RUNTIMES:
        raise ConfigError(f"--runtime: expected one of {', '.join(CHOICES)}, got {name!r}")
    program = shutil.which(name, path=environ.get("PATH", os.defpath))
    if program is None:
        other = next(r for r in RUNTIMES if r != name)
        hint = f" ({other} is: --runtime {other})" if shutil.which(other, path=environ.get("PATH")) else ""
        raise RuntimeUnavailable(f"--runtime {name}: {name} is not installed on this machine (not on PATH){hint}; "
                                 f"install it (Debian: apt-get install {name if name == 'podman' else 'docker.io'})")
    try:
        global_args = tuple(shlex.split(environ.get(ENV_GLOBAL_ARGS, "")))
    except ValueError as err:
        raise ConfigError(f"${ENV_GLOBAL_ARGS}: expected runtime options as a shell would split them, got "
                          f"{environ.get(ENV_GLOBAL_ARGS)!r} ({err})") from None
    return Runtime(name=name, program=program, global_args=global_args, environ=dict(environ))


def choose(name: str, environ: Mapping[str, str] | None = None) -> str:
    """``--runtime``: ``host``, ``podman``, ``docker``; ``container`` picks podman where both exist."""
    if name == "container":
        path = (os.environ if environ is None else environ).get("PATH", os.defpath)
        return next((r for r in RUNTIMES if shutil.which(r, path=path)), "podman")
    if name not in CHOICES:
        raise ConfigError(f"--runtime: expected one of {', '.join(CHOICES)} or container, got {name!r}")
    return name


def parse_image_map(entries: Sequence[str]) -> dict[str, str]:
    """``--image URI=LOCAL`` (repeatable): the local image that stands in for a spec's registry URI."""
    out: dict[str, str] = {}
    for entry in entries:
        uri, sep, local = entry.partition("=")
        if not sep or not uri or not local:
            raise ConfigError(f"--image: expected URI=LOCAL_IMAGE (e.g. us-docker.pkg.dev/p/r/t:1=localhost/t:1), "
                              f"got {entry!r}")
        out[uri] = check_reference(local, f"--image {uri}=LOCAL")
    return out


def job_tag(job_dir: str) -> str:
    """The job folder's hash, in the names of its containers and networks."""
    return hashlib.sha256(os.path.abspath(job_dir).encode()).hexdigest()[:10]


def container_name(job_dir: str, trial_id: str, replica: str, attempt: int) -> str:
    """A name no other job's container has: the job folder's hash, the trial, replica and attempt."""
    return f"trials-{job_tag(job_dir)}-{trial_id}-{replica}-{attempt}"
