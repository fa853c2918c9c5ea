"""The batch script of one submission: one component per worker pool (a heterogeneous job for several),
``srun`` over all of them running each task's entry. Pure: text in, text out."""

from __future__ import annotations

import math
import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass

ENTRY_MODULE = "trials.controller.slurm.entry"
_SAFE_ARG = re.compile(r"-[-A-Za-z0-9][^\s\"'\\]*")


@dataclass(frozen=True, slots=True)
class Component:
    """One worker pool's part of a submission: its tasks and what each task gets."""

    ntasks: int
    gpus_per_task: int = 0
    mem_per_task_mb: int | None = None


@dataclass(frozen=True, slots=True)
class Submission:
    """What one ``sbatch`` submits."""

    job_name: str
    comment: str
    output: str  # Slurm's own log of the job (the batch step), a path on the shared folder
    components: tuple[Component, ...]
    launch_file: str
    python: str  # the Python that runs the entry on the nodes (the controller's)
    package_root: str  # the folder holding the ``trials`` package, put first on the entry's sys.path
    srun: str = "srun"
    partition: str | None = None
    time_limit_min: int | None = None
    extra: tuple[str, ...] = ()  # --slurm-arg, in every component


def check_slurm_arg(arg: str) -> str:
    """A ``--slurm-arg``: one sbatch option (``--qos=high``, ``--constraint=a100``), no whitespace or quotes.

    Raises:
        ValueError: the one-line reason.
    """
    if not _SAFE_ARG.fullmatch(arg):
        raise ValueError(f"expected one sbatch option such as --qos=high (no spaces or quotes), got {arg!r}")
    name = arg.split("=", 1)[0]
    if name in ("--hetjob", "--wrap", "--array", "-a", "--export", "--requeue", "--no-requeue", "--output",
                "-o", "--error", "-e", "--job-name", "-J", "--comment", "--parsable"):
        raise ValueError(f"{name} is set by trials for each trial attempt, got {arg!r}")
    return arg


def time_limit_minutes(timeout_s: float | None, grace_s: float) -> int | None:
    """Slurm's ``--time`` for a trial with ``scheduling.timeout``: past the controller's own stop (the
    timeout and its grace), so the controller, not Slurm, ends a trial that runs too long."""
    if not timeout_s:
        return None
    return int(math.ceil((timeout_s + grace_s) / 60.0)) + 1


def batch_script(sub: Submission) -> str:
    """The ``#!/bin/sh`` script ``sbatch`` reads from stdin."""
    lines = ["#!/bin/sh", f"#SBATCH --job-name={sub.job_name}", f"#SBATCH --comment={sub.comment}",
             f"#SBATCH --output={sub.output}", "#SBATCH --no-requeue", "#SBATCH --export=ALL",
             "#SBATCH --open-mode=append"]
    for k, comp in enumerate(sub.components):
        if k:
            lines.append("#SBATCH hetjob")
        lines.append(f"#SBATCH --ntasks={comp.ntasks}")
        if comp.gpus_per_task:
            lines.append(f"#SBATCH --gpus-per-task={comp.gpus_per_task}")
        if comp.mem_per_task_mb:
            lines += ["#SBATCH --cpus-per-task=1", f"#SBATCH --mem-per-cpu={comp.mem_per_task_mb}M"]
        if sub.partition:
            lines.append(f"#SBATCH --partition={sub.partition}")
        if sub.time_limit_min:
            lines.append(f"#SBATCH --time={sub.time_limit_min}")
        lines += [f"#SBATCH {arg}" for arg in sub.extra]
    code = (f"import sys; sys.path.insert(0, {sub.package_root!r}); "
            f"from {ENTRY_MODULE} import main; sys.exit(main())")
    entry = [sub.python, "-c", code, sub.launch_file]
    if len(sub.components) == 1 and sub.components[0].ntasks == 1:
        # one replica: its entry is the job's batch step itself (task 0, with the job's GPUs); an srun step
        # would add its own launch (0.2-0.3 s a trial) and change nothing else
        lines += ["SLURM_PROCID=0", "export SLURM_PROCID", "exec " + shlex.join(entry)]
        return "\n".join(lines) + "\n"
    srun = [sub.srun, "--kill-on-bad-exit=0", "--export=ALL"]
    if len(sub.components) > 1:
        srun.append("--het-group=" + ",".join(str(k) for k in range(len(sub.components))))
    lines.append("exec " + shlex.join([*srun, *entry]))
    return "\n".join(lines) + "\n"


def components(pools: Sequence[int], gpus: Sequence[int], mem_mb: int | None) -> tuple[Component, ...]:
    """The submission's components from its replicas' pools (in task order) and GPUs per replica:
    consecutive replicas of one pool are one component."""
    out: list[Component] = []
    last: int | None = None
    for pool, g in zip(pools, gpus, strict=True):
        if out and pool == last and out[-1].gpus_per_task == g:
            out[-1] = Component(ntasks=out[-1].ntasks + 1, gpus_per_task=g, mem_per_task_mb=mem_mb)
        else:
            out.append(Component(ntasks=1, gpus_per_task=g, mem_per_task_mb=mem_mb))
        last = pool
    return tuple(out)
