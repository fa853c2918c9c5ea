"""The seam between the job loop and what runs a replica: a replica backend.

The loop decides; a backend starts a replica and tells the loop what it did, through the two
protocols below and nothing else (no ``getattr``, no ``isinstance`` on a handle). The loop asks
each handle the same questions whichever backend made it: has it exited, with which Vertex-style
status, when; stop it (SIGTERM, a grace period, SIGKILL); what did it leave running; where did its
writes to the launch folder go.

Backends:
    - host processes: :class:`trials.controller.process.host.HostBackend` (the exec shim, the
      namespace sandbox, a cgroup or the subreaper, the local Cloud Storage endpoint);
    - containers of the pools' images: :class:`trials.controller.container.backend.ContainerBackend`
      (podman or docker);
    - in-process calls: :class:`trials.controller.inprocess.backend.InProcessBackend` (``trials.tune``);
    - the scripted backend of the loop's replay tests (``tests/controller/loop/backendkit.py``).

Modelled on pytest-xdist's ``scheduler/protocol.py`` and syne-tune's ``backend/trial_backend.py``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol, TextIO

MAX_INTERNAL_RETRIES = 2  # Vertex retries an attempt that failed for an internal error (3 attempts in all)
INTERNAL_ERROR_MESSAGE = "Internal error occurred for the current attempt."  # Vertex's words


class BackendError(Exception):
    """The backend could not start a replica for a reason that is not the trainer's (the exec shim or
    a container runtime failed). Vertex calls it an internal error: the attempt is retried
    (``MAX_INTERNAL_RETRIES``), then the trial fails with ``INTERNAL_ERROR_MESSAGE``, not as a user error."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ReplicaStart:
    """Everything a backend needs to start one replica attempt.

    Attributes:
        argv: the command (never through a shell); the tuning flags are its last arguments.
        env: the replica's whole environment (nothing of the host's is added by the backend,
            except what the backend itself provides, such as ``STORAGE_EMULATOR_HOST``).
        cwd: its working folder (the launch folder).
        name: the replica's name (``workerpool0-0``).
        label: the prefix of its echoed output lines (``3/workerpool0-0`` or the name).
        trial_dir: the trial's folder (the controller's; the replica may write there).
        stdout_path, stderr_path: its log files (appended to by each attempt).
        outputs: host folders the replica writes through to besides ``trial_dir`` (its local
            ``AIP_*`` base folder); the job's ``/gcs`` root is the backend's own.
        devices: the device ids handed to it (None: devices untouched).
        memory_limit_mb: its memory limit (an exit over it looks like the OOM killer's, 137).
        echo: copy its output lines there, prefixed with ``label``.
        image: the pool's image (``containerSpec.imageUri`` or ``executorImageUri``), for a backend
            that runs images; ``entrypoint``: the command that replaces its ENTRYPOINT (None: the
            image's own); ``args``: what follows it (the pool's args, then the tuning flags).
        package_uris: a python package pool's ``packageUris``, installed before it runs.
    """

    argv: tuple[str, ...]
    env: Mapping[str, str]
    cwd: str
    name: str
    label: str
    trial_dir: str
    stdout_path: str
    stderr_path: str
    outputs: tuple[str, ...] = ()
    devices: tuple[str, ...] | None = None
    memory_limit_mb: int | None = None
    echo: TextIO | None = None
    image: str | None = None
    entrypoint: tuple[str, ...] | None = None
    args: tuple[str, ...] = ()
    package_uris: tuple[str, ...] = ()


class ReplicaHandle(Protocol):
    """One started replica attempt, as its backend reports it.

    Attributes:
        name: the replica's name.
        oom_killed: it was killed for going over its memory limit.
        stop_requested_at: when the loop began stopping it (monotonic), or None.
        exited_mono: when it exited (monotonic), noted at the exit itself; None while it runs or
            when the backend cannot tell (the loop then takes the moment it saw the exit).
        leftovers: ``"pid (name)"`` of what it left running after it exited (killed by the backend).
        upper_dir: where its writes to the launch folder went (a private copy-on-write view), or None.
        placement: where it ran, for the trial's attempts (``slurmJobId``, ``node``); {} on this host.
        signal: the signal that ended it (its default action), where the backend can tell; else None (it
            exited, or the backend gives only a status: an image's runtime, Slurm).
    """

    name: str
    oom_killed: bool
    stop_requested_at: float | None
    exited_mono: float | None
    leftovers: list[str]
    upper_dir: str | None
    placement: dict[str, Any]

    @property
    def signal(self) -> int | None: ...

    def poll(self) -> int | None:
        """The Vertex-style exit status once it exited (the code, or 128 + the signal), else None."""
        ...

    def begin_stop(self, now: float) -> float:
        """Ask it to stop (SIGTERM, once); returns when the stop began."""
        ...

    def advance_stop(self, now: float, grace_s: float) -> bool:
        """One non-blocking stop step (SIGKILL after ``grace_s``); True once all of it is gone."""
        ...

    def send_signal_group(self, sig: int) -> None:
        """Send ``sig`` to all of it (its process group and every descendant)."""
        ...

    def record(self) -> dict[str, Any] | None:
        """What a later controller needs to find what it left running (``pids.json``); None: nothing."""
        ...

    def close(self) -> None:
        """Flush the echo of its output (after it exited, or before it is restarted)."""
        ...


class ReplicaBackend(Protocol):
    """What runs the replicas of one job loop."""

    def open(self, say: Callable[[str], None]) -> None:
        """Before the first replica starts: set up what replicas share (their container view, the
        local Cloud Storage endpoint); ``say`` a one-line warning for each thing that is missing."""
        ...

    def start(self, request: ReplicaStart) -> ReplicaHandle:
        """Start one replica attempt.

        Raises:
            BackendError: the backend itself failed (the loop retries the attempt, as Vertex does).
            OSError: something could not be written (the loop fails the trial, the job goes on).
            ConfigError: the command cannot run (a missing or non-executable program, a missing folder).
        """
        ...

    def check_memory(self) -> None:
        """Kill each of its running replicas that is over its memory limit (its ``oom_killed`` tells)."""
        ...

    def close(self) -> None:
        """After the last replica: stop what ``open`` started."""
        ...
