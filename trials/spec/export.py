"""Write a JobSpec back as the REST JSON body or the gcloud ``--config`` YAML (export -> load = id)."""

from __future__ import annotations

import json
from dataclasses import replace

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


def to_rest(job: JobSpec) -> dict:
    """The REST JSON body of ``hyperparameterTuningJobs.create``.

    camelCase, enum names, int64 values as strings, durations as ``"3600s"``; unspecified enums
    and default values are omitted; the local options (``trialsLocal``) are never exported.
    """
    return _Writer(rest=True).job(job)


def to_gcloud(job: JobSpec) -> dict:
    """The YAML document for ``gcloud ai hp-tuning-jobs create --config`` (ints as ints)."""
    return _Writer(rest=False).job(job)


def export_text(job: JobSpec, fmt: str, *, image_uri: str | None = None) -> str:
    """Render ``job`` as ``fmt`` ("rest-json" | "gcloud-yaml").

    Args:
        job: the loaded job.
        fmt: the output format.
        image_uri: the container image to submit: replaces every containerSpec's imageUri (the
            command stays), turns a local python-module pool into a container running
            ``python3 -m <module>``, creates a one-pool trial job when the spec has none, and
            fills in ``machineType`` (``n1-standard-4``) where the spec names none.

    Raises:
        ConfigError: unknown format, or no trial job and no ``image_uri``.
    """
    if image_uri is not None:
        job = with_image(job, image_uri)
    elif job.trial_job is None:
        raise ConfigError("expected a spec with a trial command or image, or --image-uri IMAGE to "
                          "export it; got a search space with no trialJobSpec (pass --image-uri)")
    if fmt == "rest-json":
        return json.dumps(to_rest(job), indent=2) + "\n"
    if fmt == "gcloud-yaml":
        import yaml

        return yaml.safe_dump(to_gcloud(job), sort_keys=False, default_flow_style=False,
                              allow_unicode=True, width=100)
    raise ConfigError(f"expected an export format in {', '.join(FORMATS)}, got {fmt!r}")


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
    if pkg is not None and pkg.executor_image_uri == LOCAL_IMAGE_URI:
        container = ContainerSpec(image_uri=image_uri, command=("python3", "-m", pkg.python_module),
                                  args=pkg.args, env=pkg.env)
        return replace(pool, machine_spec=machine, container=container, python_package=None)
    return replace(pool, machine_spec=machine)


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

    def job(self, job: JobSpec) -> dict:
        out: dict = {}
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
        return out

    def study(self, study: StudySpec) -> dict:
        out: dict = {"metrics": [
            {"metricId": m.metric_id, **({"goal": m.goal.value}
                                          if m.goal is not Goal.GOAL_TYPE_UNSPECIFIED else {})}
            for m in study.metrics]}
        out["parameters"] = [self.parameter(p) for p in study.parameters]
        out["algorithm"] = study.algorithm.value
        if study.measurement_selection is not \
                MeasurementSelection.MEASUREMENT_SELECTION_TYPE_UNSPECIFIED:
            out["measurementSelectionType"] = study.measurement_selection.value
        if study.stopping is not None:
            out[study.stopping.kind.value] = self.stopping(study.stopping)
        return out

    def parameter(self, p: ParameterSpec) -> dict:
        out: dict = {"parameterId": p.parameter_id}
        if p.type is ParameterType.INTEGER:
            value = {"minValue": self.int64(int(p.min_value)),  # type: ignore[arg-type]
                     "maxValue": self.int64(int(p.max_value))}  # type: ignore[arg-type]
        elif p.type is ParameterType.DOUBLE:
            value = {"minValue": _compact(p.min_value), "maxValue": _compact(p.max_value)}  # type: ignore[arg-type]
        elif p.type is ParameterType.DISCRETE:
            value = {"values": [_compact(v) for v in p.values]}  # type: ignore[arg-type]
        else:
            value = {"values": list(p.values)}
        out[_VALUE_KEYS[p.type]] = value
        if p.scale_type is not ScaleType.SCALE_TYPE_UNSPECIFIED:
            out["scaleType"] = p.scale_type.value
        if p.conditionals:
            out["conditionalParameterSpecs"] = [self.conditional(p, c) for c in p.conditionals]
        return out

    def conditional(self, parent: ParameterSpec, cond: ConditionalParameterSpec) -> dict:
        if parent.type is ParameterType.INTEGER:
            values = [self.int64(int(v)) for v in cond.parent_values]
        elif parent.type is ParameterType.DISCRETE:
            values = [_compact(v) for v in cond.parent_values]  # type: ignore[arg-type]
        else:
            values = list(cond.parent_values)
        return {_PARENT_KEYS[parent.type]: {"values": values},
                "parameterSpec": self.parameter(cond.parameter)}

    def stopping(self, s: StoppingSpec) -> dict:
        out: dict = {}
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

    def trial_job(self, t: TrialJobSpec) -> dict:
        out: dict = {"workerPoolSpecs": [{} if p is None else self.pool(p)
                                         for p in t.worker_pools]}
        if t.base_output_directory is not None:
            out["baseOutputDirectory"] = {"outputUriPrefix": t.base_output_directory}
        sched: dict = {}
        if t.scheduling.timeout_s is not None:
            sched["timeout"] = duration(t.scheduling.timeout_s)
        if t.scheduling.restart_job_on_worker_restart:
            sched["restartJobOnWorkerRestart"] = True
        if sched:
            out["scheduling"] = sched
        return out

    def pool(self, p: WorkerPoolSpec) -> dict:
        out: dict = {}
        machine = self.machine(p.machine_spec)
        if machine:
            out["machineSpec"] = machine
        out["replicaCount"] = self.int64(p.replica_count)
        if p.container is not None:
            c = p.container
            out["containerSpec"] = {"imageUri": c.image_uri, **self.task(c.command, c.args, c.env)}
        elif p.python_package is not None:
            k = p.python_package
            spec: dict = {"executorImageUri": k.executor_image_uri}
            if k.package_uris:
                spec["packageUris"] = list(k.package_uris)
            spec["pythonModule"] = k.python_module
            out["pythonPackageSpec"] = {**spec, **self.task((), k.args, k.env)}
        if p.disk_spec:
            out["diskSpec"] = dict(p.disk_spec)
        return out

    @staticmethod
    def machine(m: MachineSpec) -> dict:
        out: dict = {}
        if m.machine_type is not None:
            out["machineType"] = m.machine_type
        if m.accelerator_type is not None:
            out["acceleratorType"] = m.accelerator_type
        if m.accelerator_count:
            out["acceleratorCount"] = m.accelerator_count
        return out

    @staticmethod
    def task(command: tuple[str, ...], args: tuple[str, ...],
             env: tuple[EnvVar, ...]) -> dict:
        out: dict = {}
        if command:
            out["command"] = list(command)
        if args:
            out["args"] = list(args)
        if env:
            out["env"] = [{"name": e.name, "value": e.value} for e in env]
        return out
