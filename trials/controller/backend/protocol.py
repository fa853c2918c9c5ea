"""The seam between the job loop and what runs a replica: a replica backend.

The loop decides; a backend starts a replica and tells the loop what it did, through the two
protocols below and nothing else (no ``getattr``, no ``isinstance`` on a handle). The loop asks
each handle the same questions whichever backend made it: has it ended (``poll``: None while it
runs, then its :class:`ReplicaExit`: the Vertex-style status, when, how, what it left running,
where it ran); stop it (SIGTERM, a grace period, SIGKILL: the steps are
:class:`~trials.controller.backend.stopping.StopSteps`, each handle adds only how a signal reaches
its replica and when all of it is gone); where did its writes to the launch folder go.

Backends:
    - host processes: :class:`trials.controller.process.host.HostBackend` (the exec shim, the
      namespace sandbox, a cgroup or the subreaper, the local Cloud Storage endpoint);
    - containers of the pools' images: :class:`trials.controller.container.backend.ContainerBackend`
      (podman or docker);
    - Slurm jobs: :class:`trials.controller.slurm.backend.SlurmBackend`;
    - in-process calls: :class:`trials.controller.inprocess.backend.InProcessBackend` (``trials.tune``);
    - the scripted backend of the loop's replay tests (``tests/controller/loop/backendkit.py``).
They all pass one contract suite (``tests/controller/backend/test_backend_contract.py``).

Modelled on pytest-xdist's ``scheduler/protocol.py`` and syne-tune's ``backend/trial_backend.py``.
"""

from __future__ import annotations

import enum
import signal as signals
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
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


class ExitHow(str, enum.Enum):
    """How a replica ended (members only ever get added)."""

    EXIT = "exit"  # it exited with a code (what a backend that sees only a status says, but for its own SIGKILL)
    SIGNAL = "signal"  # a signal ended it (``signal`` says which)
    OOM = "oom"  # killed for going over its memory limit (the kernel's OOM killer, or the backend at the limit)
    LOST = "lost"  # its end could not be observed (a Slurm job that vanished, a warm launcher that died)

    def __str__(self) -> str:
        return str(self.value)

    def __format__(self, format_spec: str) -> str:
        return format(str(self.value), format_spec)


@dataclass(frozen=True, slots=True, kw_only=True)
class ReplicaExit:
    """How one replica attempt ended, as its backend saw it (what ``ReplicaHandle.poll`` returns).

    Attributes:
        status: Vertex-style: the exit code, or 128 + the signal (SIGKILL, an OOM kill, a lost node: 137).
        exited_mono: when it ended (monotonic seconds): noted at the exit itself where the backend can
            (the host's SIGCHLD, a Slurm entry's exit file), else the moment its backend saw it.
        how: exit, signal, oom or lost.
        signal: the signal that ended it, where the backend can tell (the host's replicas; a SIGKILL the
            backend itself sent, for one that sees only a status); else None.
        leftovers: ``"pid (name)"`` of what it left running after it exited, killed by the backend (filled
            in by the stop steps that follow the exit: a later ``poll`` returns the record with them).
        placement: where it ran, for the trial's attempts (``slurmJobId``, ``node``); empty on this host.

    Example:
        >>> ReplicaExit.of_returncode(-9, exited_mono=12.5).status
        137
    """

    status: int
    exited_mono: float
    how: ExitHow = ExitHow.EXIT
    signal: int | None = None
    leftovers: tuple[str, ...] = ()
    placement: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "how", ExitHow(self.how))
        if self.status < 0:
            raise ValueError(f"status must be >= 0 (Vertex-style), got {self.status=}")
        if self.how is ExitHow.SIGNAL and (self.signal is None or self.status != 128 + self.signal):
            raise ValueError(f"an exit by signal needs status 128 + signal, got {self.status=} {self.signal=}")
        object.__setattr__(self, "leftovers", tuple(self.leftovers))
        object.__setattr__(self, "placement", MappingProxyType(dict(self.placement)))

    @property
    def oom_killed(self) -> bool:
        return self.how is ExitHow.OOM

    @classmethod
    def of_returncode(cls, returncode: int, *, exited_mono: float, oom: bool = False,
                      leftovers: tuple[str, ...] = ()) -> ReplicaExit:
        """The record of a process's ``returncode`` (negative: the signal that ended it)."""
        sig = -returncode if returncode < 0 else None
        how = ExitHow.OOM if oom else ExitHow.SIGNAL if sig is not None else ExitHow.EXIT
        return cls(status=returncode if sig is None else 128 + sig, exited_mono=exited_mono, how=how, signal=sig,
                   leftovers=leftovers)

    @classmethod
    def of_status(cls, status: int, *, exited_mono: float, oom: bool = False, lost: bool = False,
                  killed: bool = False, leftovers: tuple[str, ...] = (),
                  placement: Mapping[str, str] | None = None) -> ReplicaExit:
        """The record of a backend that sees only a status (an image's runtime, Slurm): 137 after a SIGKILL it
        sent (``killed``; a SIGKILL cannot be caught) is that signal; any other status is an exit."""
        kill = 128 + signals.SIGKILL
        how = (ExitHow.OOM if oom else ExitHow.LOST if lost
               else ExitHow.SIGNAL if killed and status == kill else ExitHow.EXIT)
        sig = signals.SIGKILL if how is not ExitHow.EXIT and status == kill else None
        return cls(status=status, exited_mono=exited_mono, how=how, signal=sig if how is not ExitHow.LOST else None,
                   leftovers=leftovers, placement=placement or {})


class ReplicaHandle(Protocol):
    """One started replica attempt, as its backend reports it: behaviour only, nothing the loop sets.

    ``begin_stop``/``advance_stop`` are :class:`~trials.controller.backend.stopping.StopSteps`' (SIGTERM once,
    the grace, SIGKILL again until all of it is gone), which every handle extends with its own delivery.
    """

    @property
    def name(self) -> str:
        """The replica's name (its label)."""
        ...

    @property
    def upper_dir(self) -> str | None:
        """Where its writes to the launch folder go (a private copy-on-write view, known at its start), or None."""
        ...

    @property
    def stop_requested_at(self) -> float | None:
        """When its stop began (monotonic; ``begin_stop``), or None: never told to stop."""
        ...

    def poll(self) -> ReplicaExit | None:
        """None while it runs; then how it ended (the same record at every later call, but for the
        ``leftovers`` the stop steps after its exit add)."""
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
        """Kill each of its running replicas that is over its memory limit (its exit then says ``oom``)."""
        ...

    def close(self) -> None:
        """After the last replica: stop what ``open`` started."""
        ...
