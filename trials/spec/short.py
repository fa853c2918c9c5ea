"""The short search-space form (``search_spaces/*.yaml``): metrics, parameters, a trial job."""

from __future__ import annotations

from collections.abc import Mapping

from trials.protocol import format_value
from trials.spec import (
    Algorithm,
    ConditionalParameterSpec,
    ContainerSpec,
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
from trials.spec import rules as rules
from trials.spec.model import LOCAL_IMAGE_URI
from trials.spec.node import MISSING, E, Node

_TASK_KEYS = ("command", "python_module", "image_uri")
_JOB_KEYS = ("args", "env", "replica_count", "base_output_dir", "timeout", "machine_type",
             "package_uris", "restart_job_on_worker_restart")
_KEYS = {"display_name", "metrics", "parameters", "algorithm", "measurement", "stopping",
         "max_trial_count", "parallel_trial_count", "max_failed_trial_count", "labels", "local",
         *_TASK_KEYS, *_JOB_KEYS}
GOALS = {"maximize": Goal.MAXIMIZE, "minimize": Goal.MINIMIZE}
TYPES = {"double": ParameterType.DOUBLE, "integer": ParameterType.INTEGER,
         "discrete": ParameterType.DISCRETE, "categorical": ParameterType.CATEGORICAL}
SCALES = {"linear": ScaleType.UNIT_LINEAR_SCALE, "log": ScaleType.UNIT_LOG_SCALE,
          "reverse_log": ScaleType.UNIT_REVERSE_LOG_SCALE}
ALGORITHMS = {"default": Algorithm.ALGORITHM_UNSPECIFIED, "grid": Algorithm.GRID_SEARCH,
              "random": Algorithm.RANDOM_SEARCH}
MEASUREMENTS = {"last": MeasurementSelection.LAST_MEASUREMENT,
                "best": MeasurementSelection.BEST_MEASUREMENT}
STOPPINGS = {"median": StoppingKind.MEDIAN, "decay_curve": StoppingKind.DECAY_CURVE,
             "convex": StoppingKind.CONVEX}
_CONVEX_KEYS = {"max_step_count", "min_step_count", "min_measurement_count",
                "learning_rate_parameter_name", "update_all_stopped_trials"}
_LOCAL_KEYS = {"inject_restarts": "inject_restarts", "grace_period_s": "grace_period",
               "memory_limit_mb": "memory_limit_mb"}


def parse_short(root: Node) -> JobSpec:
    """Parse the short form. Counts default to 1 trial, 1 in parallel, 0 failures allowed.

    Example::

        metrics: {accuracy: maximize}
        parameters:
          learning_rate: {type: double, min: 0.0001, max: 0.1, scale: log}
          optimizer:
            type: categorical
            values: [adam, sgd]
            when:
              - values: [sgd]
                parameters:
                  momentum: {type: double, min: 0.0, max: 0.99}
        command: [python, examples/mlp/train.py]
    """
    f = root.mapping(_KEYS)
    metrics_node = f.get("metrics", Node(MISSING, "metrics", root.source))
    metrics = rules.metrics(
        ((node, MetricSpec(metric_id=rules.identifier(Node(mid, node.path, node.source),
                                                      "a metric id"),
                           goal=node.enum(Goal, names=GOALS)))
         for mid, node in metrics_node.items()), metrics_node)
    registry = rules.IdRegistry()
    params_node = f.get("parameters", Node(MISSING, "parameters", root.source))
    params = tuple(_parameter(pid, node, registry, None, 0) for pid, node in params_node.items())
    stop_node = f.get("stopping")
    study = StudySpec(
        metrics=metrics, parameters=params,
        algorithm=_opt(f, "algorithm", ALGORITHMS, Algorithm.ALGORITHM_UNSPECIFIED),
        measurement_selection=_opt(f, "measurement", MEASUREMENTS,
                                   MeasurementSelection.MEASUREMENT_SELECTION_TYPE_UNSPECIFIED),
        stopping=None if stop_node is None or stop_node.value is None else _stopping(stop_node))
    rules.check_study(study, registry, parameters=params_node, algorithm=f.get("algorithm"),
                      stopping=stop_node)
    n_max, n_par, n_fail = rules.counts(
        f.get("max_trial_count"), f.get("parallel_trial_count"), f.get("max_failed_trial_count"),
        zero_is_unset=False)  # not a proto: 0 here is a mistake, not "unset"
    return JobSpec(
        study=study,
        display_name=rules.display_name(f["display_name"]) if "display_name" in f else None,
        max_trial_count=n_max, parallel_trial_count=n_par, max_failed_trial_count=n_fail,
        trial_job=_trial_job(f, root), labels=rules.labels(f["labels"]) if "labels" in f else (),
        local=rules.local_options(f["local"], _LOCAL_KEYS) if "local" in f else LocalOptions(),
    )


def _opt(fields: dict[str, Node], key: str, names: Mapping[str, E], default: E) -> E:
    node = fields.get(key)
    return default if node is None or node.value is None else node.enum(type(default), names=names)


def _parameter(pid: str, node: Node, registry: rules.IdRegistry, owner: str | None,
               depth: int) -> ParameterSpec:
    rules.check_depth(node, depth)
    registry.register(Node(pid, node.path, node.source), owner)
    if not isinstance(node.value, dict):
        node.fail("a mapping like {type: double, min: 0.0, max: 1.0}")
    type_node = node.mapping({"type", "min", "max", "values", "scale", "when"})
    ptype = type_node.get("type", Node(MISSING, f"{node.path}.type", node.source)).enum(
        ParameterType, names=TYPES)
    allowed = {"type", "when"} | ({"min", "max", "scale"} if ptype in (
        ParameterType.DOUBLE, ParameterType.INTEGER) else {"values"} | (
        {"scale"} if ptype is ParameterType.DISCRETE else set()))
    if ptype is ParameterType.DOUBLE:
        allowed.discard("when")
    f = node.mapping(allowed)
    scale = _opt(f, "scale", SCALES, ScaleType.SCALE_TYPE_UNSPECIFIED)
    if ptype in (ParameterType.DOUBLE, ParameterType.INTEGER):
        lo, hi = rules.range_bounds(ptype, _req(f, node, "min"), _req(f, node, "max"), scale)
        param = ParameterSpec(parameter_id=pid, type=ptype, min_value=lo, max_value=hi,
                              scale_type=scale)
    else:
        values_node = _req(f, node, "values")
        values = (rules.discrete_values(values_node, scale) if ptype is ParameterType.DISCRETE
                  else rules.categorical_values(values_node))
        param = ParameterSpec(parameter_id=pid, type=ptype, values=values, scale_type=scale)
    conds = []
    if "when" in f and f["when"].value is not None:
        for entry in f["when"].list("{values, parameters} entries"):
            ef = entry.mapping({"values", "parameters"})
            parent_values = rules.parent_values(param, _req(ef, entry, "values"), ptype)
            children = _req(ef, entry, "parameters")
            for child_id, child in children.items():
                spec = _parameter(child_id, child, registry, node.path, depth + 1)
                conds.append((child, ConditionalParameterSpec(parent_values=parent_values,
                                                              parameter=spec)))
    param = rules.with_conditionals(param, conds)
    registry.paths[id(param)] = node.path
    return param


def _req(fields: dict[str, Node], parent: Node, key: str) -> Node:
    return fields[key] if key in fields else Node(MISSING, f"{parent.path}.{key}", parent.source)


def _stopping(node: Node) -> StoppingSpec:
    kind = node.mapping({"type", "use_elapsed_duration", *_CONVEX_KEYS}).get(
        "type", Node(MISSING, f"{node.path}.type", node.source)).enum(StoppingKind, names=STOPPINGS)
    allowed = {"type", "use_elapsed_duration"} | (_CONVEX_KEYS if kind is StoppingKind.CONVEX
                                                   else set())
    f = node.mapping(allowed)
    return rules.stopping(kind, use_elapsed_duration=f.get("use_elapsed_duration"),
                          max_step_count=f.get("max_step_count"),
                          min_step_count=f.get("min_step_count"),
                          min_measurement_count=f.get("min_measurement_count"),
                          learning_rate_parameter_name=f.get("learning_rate_parameter_name"),
                          update_all_stopped_trials=f.get("update_all_stopped_trials"))


def _trial_job(f: dict[str, Node], root: Node) -> TrialJobSpec | None:
    tasks = [k for k in _TASK_KEYS if k in f]
    if not tasks:
        for key in _JOB_KEYS:
            if key in f:
                f[key].fail("`command`, `python_module` or `image_uri` alongside it",
                            got=f"`{key}` without a trial command")
        return None
    if "command" in f and "python_module" in f:
        f["python_module"].fail("either `command` or `python_module`", got="both")
    image = f["image_uri"].string(what="an image URI") if "image_uri" in f else LOCAL_IMAGE_URI
    args = f["args"].strings() if "args" in f else ()
    env = rules.env_list([rules.env_var(Node(name, value.path, value.source), _env_value(value))
                          for name, value in f["env"].items()], f["env"]) if "env" in f else ()
    container = python_package = None
    if "python_module" in f:
        python_package = PythonPackageSpec(
            executor_image_uri=image,
            python_module=f["python_module"].string(what="a Python module name"),
            package_uris=f["package_uris"].strings(max_len=100) if "package_uris" in f else (),
            args=args, env=env)
    else:
        if "package_uris" in f:
            f["package_uris"].fail("`python_module` alongside it", got="`package_uris` without it")
        command = f["command"].strings() if "command" in f else ()
        if "command" in f and not command:
            f["command"].fail("a non-empty list of strings")
        container = ContainerSpec(image_uri=image, command=command, args=args, env=env)
    machine = f.get("machine_type")
    restart = f.get("restart_job_on_worker_restart")
    pool = WorkerPoolSpec(
        machine_spec=MachineSpec(machine_type=machine.string() if machine else None),
        replica_count=f["replica_count"].integer(lo=1, hi=rules.MAX_REPLICA_COUNT) if "replica_count" in f else 1,
        container=container, python_package=python_package)
    return TrialJobSpec(
        worker_pools=(pool,),
        base_output_directory=(f["base_output_dir"].string(what="an output directory")
                               if "base_output_dir" in f else None),
        scheduling=Scheduling(
            timeout_s=f["timeout"].duration_s(numbers_ok=True) if "timeout" in f else None,
            restart_job_on_worker_restart=bool(restart and restart.boolean())))


def _env_value(node: Node) -> Node:
    """Env values may be plain YAML numbers here (``OMP_NUM_THREADS: 1``); they become strings."""
    v = node.value
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return Node(format_value(v), node.path, node.source)
    return node
