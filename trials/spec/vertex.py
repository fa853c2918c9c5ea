"""The HyperparameterTuningJob form (gcloud ``--config`` YAML and REST JSON) parsed into a JobSpec.

Read with proto3 JSON semantics, as ``HyperparameterTuningJob.from_json`` reads it: keys by JSON
or proto name, enums by name or number, ``null`` as unset, an absent scalar as its default (then
judged by the rules); see ``trials.spec.schema``.
"""

from __future__ import annotations

from trials.spec import rules as rules
from trials.spec import schema
from trials.spec.carried import CARRIED_KEYS, OUTPUT_KEYS, to_text
from trials.spec.model import (
    Algorithm,
    ConditionalParameterSpec,
    ContainerSpec,
    EnvVar,
    Goal,
    JobSpec,
    LocalOptions,
    MachineSpec,
    MeasurementSelection,
    MetricSpec,
    ParameterSpec,
    ParameterType,
    PythonPackageSpec,
    ScaleType,
    Scheduling,
    StoppingKind,
    StoppingSpec,
    StudySpec,
    TrialJobSpec,
    WorkerPoolSpec,
)
from trials.spec.node import INT32_MAX, MISSING, E, Node, absent

# Keys Vertex defines that the model does not hold: output-only job fields are dropped, the
# others are carried (kept for export, not emulated; see ``trials.spec.carried``).
IGNORED_KEYS: dict[str, frozenset[str]] = {**CARRIED_KEYS,
                                           "job": CARRIED_KEYS["job"] | OUTPUT_KEYS}
LOCAL_KEY = "trialsLocal"

_JOB_KEYS = {"displayName", "studySpec", "maxTrialCount", "parallelTrialCount",
             "maxFailedTrialCount", "trialJobSpec", "labels", LOCAL_KEY}
_STUDY_KEYS = {"metrics", "parameters", "algorithm", "measurementSelectionType",
               *(k.value for k in StoppingKind)}
_VALUE_SPECS = {"doubleValueSpec": ParameterType.DOUBLE, "integerValueSpec": ParameterType.INTEGER,
                "categoricalValueSpec": ParameterType.CATEGORICAL,
                "discreteValueSpec": ParameterType.DISCRETE}
_PARENT_KEYS = {"parentDiscreteValues": ParameterType.DISCRETE,
                "parentIntValues": ParameterType.INTEGER,
                "parentCategoricalValues": ParameterType.CATEGORICAL}
_CONVEX_KEYS = {"maxStepCount", "minStepCount", "minMeasurementCount", "learningRateParameterName",
                "useElapsedDuration", "updateAllStoppedTrials"}
_LOCAL_KEYS = {"inject_restarts": "injectRestarts", "grace_period_s": "gracePeriod",
               "memory_limit_mb": "memoryLimitMb"}


def _numbers(cls: type[E], name: str) -> dict[int, E]:
    """``{number: member}`` of a model enum whose values are the proto enum's names."""
    return {number: cls(value) for number, value in schema.enum_numbers(name).items()}


GOAL_NUMBERS = _numbers(Goal, "StudySpec.MetricSpec.GoalType")
SCALE_NUMBERS = _numbers(ScaleType, "StudySpec.ParameterSpec.ScaleType")
ALGORITHM_NUMBERS = _numbers(Algorithm, "StudySpec.Algorithm")
SELECTION_NUMBERS = _numbers(MeasurementSelection, "StudySpec.MeasurementSelectionType")
ACCELERATORS = schema.ENUMS["AcceleratorType"]
# Which v1 message each group of carried keys belongs to (the value specs are told apart below).
_CARRIED_IN = {"job": "HyperparameterTuningJob", "studySpec": "StudySpec",
               "trialJobSpec": "CustomJobSpec", "workerPoolSpec": "WorkerPoolSpec",
               "machineSpec": "MachineSpec", "scheduling": "Scheduling"}


class _Carried:
    """The carried fields met while parsing: (REST path, the value's canonical JSON text)."""

    def __init__(self) -> None:
        self.found: list[tuple[str, str]] = []

    def take(self, message: str, fields: dict[str, Node], at: str) -> None:
        for key, node in fields.items():
            if key in OUTPUT_KEYS and message == "HyperparameterTuningJob":
                continue
            value = schema.field_value(node, schema.MESSAGES[message][key])
            if value is not schema.UNSET:
                self.found.append((f"{at}.{key}" if at else key, to_text(value)))


def parse_job(root: Node) -> JobSpec:
    """The HyperparameterTuningJob message: the gcloud ``--config`` YAML and the REST JSON body
    share this parser. Keys are JSON names (camelCase) or proto names (snake_case); int64 fields
    may be JSON strings; enums names or numbers; an absent field is its proto3 default."""
    root = Node(root.value, root.path, root.source, proto=True)
    carried = _Carried()
    f, ignored = root.fields(_JOB_KEYS, IGNORED_KEYS["job"])
    carried.take(_CARRIED_IN["job"], ignored, "")
    study = _study(f.get("studySpec") or _missing(root, "studySpec"), carried)
    n_max, n_par, n_fail = rules.counts(
        *(f.get(k) for k in ("maxTrialCount", "parallelTrialCount", "maxFailedTrialCount")))
    name = f.get("displayName")
    return JobSpec(
        study=study,
        display_name=None if name is None or name.value == "" else rules.display_name(name),
        max_trial_count=n_max, parallel_trial_count=n_par, max_failed_trial_count=n_fail,
        trial_job=trial_job(f["trialJobSpec"], carried) if "trialJobSpec" in f else None,
        labels=rules.labels(f["labels"]) if "labels" in f else (),
        local=rules.local_options(f[LOCAL_KEY], _LOCAL_KEYS) if LOCAL_KEY in f else LocalOptions(),
        carried=tuple(sorted(carried.found)),
    )


CUSTOM_JOB_METRIC = "trials-custom-job"  # a CustomJob's study: never reported, never shown as the job's


def custom_job(data: object, *, source: str) -> JobSpec:
    """A CustomJob body (``displayName``, ``jobSpec``, ``labels``) as the one-trial job that runs it: no
    parameters, the job's ``jobSpec`` as its trial's, success by its replicas' exit (``local.custom_job``)."""
    root = Node(data, "", source)
    if not isinstance(data, dict):
        root.fail("a CustomJob object")
    carried = _Carried()
    f, ignored = root.fields({"displayName", "jobSpec", "labels"}, {"encryptionSpec", "name", "state",
                                                                    "createTime", "startTime", "endTime",
                                                                    "updateTime", "error", "webAccessUris"})
    name = f.get("displayName")
    return JobSpec(
        study=StudySpec(metrics=(MetricSpec(metric_id=CUSTOM_JOB_METRIC, goal=Goal.MAXIMIZE),), parameters=()),
        display_name=None if name is None or name.value == "" else rules.display_name(name),
        trial_job=trial_job(_require(f, root, "jobSpec"), carried),
        labels=rules.labels(f["labels"]) if "labels" in f else (),
        local=LocalOptions(custom_job=True),
    )


def _missing(parent: Node, key: str) -> Node:
    return Node(MISSING, f"{parent.path}.{key}" if parent.path else key, parent.source)


def _require(fields: dict[str, Node], parent: Node, key: str) -> Node:
    return fields[key] if key in fields else _missing(parent, key)


def _study(node: Node, carried: _Carried) -> StudySpec:
    f, ignored = node.fields(_STUDY_KEYS, IGNORED_KEYS["studySpec"])
    carried.take(_CARRIED_IN["studySpec"], ignored, "studySpec")
    metric_nodes = _require(f, node, "metrics").list("metrics", min_len=1)
    all_metrics = rules.metrics(((m, _metric(m)) for m in metric_nodes),
                                _require(f, node, "metrics"))
    metrics, safety, positions = rules.split_safety(all_metrics, _require(f, node, "metrics"))
    algorithm = (Algorithm.ALGORITHM_UNSPECIFIED if absent(f, "algorithm") else
                 f["algorithm"].enum(Algorithm, numbers=ALGORITHM_NUMBERS))
    selection = (MeasurementSelection.MEASUREMENT_SELECTION_TYPE_UNSPECIFIED
                 if absent(f, "measurementSelectionType") else
                 f["measurementSelectionType"].enum(MeasurementSelection,
                                                    numbers=SELECTION_NUMBERS))
    registry = rules.IdRegistry()
    params_node = _require(f, node, "parameters")
    params = tuple(_parameter(p, registry, None, 0, f"studySpec.parameters[{i}]", carried)
                   for i, p in enumerate(params_node.list("parameters", min_len=1)))
    stop_keys = [k for k in StoppingKind if k.value in f]  # (null ones are unset: not in f)
    if len(stop_keys) > 1:
        f[stop_keys[1].value].fail("at most one automated stopping spec",
                                   got=" and ".join(k.value for k in stop_keys))
    stop_node = f[stop_keys[0].value] if stop_keys else None
    stopping = _stopping(stop_keys[0], stop_node) if stop_node is not None else None
    study = StudySpec(metrics=metrics, parameters=params, algorithm=algorithm,
                      measurement_selection=selection, stopping=stopping,
                      safety_metrics=safety, safety_positions=positions)
    return rules.check_study(study, registry, parameters=params_node,
                             algorithm=f.get("algorithm"), stopping=stop_node)


def _metric(node: Node) -> MetricSpec:
    f = node.mapping({"metricId", "goal", "safetyConfig"})
    metric_id = rules.identifier(_require(f, node, "metricId"), "a metric id")
    goal = (Goal.GOAL_TYPE_UNSPECIFIED if absent(f, "goal") else
            f["goal"].enum(Goal, numbers=GOAL_NUMBERS))
    safety = None if absent(f, "safetyConfig") else rules.safety_config(f["safetyConfig"])
    return MetricSpec(metric_id=metric_id, goal=goal, safety_config=safety)


def _parameter(node: Node, registry: rules.IdRegistry, owner: str | None, depth: int, at: str,
               carried: _Carried) -> ParameterSpec:
    rules.check_depth(node, depth)
    f = node.mapping({"parameterId", "scaleType", "conditionalParameterSpecs", *_VALUE_SPECS})
    pid = registry.register(_require(f, node, "parameterId"), owner)
    specs = [k for k in _VALUE_SPECS if k in f]
    if len(specs) != 1:
        node.fail("exactly one of " + ", ".join(_VALUE_SPECS),
                  got=" and ".join(specs) if specs else "none of them")
    ptype, spec = _VALUE_SPECS[specs[0]], f[specs[0]]
    spec_message = f"StudySpec.ParameterSpec.{specs[0][0].upper()}{specs[0][1:]}"
    scale_node = f.get("scaleType")
    scale = (ScaleType.SCALE_TYPE_UNSPECIFIED if scale_node is None or scale_node.value is None
             else scale_node.enum(ScaleType, numbers=SCALE_NUMBERS))
    rules.check_scale(ptype, scale, scale_node)
    if ptype in (ParameterType.DOUBLE, ParameterType.INTEGER):
        v, ignored = spec.fields({"minValue", "maxValue"}, IGNORED_KEYS["valueSpec"])
        zero = 0 if ptype is ParameterType.INTEGER else 0.0  # proto3: an absent bound is 0
        lo, hi = rules.range_bounds(ptype, v.get("minValue") or spec.default("minValue", zero),
                                    v.get("maxValue") or spec.default("maxValue", zero), scale)
        param = ParameterSpec(parameter_id=pid, type=ptype, min_value=lo, max_value=hi,
                              scale_type=scale)
    else:
        v, ignored = spec.fields({"values"}, IGNORED_KEYS["valueSpec"])
        values_node = v.get("values") or spec.default("values", [])
        values = (rules.discrete_values(values_node, scale) if ptype is ParameterType.DISCRETE
                  else rules.categorical_values(values_node))
        param = ParameterSpec(parameter_id=pid, type=ptype, values=values, scale_type=scale)
    carried.take(spec_message, ignored, f"{at}.{specs[0]}")
    conds = []
    if "conditionalParameterSpecs" in f:
        for j, c in enumerate(f["conditionalParameterSpecs"].list("conditional parameter specs")):
            where = f"{at}.conditionalParameterSpecs[{j}].parameterSpec"
            conds.append((c, _conditional(c, param, registry, node.path, depth, where, carried)))
    param = rules.with_conditionals(param, conds)
    registry.paths[id(param)] = node.path
    return param


def _conditional(node: Node, parent: ParameterSpec, registry: rules.IdRegistry, owner: str,
                 depth: int, at: str, carried: _Carried) -> ConditionalParameterSpec:
    f = node.mapping({"parameterSpec", *_PARENT_KEYS})
    given = [k for k in _PARENT_KEYS if k in f]
    if len(given) != 1:
        node.fail("exactly one of " + ", ".join(_PARENT_KEYS),
                  got=" and ".join(given) if given else "none of them")
    values_node = f[given[0]]
    v = values_node.mapping({"values"})
    parent_values = rules.parent_values(parent, v.get("values") or values_node.default("values", []),
                                        _PARENT_KEYS[given[0]])
    child = _parameter(_require(f, node, "parameterSpec"), registry, owner, depth + 1, at, carried)
    return ConditionalParameterSpec(parent_values=parent_values, parameter=child)


def _stopping(kind: StoppingKind, node: Node) -> StoppingSpec:
    allowed = _CONVEX_KEYS if kind is StoppingKind.CONVEX else {"useElapsedDuration"}
    f = node.mapping(allowed)
    return rules.stopping(
        kind, use_elapsed_duration=f.get("useElapsedDuration"),
        max_step_count=f.get("maxStepCount"), min_step_count=f.get("minStepCount"),
        min_measurement_count=f.get("minMeasurementCount"),
        learning_rate_parameter_name=f.get("learningRateParameterName"),
        update_all_stopped_trials=f.get("updateAllStoppedTrials"))


def trial_job(node: Node, carried: _Carried | None = None) -> TrialJobSpec:
    """``trialJobSpec`` (a CustomJobSpec)."""
    carried = carried or _Carried()
    f, ignored = node.fields({"workerPoolSpecs", "baseOutputDirectory", "scheduling"},
                             IGNORED_KEYS["trialJobSpec"])
    carried.take(_CARRIED_IN["trialJobSpec"], ignored, "trialJobSpec")
    pool_nodes = _require(f, node, "workerPoolSpecs").list("worker pool specs", min_len=1)
    pools = tuple(_pool(p, i, carried) for i, p in enumerate(pool_nodes))
    base = None
    if "baseOutputDirectory" in f:
        b = f["baseOutputDirectory"]
        base = _require(b.mapping({"outputUriPrefix"}), b, "outputUriPrefix").string(
            what="an output URI prefix")
    scheduling = Scheduling()
    if "scheduling" in f:
        s, ignored = f["scheduling"].fields({"timeout", "restartJobOnWorkerRestart"},
                                            IGNORED_KEYS["scheduling"])
        carried.take(_CARRIED_IN["scheduling"], ignored, "trialJobSpec.scheduling")
        restart = s.get("restartJobOnWorkerRestart")
        scheduling = Scheduling(
            timeout_s=s["timeout"].duration_s() if "timeout" in s else None,
            restart_job_on_worker_restart=restart is not None and restart.boolean())
    return TrialJobSpec(worker_pools=pools, base_output_directory=base, scheduling=scheduling)


def _is_empty(fields: dict[str, Node]) -> bool:
    """Whether a pool is ``{}`` in proto3 terms: every field given is at its default (no
    replicas, empty lists); a message given, even empty, counts as set."""
    return all((key == "replicaCount" and n.integer() == 0)
               or (isinstance(n.value, list) and not n.value) for key, n in fields.items())


def _pool(node: Node, index: int, carried: _Carried) -> WorkerPoolSpec | None:
    f, ignored = node.fields({"machineSpec", "replicaCount", "containerSpec", "pythonPackageSpec",
                              "diskSpec"}, IGNORED_KEYS["workerPoolSpec"])
    if index > 0 and _is_empty({**f, **ignored}):
        return None  # a skipped pool
    at = f"trialJobSpec.workerPoolSpecs[{index}]"
    carried.take(_CARRIED_IN["workerPoolSpec"], ignored, at)
    tasks = [k for k in ("containerSpec", "pythonPackageSpec") if k in f]
    if len(tasks) != 1:
        node.fail("exactly one of containerSpec, pythonPackageSpec" +
                  (" (only later pools may be {} to skip them)" if index == 0 else ""),
                  got=" and ".join(tasks) if tasks else "none of them")
    container = python_package = None
    if "containerSpec" in f:
        c = f["containerSpec"]
        cf = c.mapping({"imageUri", "command", "args", "env"})
        container = ContainerSpec(
            image_uri=_require(cf, c, "imageUri").string(what="an image URI"),
            command=_strings(cf, "command"), args=_strings(cf, "args"), env=_env(cf, "env"))
    else:
        p = f["pythonPackageSpec"]
        pf = p.mapping({"executorImageUri", "packageUris", "pythonModule", "args", "env"})
        python_package = PythonPackageSpec(
            executor_image_uri=_require(pf, p, "executorImageUri").string(what="an image URI"),
            python_module=_require(pf, p, "pythonModule").string(what="a Python module name"),
            package_uris=_strings(pf, "packageUris", max_len=100), args=_strings(pf, "args"),
            env=_env(pf, "env"))
    return WorkerPoolSpec(
        machine_spec=_machine(f["machineSpec"], carried, f"{at}.machineSpec")
        if "machineSpec" in f else MachineSpec(),
        replica_count=rules.replica_count(f.get("replicaCount")),
        container=container, python_package=python_package,
        disk_spec=disk_spec(f["diskSpec"]) if "diskSpec" in f else ())


def _strings(fields: dict[str, Node], key: str, *, max_len: int | None = None) -> tuple[str, ...]:
    return () if absent(fields, key) else fields[key].strings(max_len=max_len)


def _env(fields: dict[str, Node], key: str) -> tuple[EnvVar, ...]:
    if absent(fields, key):
        return ()
    out = []
    for e in fields[key].list("environment variables ({name, value})"):
        ef = e.mapping({"name", "value"})
        value = ef.get("value") or Node("", f"{e.path}.value", e.source)
        out.append(rules.env_var(_require(ef, e, "name"), value))
    return rules.env_list(out, fields[key])


def _machine(node: Node, carried: _Carried, at: str) -> MachineSpec:
    f, ignored = node.fields({"machineType", "acceleratorType", "acceleratorCount"},
                             IGNORED_KEYS["machineSpec"])
    carried.take(_CARRIED_IN["machineSpec"], ignored, at)
    machine_type = f["machineType"].string(allow_empty=True) if "machineType" in f else ""
    accelerator = (f["acceleratorType"].name_of(ACCELERATORS) if "acceleratorType" in f
                   else "ACCELERATOR_TYPE_UNSPECIFIED")
    return MachineSpec(
        machine_type=machine_type or None,  # "" is unset in proto3
        accelerator_type=None if ACCELERATORS[accelerator] == 0 else accelerator,
        accelerator_count=f["acceleratorCount"].integer(lo=0, hi=INT32_MAX)
        if "acceleratorCount" in f else 0)


def disk_spec(node: Node) -> tuple[tuple[str, object], ...]:
    """``diskSpec`` passed through, normalized: bootDiskType (string), bootDiskSizeGb (int);
    "" and 0 are unset (proto3), which Vertex reads as pd-ssd and 100 GB."""
    f = node.mapping({"bootDiskType", "bootDiskSizeGb"})
    out: list[tuple[str, object]] = []
    if "bootDiskType" in f and (kind := f["bootDiskType"].string(allow_empty=True)):
        out.append(("bootDiskType", kind))
    if "bootDiskSizeGb" in f and (size := f["bootDiskSizeGb"].integer(lo=0, hi=INT32_MAX)):
        out.append(("bootDiskSizeGb", size))
    return tuple(out)
