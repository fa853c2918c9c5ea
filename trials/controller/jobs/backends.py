"""What is done with each runtime: choose it, check it before anything is written, read its own
options, build the backend that runs a job loop's replicas, and clean up what a job's dead
controllers left running.

Keyed by the names of :mod:`trials.controller.backend.registry` (which holds what the rest of
trials must know of each runtime, importing nothing); this module imports each backend's room only
in the function that needs it (the CLI's start-up imports none of them). A new backend is a new
room, an entry there and one line in each table here.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from trials import protocol
from trials.controller.backend import registry
from trials.controller.backend.registry import BackendEntry
from trials.errors import ConfigError

if TYPE_CHECKING:
    from trials.controller.backend.protocol import ReplicaBackend
    from trials.controller.gcs.emulator import Warm
    from trials.controller.jobs.registry import JobHandle
    from trials.controller.loop.state import LoopOptions
    from trials.spec import JobSpec


def choose(flag: str | None, stored: Any = None) -> BackendEntry:
    """``--runtime`` (``container``: podman where installed, else docker), else the job's own (``stored``).

    Raises:
        ConfigError: an unknown name.
    """
    if flag is None:
        return registry.get(stored if isinstance(stored, str) else None)
    if flag == registry.CONTAINER:
        from trials.controller.container import runtime as container_runtime

        flag = container_runtime.choose(flag)
    entry = registry.RUNTIMES.get(flag)
    if entry is None or not entry.cli:
        raise ConfigError(f"--runtime: expected one of {', '.join(registry.CLI_NAMES)}, got {flag!r}")
    return entry


def preflight(entry: BackendEntry, job: JobSpec, images: Mapping[str, str]) -> None:
    """Before anything is written: a container runtime is installed and every image the job names
    (through ``images``, the ``--image`` map) exists locally.

    Raises:
        ConfigError: it is not (one line naming the runtime or the image).
    """
    if entry.takes_images:
        from trials.controller.container import runtime as container_runtime
        from trials.controller.container.preflight import check_images

        check_images(container_runtime.find(entry.name), job, dict(images))


def own_options(entry: BackendEntry, args: Any, stored: Any, *, folders: Sequence[str],
                say: Callable[[str], None]) -> dict[str, Any] | None:
    """The runtime's own options from the command line (``--partition``, ``--slurm-arg`` of Slurm),
    else the job's (``stored``), checked before anything is written; None: the runtime has none."""
    reader = _OPTIONS.get(entry.name)
    return None if reader is None else reader(args, stored, folders=folders, say=say)


def build(h: JobHandle, options: LoopOptions, endpoint: Warm | None) -> ReplicaBackend:
    """The backend that runs the replicas of one job loop (``options.runtime``); ``endpoint``: the
    Cloud Storage endpoint started ahead of the job, closed here for a runtime that does not use it.

    Raises:
        ConfigError: a runtime no job loop of a job folder runs (``in-process``).
    """
    entry = registry.get(options.runtime)
    if endpoint is not None and not entry.local_endpoint:
        endpoint.close()  # a container backend starts its own; Slurm's nodes cannot reach a local one
    builder = _BUILDERS.get(entry.name)
    if builder is None:
        raise ConfigError(f"runtime {entry.name!r} runs no job folder's loop (trials.tune runs it)")
    return builder(h, options, endpoint if entry.local_endpoint else None)


def clean_dead(h: JobHandle, name: Any) -> list[str]:
    """Remove what the dead controllers of job ``h`` (run by runtime ``name``) left running: this host's
    process groups proven to be its trials' (every runtime: a backend's helpers may run here), then the
    runtime's own (containers and their networks, Slurm jobs). Returns what was removed, in words."""
    removed = _clean_host(h)
    cleaner = _CLEANERS.get(registry.get(name).name)
    if cleaner is not None:
        removed += cleaner(h)
    return removed


# --- host ------------------------------------------------------------------------------------------
def _build_host(h: JobHandle, options: LoopOptions, endpoint: Warm | None) -> ReplicaBackend:
    from trials.controller.process.host import HostBackend

    backend = HostBackend(launch_dir=options.cwd, job_dir=options.job_dir, gcs_root=options.gcs_root,
                          pass_env=options.pass_env, warm_endpoint=endpoint)
    return with_packages(backend, h.job, options)


def with_packages(backend: ReplicaBackend, job: Any, options: LoopOptions) -> ReplicaBackend:
    """The host backend, installing the job's ``pythonPackageSpec`` packages first when it has some
    (and no command given after ``--`` stands in for its module)."""
    pools = [pool for _, _, pool in job.trial_job.replicas()] if job.trial_job is not None else []
    sets = [pool.python_package.package_uris for pool in pools
            if pool.python_package is not None and pool.python_package.package_uris]
    if not sets or options.local_command:
        return backend
    from trials.controller.trial.packages import PackagesBackend

    return PackagesBackend(backend, job_dir=options.job_dir, gcs_root=options.gcs_root, cwd=options.cwd,
                           package_sets=sets)


def accelerators(job: Any) -> dict[str, int]:
    """GPUs per replica name, from each pool's ``machineSpec.acceleratorCount``."""
    if job.trial_job is None:
        return {}
    return {protocol.replica_name(i, j): int(pool.machine_spec.accelerator_count or 0)
            for i, j, pool in job.trial_job.replicas()}


def _clean_host(h: JobHandle) -> list[str]:
    from trials.controller.jobs.lock import reap_job_leftovers

    n = reap_job_leftovers(h)
    return [f"{n} process group(s)"] if n else []


# --- containers ------------------------------------------------------------------------------------
def _build_container(h: JobHandle, options: LoopOptions, endpoint: Warm | None) -> ReplicaBackend:
    from trials.controller.container import runtime as container_runtime
    from trials.controller.container.backend import ContainerBackend

    return ContainerBackend(runtime=container_runtime.find(options.runtime), job_dir=options.job_dir,
                            gcs_root=options.gcs_root, images=options.images, pass_env=options.pass_env)


def _clean_containers(name: str) -> Callable[[JobHandle], list[str]]:
    def clean(h: JobHandle) -> list[str]:
        """The job's containers whose controllers are gone, then its networks no container uses."""
        from trials.controller.container import runtime as container_runtime
        from trials.controller.container.backend import remove_left_containers
        from trials.controller.container.network import remove_left_networks

        try:
            runtime = container_runtime.find(name)
        except ConfigError:  # not installed here (RuntimeUnavailable): the job's next controller removes them
            return []
        removed = remove_left_containers(runtime, h.job_dir)
        remove_left_networks(runtime, os.path.abspath(h.job_dir))
        return [f"container {n}" for n in removed]
    return clean


# --- Slurm -----------------------------------------------------------------------------------------
def _slurm_options(args: Any, stored: Any, *, folders: Sequence[str], say: Callable[[str], None]) -> dict[str, Any]:
    """``--partition`` and ``--slurm-arg`` (else the job's own), checked, and the shared-folder check on
    a node (before anything is written)."""
    from trials.controller.slurm import commands
    from trials.controller.slurm import preflight as slurm_preflight
    from trials.controller.slurm.backend import package_root
    from trials.controller.slurm.script import check_slurm_arg

    have = dict(stored) if isinstance(stored, dict) else {}
    partition = getattr(args, "partition", None) or have.get("partition")
    extra = list(have.get("args") or [])
    if getattr(args, "slurm_arg", None):
        extra = []
        for arg in args.slurm_arg:
            try:
                extra.append(check_slurm_arg(arg))
            except ValueError as err:
                raise ConfigError(f"--slurm-arg: {err}") from None
    warning = slurm_preflight.check_shared(commands.Slurm(), [f for f in folders if f], package_root=package_root(),
                                           partition=partition, extra=extra)
    if warning:
        say(f"trials: warning: {warning}")
    return {"partition": partition, "args": extra}


def _build_slurm(h: JobHandle, options: LoopOptions, endpoint: Warm | None) -> ReplicaBackend:
    from trials.controller.slurm.backend import SlurmBackend, job_key

    return SlurmBackend(job_dir=options.job_dir, job_key=job_key(h.storage_url, h.job_id),
                        accelerators=accelerators(h.job), partition=options.slurm_partition,
                        extra=options.slurm_args,
                        timeout_s=h.job.trial_job.scheduling.timeout_s if h.job.trial_job else None,
                        grace_s=options.grace_period_s)


def _clean_slurm(h: JobHandle) -> list[str]:
    """``scancel`` the job's Slurm jobs (not waited for: the next controller waits them out)."""
    from trials.controller.backend.protocol import BackendError
    from trials.controller.slurm.backend import cancel_left_jobs, job_key

    with contextlib.suppress(BackendError, ConfigError):  # no Slurm here: the next controller cancels them
        left = cancel_left_jobs(job_dir=h.job_dir, job_key=job_key(h.storage_url, h.job_id))
        return [f"Slurm job {j}" for j in left]
    return []


# --- the tables, by the registry's names ------------------------------------------------------------
_BUILDERS: dict[str, Callable[[JobHandle, LoopOptions, Warm | None], ReplicaBackend]] = {
    registry.HOST: _build_host, **{n: _build_container for n in registry.IMAGE_RUNTIMES},
    registry.SLURM: _build_slurm}
_CLEANERS: dict[str, Callable[[JobHandle], list[str]]] = {
    **{n: _clean_containers(n) for n in registry.IMAGE_RUNTIMES}, registry.SLURM: _clean_slurm}
_OPTIONS: dict[str, Callable[..., dict[str, Any]]] = {registry.SLURM: _slurm_options}
