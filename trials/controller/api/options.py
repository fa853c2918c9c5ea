"""What ``trials serve`` gives every job it runs, as ``trials sweep`` takes it: the runtime and its image map,
the GPUs its trials get (``--gpus``, or none: ``--ignore-accelerators``), the replicas' memory limit and
``--warm-start`` (host trials forked from a launcher that holds their imports).

The options are checked once, before the server listens (a bad one is one line and exit code 2, as the
CLI's), then passed to each job's controller (``trials resume JOB``); a job that asks for more accelerators
per trial than the server hands out is refused at its create (Vertex refuses a create beyond the project's
accelerator quota), never left to fail on a flag its SDK user cannot give.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from trials.controller.api.errors import ApiError
from trials.controller.backend import registry
from trials.errors import ConfigError
from trials.spec.model import JobSpec


@dataclass(frozen=True)
class JobOptions:
    """The options of every job a server runs (``trials serve --help``, "every job it runs").

    Args:
        runtime: ``--runtime`` (host, podman, docker, slurm); None: host.
        images: ``--image URI=LOCAL`` entries (a container runtime's image map).
        gpus: ``--gpus IDS``, the GPUs to hand out (None: ``CUDA_VISIBLE_DEVICES``, else ``nvidia-smi -L``).
        ignore_accelerators: run every replica on CPU whatever its ``machineSpec`` asks.
        memory_limit_mb: each replica's memory limit (over it the replica is OOM-killed).
        warm_start: ``--warm-start``: each job's host trials forked from a warm launcher (host runtime only).

    Example:
        >>> JobOptions(ignore_accelerators=True, memory_limit_mb=512).resume_args(images_used=())
        ['--ignore-accelerators', '--memory-limit', '512']
    """

    runtime: str | None = None
    images: tuple[str, ...] = ()
    gpus: str | None = None
    ignore_accelerators: bool = False
    memory_limit_mb: int | None = None
    warm_start: bool = False

    @property
    def on_host(self) -> bool:
        """Whether replicas run as host processes that use the server's Cloud Storage endpoint (host)."""
        return registry.get(self.runtime).local_endpoint

    def image_map(self) -> dict[str, str]:
        """``--image`` as ``{URI: LOCAL}`` (checked by :func:`check_options`)."""
        from trials.controller.container.runtime import parse_image_map

        return parse_image_map(self.images)

    def resume_args(self, *, images_used: Sequence[str]) -> list[str]:
        """The options of one job's ``trials resume``; ``images_used``: the URIs its pools name (an image
        mapped for other jobs is left out: ``trials resume`` refuses one that no pool of the job names)."""
        out: list[str] = []
        if self.runtime:
            out += ["--runtime", self.runtime]
        for entry in self.images:
            if entry.partition("=")[0] in images_used:
                out += ["--image", entry]
        if self.gpus is not None:
            out += ["--gpus", self.gpus]
        if self.ignore_accelerators:
            out.append("--ignore-accelerators")
        if self.memory_limit_mb is not None:
            out += ["--memory-limit", str(self.memory_limit_mb)]
        if self.warm_start:
            out.append("--warm-start")
        return out


def check_options(options: JobOptions) -> JobOptions:
    """The options as the jobs get them (``--runtime container`` resolved), checked before the server listens.

    Raises:
        ConfigError: a runtime that is unknown or not installed, an ``--image`` that is no ``URI=LOCAL`` or
            comes without a container runtime, ``--gpus`` listing a device twice or beside
            ``--ignore-accelerators`` or under Slurm, a memory limit below 1 MB, ``--warm-start`` with a
            runtime that is not the host's.
    """
    from dataclasses import replace

    from trials.controller.jobs import backends
    from trials.controller.trial.devices import parse_gpus_flag

    entry = backends.choose(options.runtime)
    runtime = options.runtime and entry.name
    if options.warm_start:
        registry.check_warm_start(entry)
    if entry.takes_images:
        from trials.controller.container import runtime as container_runtime

        container_runtime.find(entry.name)  # installed (RuntimeUnavailable names the fix)
    if options.images:
        if not entry.takes_images:
            raise ConfigError(f"--image: a local image stands in for a job's only with a container runtime "
                              f"(--runtime podman or docker), got --runtime {entry.name}")
        options.image_map()
    if options.gpus is not None:
        if options.ignore_accelerators:
            raise ConfigError(f"--gpus {options.gpus} and --ignore-accelerators: choose one (--ignore-accelerators "
                              f"runs every job on CPU)")
        if not entry.local_gpus:
            raise ConfigError(f"--gpus: under --runtime {entry.name} the cluster assigns each trial its GPUs "
                              f"(machineSpec.acceleratorCount), got --gpus {options.gpus!r}")
        parse_gpus_flag(options.gpus)
    if options.memory_limit_mb is not None and options.memory_limit_mb < 1:
        raise ConfigError(f"--memory-limit must be >= 1 (MB), got {options.memory_limit_mb}")
    return replace(options, runtime=runtime)


def server_gpus(options: JobOptions, environ: Mapping[str, str],
                detect: Callable[[], tuple[str, ...]]) -> tuple[tuple[str, ...], str]:
    """The GPUs the server's jobs share and where that came from, as a controller finds them (``--gpus``,
    else the server's ``CUDA_VISIBLE_DEVICES``, else ``detect``: ``nvidia-smi -L``)."""
    from trials.controller.trial import devices

    if options.gpus is not None:
        return devices.parse_gpus_flag(options.gpus), "--gpus"
    allocated = environ.get(devices.ENV_CUDA_VISIBLE_DEVICES)
    if allocated is not None:
        return devices.parse_cuda_visible_devices(allocated), f"the server's {devices.ENV_CUDA_VISIBLE_DEVICES}"
    return detect(), "nvidia-smi -L"


def accelerators_needed(job: JobSpec) -> tuple[int, str]:
    """A trial's accelerators (every replica's ``machineSpec.acceleratorCount``) and the pools that ask, as
    ``workerPoolSpecs[0]: 1 × 2 NVIDIA_TESLA_T4``."""
    if job.trial_job is None:
        return 0, ""
    need, asks = 0, []
    for i, pool in enumerate(job.trial_job.worker_pools):
        if pool is None or not pool.machine_spec.accelerator_count:
            continue
        count = pool.machine_spec.accelerator_count
        need += count * pool.replica_count
        kind = pool.machine_spec.accelerator_type or "accelerators"
        asks.append(f"workerPoolSpecs[{i}]: {pool.replica_count} × {count} {kind}")
    return need, "; ".join(asks)


def check_accelerators(job: JobSpec, options: JobOptions, where: str,
                       gpus: Callable[[], tuple[tuple[str, ...], str]]) -> None:
    """Refuse a job a trial of which asks for more accelerators than the server hands out.

    ``429 RESOURCE_EXHAUSTED``, as Vertex answers a create beyond the project's accelerator quota; the
    message names the server's flags (its operator's to give). Under ``--ignore-accelerators`` or Slurm (the
    cluster assigns GPUs) every job passes.

    Raises:
        ApiError: 429, naming the pools that ask, what the server has and the two flags.
    """
    if options.ignore_accelerators or not registry.get(options.runtime).local_gpus:
        return
    need, asks = accelerators_needed(job)
    if need == 0:
        return
    have, source = gpus()
    if need <= len(have):
        return
    has = (f"{len(have)} GPU{'s' if len(have) > 1 else ''} ({', '.join(have)}, from {source})" if have
           else f"no GPU ({source} lists none)")
    raise ApiError(429, f"{where}.workerPoolSpecs: a trial asks for {need} accelerator{'s' if need > 1 else ''} "
                        f"({asks}) and this server has {has}: start `trials serve --ignore-accelerators` to "
                        f"run such jobs on CPU, or name its GPUs with `trials serve --gpus 0,1`")
