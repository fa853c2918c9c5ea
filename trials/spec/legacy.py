"""The legacy AI Platform ``hptuning_config.yaml`` (``trainingInput.hyperparameters``) form."""

from __future__ import annotations

from typing import Any

from trials.spec import (
    Algorithm,
    ContainerSpec,
    Goal,
    JobSpec,
    MachineSpec,
    MetricSpec,
    ParameterSpec,
    ParameterType,
    PythonPackageSpec,
    ScaleType,
    StoppingKind,
    StudySpec,
    TrialJobSpec,
    WorkerPoolSpec,
)
from trials.spec import rules as rules
from trials.spec.carried import to_text
from trials.spec.model import LOCAL_IMAGE_URI
from trials.spec.node import INT32_MAX, MISSING, Node, absent
from trials.spec.vertex import disk_spec

DEFAULT_METRIC_TAG = "training/hptuning/metric"  # AI Platform's tag when none is configured
_IGNORED_TOP = {"createTime", "startTime", "endTime", "state", "errorMessage", "trainingOutput",
                "etag"}
# AI Platform fields with a Vertex field: carried to that path, exported, not emulated.
_CARRIED_INPUT = {"serviceAccount": "trialJobSpec.serviceAccount",
                  "network": "trialJobSpec.network",
                  "enableWebAccess": "trialJobSpec.enableWebAccess",
                  "encryptionConfig": "encryptionSpec"}
# AI Platform fields with no Vertex field: accepted, listed by validate, not exported.
_DROPPED_INPUT = {"region", "scaleTier", "runtimeVersion", "pythonVersion", "scheduling",
                  "useChiefInTfConfig"}
_IGNORED_INPUT = {*_CARRIED_INPUT, *_DROPPED_INPUT}
_POOLS = ("worker", "parameterServer", "evaluator")  # pools 1, 2, 3
_INPUT_KEYS = {"hyperparameters", "pythonModule", "packageUris", "args", "jobDir", "masterType",
               "masterConfig", *(f"{p}{s}" for p in _POOLS for s in ("Type", "Count", "Config"))}
_HP_KEYS = {"goal", "hyperparameterMetricTag", "maxTrials", "maxParallelTrials", "maxFailedTrials",
            "enableTrialEarlyStopping", "algorithm", "params"}
_PARAM_KEYS = {"parameterName", "type", "minValue", "maxValue", "categoricalValues",
               "discreteValues", "scaleType"}
_CONFIG_KEYS = {"imageUri", "acceleratorConfig", "containerCommand", "containerArgs", "diskConfig"}
SCALES = {"NONE": ScaleType.SCALE_TYPE_UNSPECIFIED,
          **{s.value: s for s in ScaleType}}
TYPES = {t.value: t for t in ParameterType}
JOB_DIR_FLAG = "--job-dir"
ALGORITHMS = {a.value: a for a in Algorithm}


def parse_legacy(root: Node) -> JobSpec:
    """Parse the legacy form.

    Mapping to the Vertex job: ``params[]`` -> ``studySpec.parameters``, ``hyperparameterMetricTag`` +
    ``goal`` -> the one metric, ``enableTrialEarlyStopping`` -> ``medianAutomatedStoppingSpec``,
    ``pythonModule`` (+ ``masterConfig.imageUri`` as the executor image) -> a PythonPackageSpec pool,
    ``masterConfig.imageUri`` alone -> a ContainerSpec pool, ``jobDir`` -> ``baseOutputDirectory``
    and ``--job-dir <jobDir>`` after each pool's args,
    ``masterType`` -> ``machineType``, ``worker*``/``parameterServer*``/``evaluator*`` -> pools 1-3.
    Scale ``NONE`` is unspecified. ``serviceAccount``, ``network``, ``enableWebAccess`` and
    ``encryptionConfig`` are carried to their Vertex fields (exported, not emulated); ``region``,
    ``scaleTier``, ``runtimeVersion``, ``pythonVersion``, ``useChiefInTfConfig`` and the job-level
    ``scheduling`` have no Vertex field: accepted, listed by validate, not exported.
    """
    top = root.mapping({"trainingInput", "jobId", "labels"}, _IGNORED_TOP)
    ti = top["trainingInput"]
    f = ti.mapping(_INPUT_KEYS, _IGNORED_INPUT)
    hp_node = _req(f, ti, "hyperparameters")
    hp = hp_node.mapping(_HP_KEYS, {"resumePreviousJobId"})
    tag = _req(hp, hp_node, "hyperparameterMetricTag")
    metric = MetricSpec(
        metric_id=DEFAULT_METRIC_TAG if tag.missing else _metric_tag(tag),
        goal=Goal.GOAL_TYPE_UNSPECIFIED if absent(hp, "goal") else hp["goal"].enum(Goal))
    registry = rules.IdRegistry()
    params_node = _req(hp, hp_node, "params")
    params = tuple(_parameter(p, registry) for p in params_node.list("params", min_len=1))
    early = hp.get("enableTrialEarlyStopping")
    study = StudySpec(
        metrics=(metric,), parameters=params,
        algorithm=(Algorithm.ALGORITHM_UNSPECIFIED if absent(hp, "algorithm") else
                   hp["algorithm"].enum(Algorithm, names=ALGORITHMS)),
        stopping=(rules.stopping(StoppingKind.MEDIAN)
                  if early is not None and early.value is not None and early.boolean() else None))
    rules.check_study(study, registry, parameters=params_node, algorithm=hp.get("algorithm"),
                      stopping=early)
    n_max, n_par, n_fail = rules.counts(
        *(None if absent(hp, k) else hp[k]
          for k in ("maxTrials", "maxParallelTrials", "maxFailedTrials")))
    return JobSpec(
        study=study,
        display_name=None if absent(top, "jobId") else rules.display_name(top["jobId"]),
        max_trial_count=n_max, parallel_trial_count=n_par, max_failed_trial_count=n_fail,
        trial_job=_trial_job(f, ti),
        labels=() if absent(top, "labels") else rules.labels(top["labels"]),
        carried=_carried(ti), dropped=_dropped(ti, hp_node))


def _carried(ti: Node) -> tuple[tuple[str, str], ...]:
    assert isinstance(ti.value, dict)
    out = []
    for key, path in _CARRIED_INPUT.items():
        value = ti.value.get(key)
        if value is None:
            continue
        if key == "encryptionConfig":  # {kmsKeyName} in both APIs
            Node(value, f"{ti.path}.{key}", ti.source).mapping({"kmsKeyName"})
        out.append((path, to_text(value)))
    return tuple(sorted(out))


def _dropped(ti: Node, hp: Node) -> tuple[str, ...]:
    found = [f"{ti.path}.{k}" for k in sorted(_DROPPED_INPUT) if k in ti.value]  # type: ignore[operator]
    if isinstance(hp.value, dict) and "resumePreviousJobId" in hp.value:
        found.append(f"{hp.path}.resumePreviousJobId")
    return tuple(found)


def _metric_tag(node: Node) -> str:
    """AI Platform set no whitespace rule on the tag (a Google sample uses "Taxi Model Accuracy")."""
    value = node.string(what="a metric tag")
    if not value.strip():
        node.fail("a non-empty metric tag")
    return rules.metric_id(node, value)



def _req(fields: dict[str, Node], parent: Node, key: str) -> Node:
    return fields[key] if key in fields else Node(MISSING, f"{parent.path}.{key}", parent.source)


def _or_default(fields: dict[str, Node], parent: Node, key: str, default: object) -> Node:
    return parent.default(key, default) if absent(fields, key) else fields[key]


def _parameter(node: Node, registry: rules.IdRegistry) -> ParameterSpec:
    f = node.mapping(_PARAM_KEYS)
    pid = registry.register(_req(f, node, "parameterName"), None)
    ptype = _req(f, node, "type").enum(ParameterType, names=TYPES)
    scale = (ScaleType.SCALE_TYPE_UNSPECIFIED if absent(f, "scaleType") else
             f["scaleType"].enum(ScaleType, names=SCALES))
    rules.check_scale(ptype, scale, f.get("scaleType"))
    wanted = {ParameterType.DOUBLE: ("minValue", "maxValue"),
              ParameterType.INTEGER: ("minValue", "maxValue"),
              ParameterType.DISCRETE: ("discreteValues",),
              ParameterType.CATEGORICAL: ("categoricalValues",)}[ptype]
    for key in ("minValue", "maxValue", "discreteValues", "categoricalValues"):
        if key in f and key not in wanted:
            f[key].fail(f"only {' and '.join(wanted)} for a {ptype.value} parameter",
                        got=f"`{key}`")
    # proto3 (ml v1 is a proto3 API too): an absent bound is 0, an absent list is empty
    if ptype in (ParameterType.DOUBLE, ParameterType.INTEGER):
        zero = 0 if ptype is ParameterType.INTEGER else 0.0
        lo, hi = rules.range_bounds(ptype, _or_default(f, node, "minValue", zero),
                                    _or_default(f, node, "maxValue", zero), scale)
        param = ParameterSpec(parameter_id=pid, type=ptype, min_value=lo, max_value=hi,
                              scale_type=scale)
    elif ptype is ParameterType.DISCRETE:
        values = rules.discrete_values(_or_default(f, node, "discreteValues", []), scale)
        param = ParameterSpec(parameter_id=pid, type=ptype, scale_type=scale, values=values)
    else:
        param = ParameterSpec(parameter_id=pid, type=ptype, scale_type=scale,
                              values=rules.categorical_values(
                                  _or_default(f, node, "categoricalValues", [])))
    registry.paths[id(param)] = node.path
    return param


def _trial_job(f: dict[str, Node], ti: Node) -> TrialJobSpec | None:
    master = f["masterConfig"].mapping(_CONFIG_KEYS, {"tpuTfVersion"}) \
        if not absent(f, "masterConfig") else {}
    image = None if absent(master, "imageUri") else master["imageUri"].string(what="an image URI")
    module = None if absent(f, "pythonModule") else f["pythonModule"].string(
        what="a Python module name")
    if module is None and image is None:
        for key in ("args", "jobDir", "packageUris", "masterType", "workerCount"):
            if key in f:
                f[key].fail("`pythonModule` or `masterConfig.imageUri` alongside it",
                            got=f"`{key}` without a trainer")
        return None
    args = () if absent(f, "args") else f["args"].strings()
    if not absent(f, "jobDir"):  # AI Platform passed jobDir to every replica as `--job-dir`
        args = (*args, JOB_DIR_FLAG, f["jobDir"].string(what="a job directory"))
    pools: list[WorkerPoolSpec | None] = [
        _pool(f.get("masterType"), master, 1, module, image, f, args)]
    for name in _POOLS:
        count_node = f.get(f"{name}Count")
        count = 0 if count_node is None or count_node.value is None else count_node.integer(
            lo=0, hi=rules.MAX_REPLICA_COUNT)
        config = f[f"{name}Config"].mapping(_CONFIG_KEYS, {"tpuTfVersion"}) \
            if not absent(f, f"{name}Config") else {}
        own_image = None if absent(config, "imageUri") else config["imageUri"].string()
        pools.append(_pool(f.get(f"{name}Type"), config, count, module, own_image or image, f,
                           args) if count else None)
    while pools[-1] is None:
        pools.pop()
    return TrialJobSpec(
        worker_pools=tuple(pools),
        base_output_directory=None if absent(f, "jobDir") else f["jobDir"].string(
            what="a job directory"))


def _pool(type_node: Node | None, config: dict[str, Node], count: int, module: str | None,
          image: str | None, f: dict[str, Node], args: tuple[str, ...]) -> WorkerPoolSpec:
    accel = config.get("acceleratorConfig")
    acc = accel.mapping({"count", "type"}) if accel is not None and accel.value is not None else {}
    machine = MachineSpec(
        machine_type=None if type_node is None or type_node.value is None else type_node.string(),
        accelerator_type=None if absent(acc, "type") else acc["type"].string(),
        accelerator_count=0 if absent(acc, "count") else acc["count"].integer(lo=0, hi=INT32_MAX))
    command = () if absent(config, "containerCommand") else config["containerCommand"].strings()
    own_args = () if absent(config, "containerArgs") else config["containerArgs"].strings()
    disk = () if absent(config, "diskConfig") else disk_spec(config["diskConfig"])
    if module is not None:
        task: dict[str, Any] = {"python_package": PythonPackageSpec(
            executor_image_uri=image or LOCAL_IMAGE_URI, python_module=module,
            package_uris=() if absent(f, "packageUris") else f["packageUris"].strings(max_len=100),
            args=own_args + args)}
    else:
        task = {"container": ContainerSpec(image_uri=image or LOCAL_IMAGE_URI, command=command,
                                           args=own_args + args)}
    return WorkerPoolSpec(machine_spec=machine, replica_count=count, disk_spec=disk, **task)
