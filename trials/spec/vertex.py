"""The HyperparameterTuningJob form (gcloud ``--config`` YAML and REST JSON) parsed into a JobSpec."""

from __future__ import annotations

from trials.spec import rules as rules
from trials.spec.carried import CARRIED_KEYS, OUTPUT_KEYS, collect
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
from trials.spec.node import INT32_MAX, MISSING, Node, absent

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
GOAL_NUMBERS = {0: Goal.GOAL_TYPE_UNSPECIFIED, 1: Goal.MAXIMIZE, 2: Goal.MINIMIZE}
SCALE_NUMBERS = dict(enumerate(ScaleType))
ALGORITHM_NUMBERS = {0: Algorithm.ALGORITHM_UNSPECIFIED, 2: Algorithm.GRID_SEARCH,
                     3: Algorithm.RANDOM_SEARCH}
SELECTION_NUMBERS = dict(enumerate(MeasurementSelection))

def parse_job(root: Node) -> JobSpec:
    """The HyperparameterTuningJob message in camelCase: the gcloud ``--config`` YAML and the REST
    JSON body share this parser; int64 fields may be JSON strings, enums names or numbers."""
    f = root.mapping(_JOB_KEYS, IGNORED_KEYS["job"])
    study = _study(f.get("studySpec") or _missing(root, "studySpec"))
    n_max, n_par, n_fail = rules.counts(
        *(None if absent(f, k) else f[k]
          for k in ("maxTrialCount", "parallelTrialCount", "maxFailedTrialCount")))
    return JobSpec(
        study=study,
        display_name=None if absent(f, "displayName") else rules.display_name(f["displayName"]),
        max_trial_count=n_max, parallel_trial_count=n_par, max_failed_trial_count=n_fail,
        trial_job=None if absent(f, "trialJobSpec") else trial_job(f["trialJobSpec"]),
        labels=() if absent(f, "labels") else rules.labels(f["labels"]),
        local=rules.local_options(f[LOCAL_KEY], _LOCAL_KEYS) if LOCAL_KEY in f else LocalOptions(),
        carried=collect(root.value),  # type: ignore[arg-type]
    )



def _missing(parent: Node, key: str) -> Node:
    return Node(MISSING, f"{parent.path}.{key}" if parent.path else key, parent.source)


def _require(fields: dict[str, Node], parent: Node, key: str) -> Node:
    return fields[key] if key in fields else _missing(parent, key)


def _study(node: Node) -> StudySpec:
    f = node.mapping(_STUDY_KEYS, IGNORED_KEYS["studySpec"])
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
    params = tuple(_parameter(p, registry, None, 0)
                   for p in params_node.list("parameters", min_len=1))
    stop_keys = [k for k in StoppingKind if k.value in f]
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


def _parameter(node: Node, registry: rules.IdRegistry, owner: str | None,
               depth: int) -> ParameterSpec:
    rules.check_depth(node, depth)
    f = node.mapping({"parameterId", "scaleType", "conditionalParameterSpecs", *_VALUE_SPECS})
    pid = registry.register(_require(f, node, "parameterId"), owner)
    specs = [k for k in _VALUE_SPECS if k in f]
    if len(specs) != 1:
        node.fail("exactly one of " + ", ".join(_VALUE_SPECS),
                  got=" and ".join(specs) if specs else "none of them")
    ptype, spec = _VALUE_SPECS[specs[0]], f[specs[0]]
    scale_node = f.get("scaleType")
    scale = (ScaleType.SCALE_TYPE_UNSPECIFIED if scale_node is None or scale_node.value is None
             else scale_node.enum(ScaleType, numbers=SCALE_NUMBERS))
    rules.check_scale(ptype, scale, scale_node)
    if ptype in (ParameterType.DOUBLE, ParameterType.INTEGER):
        v = spec.mapping({"minValue", "maxValue"}, IGNORED_KEYS["valueSpec"])
        lo, hi = rules.range_bounds(ptype, _require(v, spec, "minValue"),
                                    _require(v, spec, "maxValue"), scale)
        param = ParameterSpec(parameter_id=pid, type=ptype, min_value=lo, max_value=hi,
                              scale_type=scale)
    else:
        v = spec.mapping({"values"}, IGNORED_KEYS["valueSpec"])
        values_node = _require(v, spec, "values")
        values = (rules.discrete_values(values_node, scale) if ptype is ParameterType.DISCRETE
                  else rules.categorical_values(values_node))
        param = ParameterSpec(parameter_id=pid, type=ptype, values=values, scale_type=scale)
    conds = []
    if not absent(f, "conditionalParameterSpecs"):
        for c in f["conditionalParameterSpecs"].list("conditional parameter specs"):
            conds.append((c, _conditional(c, param, registry, node.path, depth)))
    param = rules.with_conditionals(param, conds)
    registry.paths[id(param)] = node.path
    return param


def _conditional(node: Node, parent: ParameterSpec, registry: rules.IdRegistry, owner: str,
                 depth: int) -> ConditionalParameterSpec:
    f = node.mapping({"parameterSpec", *_PARENT_KEYS})
    given = [k for k in _PARENT_KEYS if k in f]
    if len(given) != 1:
        node.fail("exactly one of " + ", ".join(_PARENT_KEYS),
                  got=" and ".join(given) if given else "none of them")
    values_node = f[given[0]]
    v = values_node.mapping({"values"})
    parent_values = rules.parent_values(parent, _require(v, values_node, "values"),
                                        _PARENT_KEYS[given[0]])
    child = _parameter(_require(f, node, "parameterSpec"), registry, owner, depth + 1)
    return ConditionalParameterSpec(parent_values=parent_values, parameter=child)


def _stopping(kind: StoppingKind, node: Node) -> StoppingSpec:
    allowed = _CONVEX_KEYS if kind is StoppingKind.CONVEX else {"useElapsedDuration"}
    f = node.mapping(allowed) if node.value is not None else {}
    return rules.stopping(
        kind, use_elapsed_duration=f.get("useElapsedDuration"),
        max_step_count=f.get("maxStepCount"), min_step_count=f.get("minStepCount"),
        min_measurement_count=f.get("minMeasurementCount"),
        learning_rate_parameter_name=f.get("learningRateParameterName"),
        update_all_stopped_trials=f.get("updateAllStoppedTrials"))


def trial_job(node: Node) -> TrialJobSpec:
    """``trialJobSpec`` (a CustomJobSpec)."""
    f = node.mapping({"workerPoolSpecs", "baseOutputDirectory", "scheduling"},
                     IGNORED_KEYS["trialJobSpec"])
    pool_nodes = _require(f, node, "workerPoolSpecs").list("worker pool specs", min_len=1)
    pools = tuple(_pool(p, i) for i, p in enumerate(pool_nodes))
    base = None
    if not absent(f, "baseOutputDirectory"):
        b = f["baseOutputDirectory"]
        base = _require(b.mapping({"outputUriPrefix"}), b, "outputUriPrefix").string(
            what="an output URI prefix")
    scheduling = Scheduling()
    if not absent(f, "scheduling"):
        s = f["scheduling"].mapping({"timeout", "restartJobOnWorkerRestart"},
                                    IGNORED_KEYS["scheduling"])
        restart = s.get("restartJobOnWorkerRestart")
        scheduling = Scheduling(
            timeout_s=None if absent(s, "timeout") else s["timeout"].duration_s(),
            restart_job_on_worker_restart=bool(restart and restart.value is not None
                                               and restart.boolean()))
    return TrialJobSpec(worker_pools=pools, base_output_directory=base, scheduling=scheduling)


def _pool(node: Node, index: int) -> WorkerPoolSpec | None:
    if node.value == {} and index > 0:
        return None  # a skipped pool
    f = node.mapping({"machineSpec", "replicaCount", "containerSpec", "pythonPackageSpec",
                      "diskSpec"}, IGNORED_KEYS["workerPoolSpec"])
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
        machine_spec=_machine(f["machineSpec"]) if not absent(f, "machineSpec") else MachineSpec(),
        replica_count=1 if absent(f, "replicaCount") else f["replicaCount"].integer(lo=1, hi=rules.MAX_REPLICA_COUNT),
        container=container, python_package=python_package,
        disk_spec=() if absent(f, "diskSpec") else disk_spec(f["diskSpec"]))


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


def _machine(node: Node) -> MachineSpec:
    f = node.mapping({"machineType", "acceleratorType", "acceleratorCount"},
                     IGNORED_KEYS["machineSpec"])
    return MachineSpec(
        machine_type=None if absent(f, "machineType") else f["machineType"].string(),
        accelerator_type=None if absent(f, "acceleratorType") else f["acceleratorType"].string(),
        accelerator_count=0 if absent(f, "acceleratorCount") else
        f["acceleratorCount"].integer(lo=0, hi=INT32_MAX))


def disk_spec(node: Node) -> tuple[tuple[str, object], ...]:
    """``diskSpec`` passed through, normalized: bootDiskType (string), bootDiskSizeGb (int)."""
    f = node.mapping({"bootDiskType", "bootDiskSizeGb"})
    out: list[tuple[str, object]] = []
    if not absent(f, "bootDiskType"):
        out.append(("bootDiskType", f["bootDiskType"].string()))
    if not absent(f, "bootDiskSizeGb"):
        out.append(("bootDiskSizeGb", f["bootDiskSizeGb"].integer(lo=1, hi=INT32_MAX)))
    return tuple(out)
