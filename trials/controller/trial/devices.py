"""GPUs for trial replicas: find them, check a spec fits, and hand each replica its own devices."""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from trials.errors import ConfigError
from trials.spec import JobSpec

ENV_CUDA_VISIBLE_DEVICES = "CUDA_VISIBLE_DEVICES"
NVIDIA_SMI_TIMEOUT_S = 10.0


@dataclass(frozen=True, slots=True, kw_only=True)
class DevicePlan:
    """What a worker does with accelerators.

    ``devices`` are the GPU ids it hands out (``None``: the spec asks for none, so nothing is
    reserved); ``counts`` is the number each replica of a trial needs, primary first; ``hide``
    runs every replica on CPU (``--ignore-accelerators``: ``CUDA_VISIBLE_DEVICES=""``).
    """

    devices: tuple[str, ...] | None = None
    counts: tuple[int, ...] = ()
    hide: bool = False

    @property
    def per_trial(self) -> int:
        return sum(self.counts)


def accelerator_counts(job: JobSpec) -> tuple[int, ...]:
    """``machineSpec.acceleratorCount`` of every replica of a trial, primary first."""
    if job.trial_job is None:
        return (0,)
    return tuple(pool.machine_spec.accelerator_count for _i, _j, pool in job.trial_job.replicas())


def parse_gpus_flag(text: str) -> tuple[str, ...]:
    """``--gpus 0,1,3`` -> ("0", "1", "3"); ids may also be UUIDs (``GPU-…``). Empty: no GPU."""
    ids = tuple(part.strip() for part in text.split(",") if part.strip())
    if len(set(ids)) != len(ids):
        raise ConfigError(f"--gpus must list each device once, got {text!r}")
    return ids


def parse_nvidia_smi(text: str) -> tuple[str, ...]:
    """The indexes from ``nvidia-smi -L`` lines: ``GPU 0: Tesla T4 (UUID: GPU-…)`` -> "0"."""
    out = []
    for line in text.splitlines():
        head, sep, _rest = line.partition(":")
        words = head.split()
        if sep and len(words) == 2 and words[0] == "GPU" and words[1].isdigit():
            out.append(words[1])
    return tuple(out)


def parse_cuda_visible_devices(text: str) -> tuple[str, ...]:
    """The ids a scheduler's ``CUDA_VISIBLE_DEVICES`` allocates: "0,2" -> ("0", "2"); empty: no GPU.

    As CUDA reads it, a negative index ends the list (``-1`` hides every GPU); Slurm's ``NoDevFiles``
    (a GPU allocation without device files) gives no id either.
    """
    ids: list[str] = []
    for part in (p.strip() for p in text.split(",")):
        if not part or part == "NoDevFiles" or re.fullmatch(r"-[0-9]+", part):
            break
        ids.append(part)
    if len(set(ids)) != len(ids):
        raise ConfigError(f"{ENV_CUDA_VISIBLE_DEVICES} must list each device once, got {text!r}")
    return tuple(ids)


def detect_gpus(run: Callable[..., subprocess.CompletedProcess[str]] = subprocess.run) -> tuple[str, ...]:
    """The GPUs ``nvidia-smi -L`` lists; none when it is missing or fails."""
    try:
        done = run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=NVIDIA_SMI_TIMEOUT_S)
    except (OSError, subprocess.SubprocessError):
        return ()
    return parse_nvidia_smi(done.stdout) if done.returncode == 0 else ()


def plan(job: JobSpec, *, gpus: str | None, ignore_accelerators: bool,
         detect: Callable[[], tuple[str, ...]] = detect_gpus,
         environ: Mapping[str, str] | None = None) -> DevicePlan:
    """Check that a trial of ``job`` can run here and say which devices the worker hands out.

    The devices come from ``--gpus``, else from this process's ``CUDA_VISIBLE_DEVICES`` when it is set
    (a scheduler's allocation: Slurm's ``--gres=gpu:K``/``--gpus`` sets it for the job's tasks), else
    from ``nvidia-smi -L``.

    Raises:
        ConfigError: the spec asks for more accelerators per trial than this machine has
            (exit code 2), unless ``ignore_accelerators``.
    """
    counts = accelerator_counts(job)
    if ignore_accelerators:
        return DevicePlan(counts=tuple(0 for _ in counts), hide=True)
    need = sum(counts)
    if need == 0:
        return DevicePlan(counts=counts)
    allocated = (os.environ if environ is None else environ).get(ENV_CUDA_VISIBLE_DEVICES)
    if gpus is not None:
        source, devices = "--gpus", parse_gpus_flag(gpus)
    elif allocated is not None:
        source, devices = ENV_CUDA_VISIBLE_DEVICES, parse_cuda_visible_devices(allocated)
    else:
        source, devices = "nvidia-smi -L", detect()
    if need > len(devices):
        have = f"{len(devices)} GPU(s) ({', '.join(devices)})" if devices else "no GPU"
        where = "this machine has" if source != ENV_CUDA_VISIBLE_DEVICES else "this worker's allocation has"
        raise ConfigError(
            f"the spec asks for {need} accelerator(s) per trial (machineSpec.acceleratorCount "
            f"per replica: {', '.join(map(str, counts))}) but {where} {have} from "
            f"{source}; list GPUs with --gpus 0,1 or run on CPU with --ignore-accelerators"
        )
    return DevicePlan(devices=devices, counts=counts)


class DeviceAllocator:
    """Hands devices to trials, all of a trial's replicas at once or nothing; no I/O.

    >>> a = DeviceAllocator(("0", "1", "2"))
    >>> a.allocate("7", (1, 1))
    (('0',), ('1',))
    >>> a.allocate("8", (2,)) is None
    True
    """

    def __init__(self, devices: Sequence[str]):
        if len(set(devices)) != len(devices):
            raise ValueError(f"device ids must be unique, got {list(devices)}")
        self.devices = tuple(devices)
        self._held: dict[str, tuple[tuple[str, ...], ...]] = {}

    @property
    def free(self) -> tuple[str, ...]:
        used = {d for groups in self._held.values() for g in groups for d in g}
        return tuple(d for d in self.devices if d not in used)

    @property
    def held(self) -> Mapping[str, tuple[tuple[str, ...], ...]]:
        return dict(self._held)

    def fits(self, counts: Sequence[int]) -> bool:
        return sum(counts) <= len(self.free)

    def allocate(self, owner: str, counts: Sequence[int]) -> tuple[tuple[str, ...], ...] | None:
        """Devices per replica (lowest free ids first), or None when they are not all free now."""
        if owner in self._held:
            raise ValueError(f"trial {owner} already holds devices {self._held[owner]}")
        if any(c < 0 for c in counts):
            raise ValueError(f"accelerator counts must be >= 0, got {list(counts)}")
        free = list(self.free)
        if sum(counts) > len(free):
            return None
        groups = []
        for c in counts:
            groups.append(tuple(free[:c]))
            del free[:c]
        self._held[owner] = tuple(groups)
        return self._held[owner]

    def release(self, owner: str) -> None:
        self._held.pop(owner, None)


def replica_env(devices: Sequence[str] | None, *, hide: bool) -> dict[str, str]:
    """The ``CUDA_VISIBLE_DEVICES`` a replica gets: its devices ("" for none, or on CPU), or
    nothing when the worker does not manage devices (``devices`` is None)."""
    if hide:
        return {ENV_CUDA_VISIBLE_DEVICES: ""}
    if devices is not None:
        return {ENV_CUDA_VISIBLE_DEVICES: ",".join(devices)}
    return {}
