"""The summary ``trials validate`` prints: parameters, metrics, counts, a sample trial's flags."""

from __future__ import annotations

import math
import shlex
from collections.abc import Sequence

from trials.protocol import format_flag, format_value
from trials.spec import (
    Goal,
    JobSpec,
    LocalOptions,
    MeasurementSelection,
    ParameterSpec,
    ParameterType,
    ScaleType,
    StudySpec,
    Value,
    WorkerPoolSpec,
    carried,
)
from trials.spec.model import LOCAL_IMAGE_URI
from trials.timefmt import duration

_SCALES = {ScaleType.SCALE_TYPE_UNSPECIFIED: "", ScaleType.UNIT_LINEAR_SCALE: "linear",
           ScaleType.UNIT_LOG_SCALE: "log", ScaleType.UNIT_REVERSE_LOG_SCALE: "reverse log"}


def summary(job: JobSpec) -> str:
    """A short text description of ``job`` ending with the flags a sample trial would get."""
    study = job.study
    lines = [f"job: {job.display_name or '(no display name)'}"]
    lines.append("metrics:")
    goals = [(m.metric_id, {Goal.MAXIMIZE: "maximize", Goal.MINIMIZE: "minimize"}.get(
        m.goal, "maximize (unset)") + (" (primary)" if i == 0 and len(study.metrics) > 1 else ""))
        for i, m in enumerate(study.metrics)]
    goals += [(m.metric_id, "safety metric: reported, not optimised, "
               f"safetyConfig {m.safety_config}") for m in study.safety_metrics]
    lines.extend("  " + row for row in _table(goals))
    lines.append("parameters:")
    lines.extend("  " + row for row in _table(_rows(study)))
    lines.append(f"algorithm: {study.algorithm.value}")
    selection = {MeasurementSelection.LAST_MEASUREMENT: "LAST",
                 MeasurementSelection.BEST_MEASUREMENT: "BEST"}.get(study.measurement_selection,
                                                                    "LAST (unset)")
    lines.append(f"selection: {selection}")
    lines.append(f"stopping: {_stopping(study)}")
    lines.append(f"trials: max {job.max_trial_count}, parallel {job.parallel_trial_count}, "
                 f"max failed {job.max_failed_trial_count}")
    lines.extend(_trial_job(job))
    if job.local != LocalOptions():
        lines.append(f"local: {_local(job.local)}")
    for path, text in job.carried:
        if path in carried.EMULATED:
            lines.append(f"study stopping: {text}")
    if any(path not in carried.EMULATED for path, _ in job.carried):
        lines.append("carried to export, not emulated: "
                     + ", ".join(path for path, _ in job.carried if path not in carried.EMULATED))
    if job.dropped:
        lines.append("no Vertex field, not exported: " + ", ".join(job.dropped))
    flags = " ".join(format_flag(p.parameter_id, v) for p, v in sample_trial(study))
    lines.append(f"A sample trial gets: {flags}")
    return "\n".join(lines)


def sample_value(p: ParameterSpec) -> Value:
    """A deterministic feasible value: the middle of the range (log-middle on log scales), or the
    first of the values. Doubles are rounded to 3 significant digits when that stays in range."""
    if p.type in (ParameterType.CATEGORICAL, ParameterType.DISCRETE):
        return p.values[0]
    lo, hi = float(p.min_value), float(p.max_value)  # type: ignore[arg-type]
    if p.scale_type is ScaleType.UNIT_LOG_SCALE:
        mid = math.sqrt(lo * hi)
    elif p.scale_type is ScaleType.UNIT_REVERSE_LOG_SCALE:
        mid = lo + hi - math.sqrt(lo * hi)
    else:
        mid = lo + (hi - lo) / 2
    if p.type is ParameterType.INTEGER:
        return min(max(round(mid), int(lo)), int(hi))
    short = float(f"{mid:.3g}")
    return short if lo <= short <= hi else mid


def sample_trial(study: StudySpec) -> list[tuple[ParameterSpec, Value]]:
    """The active parameters and their sample values, in StudySpec order."""
    out: list[tuple[ParameterSpec, Value]] = []

    def pick(p: ParameterSpec) -> Value:
        value = sample_value(p)
        out.append((p, value))
        return value

    study.choose(pick)  # only the children each value activates
    return out


def _rows(study: StudySpec) -> list[tuple[str, ...]]:
    rows: list[tuple[str, ...]] = [("id", "type", "range / values", "scale", "when")]

    def visit(p: ParameterSpec, depth: int, when: str) -> None:
        rows.append(("  " * depth + p.parameter_id, p.type.value, p.describe_range().split(" (")[0],
                     _SCALES[p.scale_type], when))
        for cond in p.conditionals:
            shown = ", ".join(format_value(v) for v in cond.parent_values)
            visit(cond.parameter, depth + 1, f"{p.parameter_id} in {{{shown}}}")

    for p in study.parameters:
        visit(p, 0, "")
    return rows


def _table(rows: Sequence[tuple[str, ...]]) -> list[str]:
    if not rows:
        return []
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=False)).rstrip() for r in rows]


def _stopping(study: StudySpec) -> str:
    s = study.stopping
    if s is None:
        return "none"
    parts = [f"useElapsedDuration={str(s.use_elapsed_duration).lower()}"]
    for name, value in (("maxStepCount", s.max_step_count), ("minStepCount", s.min_step_count),
                        ("minMeasurementCount", s.min_measurement_count),
                        ("learningRateParameterName", s.learning_rate_parameter_name),
                        ("updateAllStoppedTrials", s.update_all_stopped_trials)):
        if value is not None:
            parts.append(f"{name}={format_value(value)}")
    return f"{s.kind.value} ({', '.join(parts)})"


def _trial_job(job: JobSpec) -> list[str]:
    t = job.trial_job
    if t is None:
        return ["trial command: none (give one after `--` or in the spec)"]
    out = []
    for i, pool in enumerate(t.worker_pools):
        if pool is not None:
            out.append(f"workerpool{i}: {pool.replica_count} x {_command(pool)}")
    if t.base_output_directory:
        out.append(f"base output directory: {t.base_output_directory}")
    if t.scheduling.timeout_s is not None:
        out.append(f"trial timeout: {duration(t.scheduling.timeout_s)}")
    return out


def _command(pool: WorkerPoolSpec) -> str:
    if pool.container is not None:
        c = pool.container
        argv = shlex.join([*c.command, *c.args]) if c.command else " ".join(
            ["(the image's entrypoint)", shlex.join(c.args)]).rstrip()
        return argv if c.image_uri == LOCAL_IMAGE_URI else f"{argv} [image {c.image_uri}]"
    k = pool.python_package
    assert k is not None
    argv = shlex.join(["python", "-m", k.python_module, *k.args])
    return argv if k.executor_image_uri == LOCAL_IMAGE_URI else \
        f"{argv} [image {k.executor_image_uri}]"


def _local(local: LocalOptions) -> str:
    parts = []
    if local.inject_restarts:
        parts.append(f"inject restarts {format_value(local.inject_restarts)}")
    if local.grace_period_s is not None:
        parts.append(f"grace period {duration(local.grace_period_s)}")
    if local.memory_limit_mb is not None:
        parts.append(f"memory limit {local.memory_limit_mb} MB")
    return ", ".join(parts)
