"""The backend registry: each runtime name and what the rest of trials must know of it.

A runtime is named by ``--runtime`` (``host``, ``podman``, ``docker``, ``container``: podman where
installed, else docker; ``slurm``) or by ``trials.tune`` (``in-process``), and kept in a job's
metadata (``runtime``; none: host). Nothing outside the backends' rooms, this module and
:mod:`trials.controller.jobs.backends` branches on that name: callers ask the :class:`BackendEntry`
what they need (does a pool without a command run its image's ENTRYPOINT, does ``--image`` apply,
its own options, who assigns the GPUs, can ``trials check`` probe with it). What is done with a
runtime (choose it, its preflight, read its options, build its backend, clean up what a dead
controller left) is :mod:`trials.controller.jobs.backends`, keyed by the same names: it imports the
backends, which import this room, so these facts stay here, importing nothing of the controller.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from trials.errors import ConfigError

HOST = "host"
SLURM = "slurm"
IN_PROCESS = "in-process"
CONTAINER = "container"  # --runtime container: podman where installed, else docker
IMAGE_RUNTIMES = ("podman", "docker")


@dataclass(frozen=True, slots=True)
class BackendEntry:
    """One runtime: what trials must know of it.

    Attributes:
        name: the name a job keeps (``host``, ``podman``, ``docker``, ``slurm``, ``in-process``).
        in_image: its replicas run in their pools' images: a pool without a command runs the image's
            ENTRYPOINT (``validate``, ``check`` and ``sweep`` need no command), and nothing of this
            host's environment reaches a replica.
        takes_images: ``--image URI=LOCAL`` applies (a local image for a spec's URI), checked
            before anything is written (every image exists locally).
        option_flags: its own command-line options (given with another runtime: an error); the job
            keeps their values under the runtime's name.
        local_gpus: this host hands out the GPUs (``--gpus``); else the cluster assigns them.
        local_endpoint: its replicas use the Cloud Storage endpoint a command starts ahead of the job
            (``host.warm_endpoint``); another backend has it closed (it starts its own, or none).
        trainer_preflight: ``trials sweep`` checks a trials trainer's Config here before any trial.
        probes: ``trials check`` can run its probes with it.
        plain: a job it ran has nothing but its journal to read back (``resume``'s fast path).
        warm_start: ``--warm-start`` applies: its replicas are this host's processes, which a warm
            launcher can fork (a container's or a Slurm job's start fresh, as Vertex's do).
        cli: ``--runtime`` names it (``in-process`` is ``trials.tune``'s own).
    """

    name: str
    in_image: bool = False
    takes_images: bool = False
    option_flags: tuple[str, ...] = ()
    local_gpus: bool = True
    local_endpoint: bool = False
    trainer_preflight: bool = False
    probes: bool = True
    plain: bool = False
    warm_start: bool = False
    cli: bool = True


RUNTIMES: dict[str, BackendEntry] = {
    HOST: BackendEntry(HOST, local_endpoint=True, trainer_preflight=True, plain=True, warm_start=True),
    **{name: BackendEntry(name, in_image=True, takes_images=True) for name in IMAGE_RUNTIMES},
    SLURM: BackendEntry(SLURM, option_flags=("partition", "slurm_arg"), local_gpus=False, probes=False),
    IN_PROCESS: BackendEntry(IN_PROCESS, cli=False),  # trials.tune builds its InProcessBackend itself
}
CLI_NAMES = (*(n for n, e in RUNTIMES.items() if e.cli), CONTAINER)  # what --runtime takes


def get(name: Any) -> BackendEntry:
    """The runtime a job keeps under ``name`` (None: host).

    Raises:
        ConfigError: no such runtime.
    """
    if name is None:
        return RUNTIMES[HOST]
    entry = RUNTIMES.get(name) if isinstance(name, str) else None
    if entry is None:
        raise ConfigError(f"runtime: expected one of {', '.join(RUNTIMES)}, got {name!r}")
    return entry


def check_warm_start(entry: BackendEntry) -> None:
    """``--warm-start`` applies to ``entry``.

    Raises:
        ConfigError: its trials cannot start warm.
    """
    if not entry.warm_start:
        warm = " or ".join(n for n, e in RUNTIMES.items() if e.warm_start)
        raise ConfigError(f"--warm-start: expected the {warm} runtime, got --runtime {entry.name} (a container or a "
                          f"Slurm job's trials start fresh, as Vertex's do)")


def check_flags(entry: BackendEntry, args: Any) -> None:
    """The backend-specific flags given (``--image``, ``--partition``, ``--slurm-arg``) apply to ``entry``.

    Raises:
        ConfigError: one is given with a runtime that does not take it.
    """
    if getattr(args, "image", None) and not entry.takes_images:
        takers = " or ".join(n for n, e in RUNTIMES.items() if e.takes_images)
        raise ConfigError(f"--image: a local image stands in for a spec's only with a container runtime "
                          f"(--runtime {takers}), got --runtime {entry.name}")
    given = [flag for e in RUNTIMES.values() for flag in e.option_flags
             if flag not in entry.option_flags and getattr(args, flag, None)]
    if given:
        owner = next(e.name for e in RUNTIMES.values() if given[0] in e.option_flags)
        flags = " and ".join("--" + f.replace("_", "-") for f in dict.fromkeys(given))
        raise ConfigError(f"{flags} need{'s' if len(given) == 1 else ''} --runtime {owner}, "
                          f"got runtime {entry.name!r}")
