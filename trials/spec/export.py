"""Write a JobSpec back as the REST JSON body or the gcloud ``--config`` YAML (export -> load = id)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from trials.errors import ConfigError
from trials.spec import (
    ConditionalParameterSpec,
    ContainerSpec,
    EnvVar,
    Goal,
    JobSpec,
    MachineSpec,
    MeasurementSelection,
    ParameterSpec,
    ParameterType,
    ScaleType,
    StoppingKind,
    StoppingSpec,
    StudySpec,
    TrialJobSpec,
    WorkerPoolSpec,
    carried,
)
from trials.spec.model import LOCAL_IMAGE_URI
from trials.timefmt import duration

FORMATS = ("rest-json", "gcloud-yaml")
DEFAULT_MACHINE_TYPE = "n1-standard-4"  # filled in with --image-uri: Vertex requires a machine type
_PARENT_KEYS = {ParameterType.DISCRETE: "parentDiscreteValues",
                ParameterType.INTEGER: "parentIntValues",
                ParameterType.CATEGORICAL: "parentCategoricalValues"}
_VALUE_KEYS = {ParameterType.DOUBLE: "doubleValueSpec", ParameterType.INTEGER: "integerValueSpec",
               ParameterType.CATEGORICAL: "categoricalValueSpec",
               ParameterType.DISCRETE: "discreteValueSpec"}


def to_rest(job: JobSpec) -> dict[str, Any]:
    """The REST JSON body of ``hyperparameterTuningJobs.create``.

    camelCase, enum names, int64 values as strings, durations as ``"3600s"``; unspecified enums
    and default values are omitted; the local options (``trialsLocal``) are never exported.
    """
    return _Writer(rest=True).job(job)


def to_gcloud(job: JobSpec) -> dict[str, Any]:
    """The YAML document for ``gcloud ai hp-tuning-jobs create --config`` (ints as ints)."""
    return _Writer(rest=False).job(job)


def export_text(job: JobSpec, fmt: str, *, image_uri: str | None = None,
                base_output_dir: str | None = None, command: Sequence[str] | None = None,
                display_name: str | None = None, draft: bool = False) -> str:
    """Render ``job`` as ``fmt`` ("rest-json" | "gcloud-yaml"), every carried field included.

    Args:
        job: the loaded job.
        fmt: the output format.
        image_uri: the container image to submit: replaces every containerSpec's imageUri and
            every pythonPackageSpec's executorImageUri (a python-module pool without packageUris
            becomes a container running ``python3 -m <module>``), creates a one-pool trial job
            when the spec has none, and fills in ``machineType`` (``n1-standard-4``) where the
            spec names none.
        base_output_dir: replaces ``baseOutputDirectory`` (a ``gs://`` URI for Vertex).
        command: a local command to put in every pool's ``containerSpec.command``, its arguments included (it
            replaces the image's ENTRYPOINT on Vertex: only when asked, ``--with-local-command``).
        display_name: used when the spec has none (Vertex requires one).
        draft: write the job even when Vertex would reject it.

    Raises:
        ConfigError: unknown format, or (unless ``draft``) a job Vertex would reject: the
            message names every missing field and the flag that supplies it.
    """
    return render(prepare(job, image_uri=image_uri, base_output_dir=base_output_dir, command=command,
                          display_name=display_name), fmt, draft=draft)


def prepare(job: JobSpec, *, image_uri: str | None = None, base_output_dir: str | None = None,
            command: Sequence[str] | None = None, display_name: str | None = None) -> JobSpec:
    """The job :func:`export_text` writes: ``job`` with the export's options applied (see there)."""
    if command:
        job = with_command(job, command)
    if image_uri is not None:
        job = with_image(job, image_uri)
    if base_output_dir is not None:
        job = with_base_output(job, base_output_dir)
    if job.display_name is None and display_name:
        job = replace(job, display_name=display_name[:128])
    return job


def render(job: JobSpec, fmt: str, *, draft: bool = False) -> str:
    """``job`` as ``fmt``'s text; unless ``draft``, refused (ConfigError) when Vertex would reject it."""
    if fmt not in FORMATS:
        raise ConfigError(f"expected an export format in {', '.join(FORMATS)}, got {fmt!r}")
    problems = [] if draft else rejected_fields(job)
    if problems:
        raise ConfigError("expected a job Vertex accepts, got one with " + "; ".join(problems)
                          + " (or --draft to write it anyway)")
    if fmt == "rest-json":
        return json.dumps(to_rest(job), indent=2) + "\n"
    import yaml

    return yaml.safe_dump(to_gcloud(job), sort_keys=False, default_flow_style=False,
                          allow_unicode=True, width=100)


def changes(before: JobSpec, after: JobSpec) -> list[str]:
    """What ``after`` sets, changes or drops against ``before``, one line a field (REST names), so that an export
    never changes what runs on Vertex without saying so."""
    old, new = _flat(to_rest(before)), _flat(to_rest(after))
    out = []
    for key in sorted(set(old) | set(new), key=lambda k: (k.split(".")[0], k)):
        if key not in old:
            out.append(f"set {key}: {_short(new[key])}")
        elif key not in new:
            out.append(f"dropped {key} (was {_short(old[key])})")
        elif old[key] != new[key]:
            out.append(f"changed {key}: {_short(old[key])} -> {_short(new[key])}")
    return out


def _flat(value: Any, prefix: str = "") -> dict[str, Any]:
    """Dotted paths to leaves; a list of scalars is one leaf (a command, args), a list of objects is indexed."""
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for k, v in value.items():
            out.update(_flat(v, f"{prefix}.{k}" if prefix else str(k)))
        return out
    if isinstance(value, list) and any(isinstance(v, (dict, list)) for v in value):
        out = {}
        for i, v in enumerate(value):
            out.update(_flat(v, f"{prefix}[{i}]"))
        return out
    return {prefix: value}


def _short(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= 100 else text[:97] + "..."


def rejected_fields(job: JobSpec) -> list[str]:
    """What Vertex would reject in ``job`` (missing or local-only fields), each with its flag."""
    t = job.trial_job
    if t is None:
        return ["no trialJobSpec (--image-uri IMAGE creates one)"]
    out = []
    if job.display_name is None:
        out.append("no displayName")
    for i, pool in enumerate(t.worker_pools):
        if pool is None:
            continue
        where = f"trialJobSpec.workerPoolSpecs[{i}]"
        if pool.container is not None and pool.container.image_uri == LOCAL_IMAGE_URI:
            out.append(f"no image in {where}.containerSpec.imageUri (--image-uri IMAGE)")
        if pool.python_package is not None and \
                pool.python_package.executor_image_uri == LOCAL_IMAGE_URI:
            out.append(f"no image in {where}.pythonPackageSpec.executorImageUri "
                       f"(--image-uri IMAGE)")
        if pool.machine_spec.machine_type is None:
            out.append(f"no {where}.machineSpec.machineType (set it in the spec; --image-uri "
                       f"fills in {DEFAULT_MACHINE_TYPE})")
    base = t.base_output_directory
    if base is not None and not base.startswith("gs://"):
        out.append(f"the local baseOutputDirectory {base!r} (--base-output-dir gs://BUCKET/PATH)")
    return out


def with_command(job: JobSpec, command: Sequence[str]) -> JobSpec:
    """The job as it ran locally with ``command`` (given after ``--``): the command replaces every
    pool's ENTRYPOINT, its arguments included; the pools' own args and env stay."""
    argv = tuple(command)
    if job.trial_job is None:
        pool = WorkerPoolSpec(container=ContainerSpec(image_uri=LOCAL_IMAGE_URI, command=argv))
        return replace(job, trial_job=TrialJobSpec(worker_pools=(pool,)))

    def one(pool: WorkerPoolSpec) -> WorkerPoolSpec:
        if pool.container is not None:
            return replace(pool, container=replace(pool.container, command=argv))
        pkg = pool.python_package
        assert pkg is not None
        return replace(pool, python_package=None, container=ContainerSpec(
            image_uri=pkg.executor_image_uri, command=argv, args=pkg.args, env=pkg.env))

    pools = tuple(None if p is None else one(p) for p in job.trial_job.worker_pools)
    return replace(job, trial_job=replace(job.trial_job, worker_pools=pools))


def with_base_output(job: JobSpec, base_output_dir: str) -> JobSpec:
    """The job with ``baseOutputDirectory`` = ``base_output_dir``."""
    if not base_output_dir:
        raise ConfigError("expected a gs:// URI for --base-output-dir, got an empty string")
    trial_job = with_trial_job(job).trial_job
    assert trial_job is not None
    return replace(job, trial_job=replace(trial_job, base_output_directory=base_output_dir))


def with_trial_job(job: JobSpec) -> JobSpec:
    """The job with a trialJobSpec: a spec run with a local command gets one pool of one replica
    whose image is the local placeholder (what the trial's CustomJob in CLUSTER_SPEC shows)."""
    if job.trial_job is not None:
        return job
    return replace(job, trial_job=TrialJobSpec(worker_pools=(WorkerPoolSpec(
        container=ContainerSpec(image_uri=LOCAL_IMAGE_URI)),)))


def with_image(job: JobSpec, image_uri: str) -> JobSpec:
    """The job as submitted with container image ``image_uri`` (see ``export_text``)."""
    if not image_uri:
        raise ConfigError("expected a container image URI for --image-uri, got an empty string")
    if job.trial_job is None:
        pool = WorkerPoolSpec(machine_spec=MachineSpec(machine_type=DEFAULT_MACHINE_TYPE),
                              container=ContainerSpec(image_uri=image_uri))
        return replace(job, trial_job=TrialJobSpec(worker_pools=(pool,)))
    pools = tuple(None if p is None else _pool_with_image(p, image_uri)
                  for p in job.trial_job.worker_pools)
    return replace(job, trial_job=replace(job.trial_job, worker_pools=pools))


def _pool_with_image(pool: WorkerPoolSpec, image_uri: str) -> WorkerPoolSpec:
    machine = pool.machine_spec
    if machine.machine_type is None:
        machine = replace(machine, machine_type=DEFAULT_MACHINE_TYPE)
    pkg = pool.python_package
    if pool.container is not None:
        return replace(pool, machine_spec=machine,
                       container=replace(pool.container, image_uri=image_uri))
    assert pkg is not None
    if pkg.package_uris:  # a package Vertex installs: the image is its executor
        return replace(pool, machine_spec=machine,
                       python_package=replace(pkg, executor_image_uri=image_uri))
    # nothing to install: the module must be in the image
    container = ContainerSpec(image_uri=image_uri, command=("python3", "-m", pkg.python_module),
                              args=pkg.args, env=pkg.env)
    return replace(pool, machine_spec=machine, container=container, python_package=None)


def _compact(x: float | int) -> float | int:
    """Integral doubles written as ints (``64`` not ``64.0``); the loader reads them back as floats."""
    if isinstance(x, float) and x.is_integer() and abs(x) < 2**53:
        return int(x)
    return x


class _Writer:
    def __init__(self, *, rest: bool):
        self.rest = rest

    def int64(self, value: int) -> int | str:
        return str(value) if self.rest else value

    def job(self, job: JobSpec) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if job.display_name is not None:
            out["displayName"] = job.display_name
        out["studySpec"] = self.study(job.study)
        out["maxTrialCount"] = job.max_trial_count
        out["parallelTrialCount"] = job.parallel_trial_count
        out["maxFailedTrialCount"] = job.max_failed_trial_count
        if job.trial_job is not None:
            out["trialJobSpec"] = self.trial_job(job.trial_job)
        if job.labels:
            out["labels"] = dict(job.labels)
        return carried.apply(out, job.carried)

    def study(self, study: StudySpec) -> dict[str, Any]:
        out: dict[str, Any] = {"metrics": [
            {"metricId": m.metric_id,
             **({"goal": m.goal.value} if m.goal is not Goal.GOAL_TYPE_UNSPECIFIED else {}),
             **({"safetyConfig": json.loads(m.safety_config)} if m.safety_config else {})}
            for m in study.spec_metrics()]}
        out["parameters"] = [self.parameter(p) for p in study.parameters]
        out["algorithm"] = study.algorithm.value
        if study.measurement_selection is not \
                MeasurementSelection.MEASUREMENT_SELECTION_TYPE_UNSPECIFIED:
            out["measurementSelectionType"] = study.measurement_selection.value
        if study.stopping is not None:
            out[study.stopping.kind.value] = self.stopping(study.stopping)
        return out

    def parameter(self, p: ParameterSpec) -> dict[str, Any]:
        out: dict[str, Any] = {"parameterId": p.parameter_id}
        value: dict[str, Any]
        if p.type is ParameterType.INTEGER:
            low, high = p.bounds()
            value = {"minValue": self.int64(int(low)), "maxValue": self.int64(int(high))}
        elif p.type is ParameterType.DOUBLE:
            low, high = p.bounds()
            value = {"minValue": _compact(low), "maxValue": _compact(high)}
        elif p.type is ParameterType.DISCRETE:
            value = {"values": [_compact(float(v)) for v in p.values]}
        else:
            value = {"values": list(p.values)}
        out[_VALUE_KEYS[p.type]] = value
        if p.scale_type is not ScaleType.SCALE_TYPE_UNSPECIFIED:
            out["scaleType"] = p.scale_type.value
        if p.conditionals:
            out["conditionalParameterSpecs"] = [self.conditional(p, c) for c in p.conditionals]
        return out

    def conditional(self, parent: ParameterSpec, cond: ConditionalParameterSpec) -> dict[str, Any]:
        values: list[Any]
        if parent.type is ParameterType.INTEGER:
            values = [self.int64(int(v)) for v in cond.parent_values]
        elif parent.type is ParameterType.DISCRETE:
            values = [_compact(float(v)) for v in cond.parent_values]
        else:
            values = list(cond.parent_values)
        return {_PARENT_KEYS[parent.type]: {"values": values},
                "parameterSpec": self.parameter(cond.parameter)}

    def stopping(self, s: StoppingSpec) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if s.use_elapsed_duration:
            out["useElapsedDuration"] = True
        if s.kind is StoppingKind.CONVEX:
            for key, value in (("maxStepCount", s.max_step_count),
                               ("minStepCount", s.min_step_count),
                               ("minMeasurementCount", s.min_measurement_count)):
                if value is not None:
                    out[key] = self.int64(value)
            if s.learning_rate_parameter_name is not None:
                out["learningRateParameterName"] = s.learning_rate_parameter_name
            if s.update_all_stopped_trials is not None:
                out["updateAllStoppedTrials"] = s.update_all_stopped_trials
        return out

    def trial_job(self, t: TrialJobSpec) -> dict[str, Any]:
        out: dict[str, Any] = {"workerPoolSpecs": [{} if p is None else self.pool(p)
                                         for p in t.worker_pools]}
        if t.base_output_directory is not None:
            out["baseOutputDirectory"] = {"outputUriPrefix": t.base_output_directory}
        sched: dict[str, Any] = {}
        if t.scheduling.timeout_s is not None:
            sched["timeout"] = duration(t.scheduling.timeout_s)
        if t.scheduling.restart_job_on_worker_restart:
            sched["restartJobOnWorkerRestart"] = True
        if sched:
            out["scheduling"] = sched
        return out

    def pool(self, p: WorkerPoolSpec) -> dict[str, Any]:
        out: dict[str, Any] = {}
        machine = self.machine(p.machine_spec)
        if machine:
            out["machineSpec"] = machine
        out["replicaCount"] = self.int64(p.replica_count)
        if p.container is not None:
            c = p.container
            out["containerSpec"] = {"imageUri": c.image_uri, **self.task(c.command, c.args, c.env)}
        elif p.python_package is not None:
            k = p.python_package
            spec: dict[str, Any] = {"executorImageUri": k.executor_image_uri}
            if k.package_uris:
                spec["packageUris"] = list(k.package_uris)
            spec["pythonModule"] = k.python_module
            out["pythonPackageSpec"] = {**spec, **self.task((), k.args, k.env)}
        if p.disk_spec:
            out["diskSpec"] = dict(p.disk_spec)
        return out

    @staticmethod
    def machine(m: MachineSpec) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if m.machine_type is not None:
            out["machineType"] = m.machine_type
        if m.accelerator_type is not None:
            out["acceleratorType"] = m.accelerator_type
        if m.accelerator_count:
            out["acceleratorCount"] = m.accelerator_count
        return out

    @staticmethod
    def task(command: tuple[str, ...], args: tuple[str, ...],
             env: tuple[EnvVar, ...]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if command:
            out["command"] = list(command)
        if args:
            out["args"] = list(args)
        if env:
            out["env"] = [{"name": e.name, "value": e.value} for e in env]
        return out
