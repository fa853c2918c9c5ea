"""Vertex AI's StudySpec and job rules, shared by every input form (each check names its node)."""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, field, replace

from trials.protocol import HYPERTUNE_RESERVED_KEYS
from trials.spec import (
    DISCRETE_MIN_GAP,
    MAX_DISCRETE_VALUES,
    Algorithm,
    ConditionalParameterSpec,
    EnvVar,
    LocalOptions,
    MetricSpec,
    ParameterSpec,
    ParameterType,
    ScaleType,
    StoppingKind,
    StoppingSpec,
    StudySpec,
    Value,
    parent_matches,
)
from trials.spec.node import INT32_MAX, Node

MAX_ENV_VARS = 100
# Every replica of a trial is a local process; beyond this a count is a typo, not a cluster.
MAX_REPLICA_COUNT = 256
MAX_DISPLAY_NAME = 128
MAX_NESTING = 16
_C_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_LABEL_KEY = re.compile(r"^[a-z][a-z0-9_-]{0,63}$")
_LABEL_VALUE = re.compile(r"^[a-z0-9_-]{0,64}$")
_LOG_SCALES = (ScaleType.UNIT_LOG_SCALE, ScaleType.UNIT_REVERSE_LOG_SCALE)
_GRID_TYPES = (ParameterType.INTEGER, ParameterType.CATEGORICAL, ParameterType.DISCRETE)


@dataclass(slots=True)
class IdRegistry:
    """Parameter ids seen so far: unique across the tree, except same-id children of one parent."""

    owners: dict[str, tuple[str, str | None]] = field(default_factory=dict)
    paths: dict[int, str] = field(default_factory=dict)  # id(ParameterSpec) -> path, for later checks

    def register(self, node: Node, owner: str | None) -> str:
        pid = identifier(node, "a parameter id")
        if pid in self.owners:
            first_path, first_owner = self.owners[pid]
            if owner is None or owner != first_owner:
                node.fail(f"a unique parameter id (`{pid}` is already used at {first_path})",
                          got=f"`{pid}` again")
        else:
            self.owners[pid] = (node.path, owner)
        return pid


def identifier(node: Node, what: str) -> str:
    """A metric or parameter id: a non-empty string without whitespace."""
    value = node.string(what=what)
    if any(ch.isspace() for ch in value) or value != value.strip():
        node.fail(f"{what} without whitespace")
    return value


def metric_id(node: Node, value: str) -> str:
    """A metric id cloudml-hypertune can report: not one of the keys it writes beside the tags."""
    if value in HYPERTUNE_RESERVED_KEYS:
        node.fail(f"a metric id other than {', '.join(sorted(HYPERTUNE_RESERVED_KEYS))} (cloudml-hypertune "
                  "writes those keys itself, so such a metric could never be reported)", got=f"`{value}`")
    return value


def metrics(pairs: Iterable[tuple[Node, MetricSpec]], where: Node) -> tuple[MetricSpec, ...]:
    """At least one metric; ids unique."""
    seen: dict[str, str] = {}
    out = []
    for node, metric in pairs:
        metric_id(node, metric.metric_id)
        if metric.metric_id in seen:
            node.fail(f"a unique metric id (`{metric.metric_id}` is already used at "
                      f"{seen[metric.metric_id]})", got=f"`{metric.metric_id}` again")
        seen[metric.metric_id] = node.path
        out.append(metric)
    if not out:
        where.fail("at least one metric")
    return tuple(out)


def safety_config(node: Node) -> str:
    """``safetyConfig{safetyThreshold, desiredMinSafeTrialsFraction (0..1)}``, kept as its JSON
    text in the REST body's canonical form (so every spelling of one config is one text)."""
    from trials.spec import schema
    from trials.spec.carried import to_text

    f = node.mapping({"safetyThreshold", "desiredMinSafeTrialsFraction"})
    fraction = f.get("desiredMinSafeTrialsFraction")
    if fraction is not None and fraction.value is not None and not 0 <= fraction.number() <= 1:
        fraction.fail("a fraction between 0 and 1")
    return to_text(schema.canonical(node, "StudySpec.MetricSpec.SafetyMetricConfig"))


def split_safety(all_metrics: tuple[MetricSpec, ...], where: Node
                 ) -> tuple[tuple[MetricSpec, ...], tuple[MetricSpec, ...], tuple[int, ...]]:
    """(objectives, safety metrics, positions of the safety metrics): a safety metric needs a
    separate objective metric."""
    objectives = tuple(m for m in all_metrics if m.safety_config is None)
    safety = tuple(m for m in all_metrics if m.safety_config is not None)
    if not objectives:
        where.fail("at least one objective metric (a metric without safetyConfig) beside the "
                   "safety metrics", got=f"only safety metrics: {', '.join(m.metric_id for m in safety)}")
    positions = tuple(i for i, m in enumerate(all_metrics) if m.safety_config is not None)
    return objectives, safety, positions


def range_bounds(ptype: ParameterType, lo: Node, hi: Node,
                 scale: ScaleType) -> tuple[float | int, float | int]:
    """minValue/maxValue of a DOUBLE or INTEGER parameter: finite, ordered, positive on log scales."""
    if ptype is ParameterType.INTEGER:
        low: float | int = lo.integer()
        high: float | int = hi.integer()
    else:
        low, high = lo.number(), hi.number()
    if low > high:
        hi.fail(f"a maxValue ≥ minValue ({_num(low)})")
    if scale in _LOG_SCALES and low <= 0:
        lo.fail(f"a value > 0 ({scale.value} needs a strictly positive range)")
    return low, high


def discrete_values(node: Node, scale: ScaleType) -> tuple[float, ...]:
    """Finite, increasing, at least 1e-10 apart, 1..1000 of them; positive on log scales."""
    items = node.list("numbers", min_len=1, max_len=MAX_DISCRETE_VALUES)
    out: list[float] = []
    for item in items:
        value = item.number()
        if out and value - out[-1] < DISCRETE_MIN_GAP:
            item.fail(f"values in increasing order, at least {DISCRETE_MIN_GAP:g} apart "
                      f"(the previous value is {_num(out[-1])})")
        out.append(value)
    if scale in _LOG_SCALES and out[0] <= 0:
        items[0].fail(f"a value > 0 ({scale.value} needs strictly positive values)")
    return tuple(out)


def categorical_values(node: Node) -> tuple[str, ...]:
    """Non-empty, unique strings."""
    items = node.list("strings", min_len=1)
    out: list[str] = []
    seen: set[str] = set()  # a list lookup made 100,000 values take minutes
    for item in items:
        value = item.string(what="a non-empty string")
        if value in seen:
            item.fail("unique values", got=f"{value!r} twice")
        seen.add(value)
        out.append(value)
    return tuple(out)


def check_scale(ptype: ParameterType, scale: ScaleType, node: Node | None) -> None:
    if ptype is ParameterType.CATEGORICAL and scale is not ScaleType.SCALE_TYPE_UNSPECIFIED \
            and node is not None:
        node.fail("no scale type for a CATEGORICAL parameter")


def parent_values(parent: ParameterSpec, node: Node, kind: ParameterType) -> tuple[Value, ...]:
    """The parent values that activate a child: the parent's type, each value feasible for it."""
    if parent.type is ParameterType.DOUBLE:
        node.fail("no conditional parameters under a DOUBLE parent "
                  f"(`{parent.parameter_id}` is DOUBLE)", got="a conditional parameter")
    if kind is not parent.type:
        node.fail(f"parent {parent.type.value.lower()} values (the parent "
                  f"`{parent.parameter_id}` is {parent.type.value})",
                  got=f"parent {kind.value.lower()} values")
    items = node.list("parent values", min_len=1)
    out: list[Value] = []
    for item in items:
        if kind is ParameterType.INTEGER:
            value: Value = item.integer()
        elif kind is ParameterType.DISCRETE:
            value = item.number()
        else:
            value = item.string()
        if not parent.contains(value):
            item.fail(f"a value of the parent `{parent.parameter_id}` "
                      f"{parent.describe_range()}")
        out.append(value)
    return tuple(out)


def check_siblings(parent: ParameterSpec, conds: list[tuple[Node, ConditionalParameterSpec]]) -> None:
    """Children of one parent sharing an id must have disjoint parent values."""
    for i, (node, cond) in enumerate(conds):
        for _, earlier in conds[:i]:
            if earlier.parameter.parameter_id != cond.parameter.parameter_id:
                continue
            overlap = [v for v in cond.parent_values if parent_matches(v, earlier.parent_values)]
            if overlap:
                node.fail(f"conditions disjoint from the earlier `{cond.parameter.parameter_id}` "
                          f"under `{parent.parameter_id}`",
                          got=f"both on {', '.join(_num(v) for v in overlap)}")


def with_conditionals(parent: ParameterSpec,
                      conds: list[tuple[Node, ConditionalParameterSpec]]) -> ParameterSpec:
    check_siblings(parent, conds)
    return replace(parent, conditionals=tuple(c for _, c in conds))


def check_depth(node: Node, depth: int) -> None:
    if depth > MAX_NESTING:
        node.fail(f"conditional parameters nested at most {MAX_NESTING} levels deep",
                  got=f"level {depth}")


def check_study(study: StudySpec, registry: IdRegistry, *, parameters: Node,
                algorithm: Node | None, stopping: Node | None) -> StudySpec:
    """Rules across the whole study: one parameter at least, grid types, stopping's parameter."""
    if not study.parameters:
        parameters.fail("at least one parameter")
    if study.algorithm is Algorithm.GRID_SEARCH:
        for p in study.all_parameters():
            if p.type not in _GRID_TYPES:
                where = Node(None, registry.paths.get(id(p), parameters.path), parameters.source)
                where.fail("only INTEGER, CATEGORICAL or DISCRETE parameters with GRID_SEARCH "
                           f"(at {algorithm.path if algorithm else 'algorithm'})",
                           got=f"DOUBLE parameter `{p.parameter_id}`")
    spec = study.stopping
    if spec is not None and stopping is not None:
        name = spec.learning_rate_parameter_name
        ids = [p.parameter_id for p in study.all_parameters()]
        if name and name not in ids:
            stopping.fail(f"learningRateParameterName naming a parameter ({', '.join(ids)})",
                          got=f"`{name}`")
        if spec.min_step_count is not None and spec.max_step_count is not None \
                and spec.max_step_count and spec.min_step_count > spec.max_step_count:
            stopping.fail(f"minStepCount ≤ maxStepCount ({spec.max_step_count})",
                          got=str(spec.min_step_count))
    return study


def stopping(kind: StoppingKind, *, use_elapsed_duration: Node | None = None,
             max_step_count: Node | None = None, min_step_count: Node | None = None,
             min_measurement_count: Node | None = None,
             learning_rate_parameter_name: Node | None = None,
             update_all_stopped_trials: Node | None = None) -> StoppingSpec:
    def count(node: Node | None) -> int | None:
        # proto3: 0 is unset (Vertex then learns maxStepCount, uses max/10 and 5)
        return None if node is None or node.missing else node.integer(lo=0) or None

    lr = learning_rate_parameter_name
    lr_name = None if lr is None or lr.missing else lr.string(allow_empty=True) or None
    upd = update_all_stopped_trials
    return StoppingSpec(
        kind=kind,
        use_elapsed_duration=bool(use_elapsed_duration and use_elapsed_duration.boolean()),
        max_step_count=count(max_step_count), min_step_count=count(min_step_count),
        min_measurement_count=count(min_measurement_count),
        learning_rate_parameter_name=lr_name,
        update_all_stopped_trials=None if upd is None or upd.missing else upd.boolean(),
    )


def counts(max_trials: Node | None, parallel: Node | None, max_failed: Node | None, *,
           zero_is_unset: bool = True) -> tuple[int, int, int]:
    """maxTrialCount, parallelTrialCount ≥ 1, 0 ≤ maxFailedTrialCount ≤ maxTrialCount.

    An absent trial count is 1. In the proto forms (``zero_is_unset``) so is 0: proto3 cannot
    tell the two apart, and gcloud sets 1 for both (``if not job_spec.maxTrialCount``).
    """
    n_max, n_par = _trial_count(max_trials, zero_is_unset), _trial_count(parallel, zero_is_unset)
    n_fail = 0 if max_failed is None else max_failed.integer(lo=0, hi=INT32_MAX)
    if max_failed is not None and n_fail > n_max:
        max_failed.fail(f"a maxFailedTrialCount ≤ maxTrialCount ({n_max})")
    return n_max, n_par, n_fail


def _trial_count(node: Node | None, zero_is_unset: bool) -> int:
    if node is None or node.value is None:
        return 1
    if not zero_is_unset:
        return node.integer(lo=1, hi=INT32_MAX)
    value = node.integer(hi=INT32_MAX)
    if value < 0:
        node.fail("an integer ≥ 1 (0 or no value: 1, as gcloud sets it)")
    return value or 1


def replica_count(node: Node | None) -> int:
    """A worker pool's ``replicaCount``: 1..MAX_REPLICA_COUNT; absent or 0 (one value in proto3)
    is 1, the primary replica Vertex's docs tell you to give pool 0 and gcloud's default."""
    if node is None or node.value is None:
        return 1
    value = node.integer(hi=MAX_REPLICA_COUNT)
    if value < 0:
        node.fail(f"a replica count of 1 to {MAX_REPLICA_COUNT} (0 or no value: 1)")
    return value or 1


def env_var(name: Node, value: Node) -> EnvVar:
    text = name.string(what="an environment variable name")
    if not _C_IDENTIFIER.match(text):
        name.fail("a C identifier ([A-Za-z_][A-Za-z0-9_]*) as the variable name")
    return EnvVar(name=text, value=value.string(allow_empty=True))


def env_list(env: list[EnvVar], node: Node) -> tuple[EnvVar, ...]:
    if len(env) > MAX_ENV_VARS:
        node.fail(f"at most {MAX_ENV_VARS} environment variables", got=str(len(env)))
    return tuple(env)


def labels(node: Node) -> tuple[tuple[str, str], ...]:
    """Label keys and values: ≤ 64 lowercase letters, digits, ``_``, ``-`` (keys start with a letter)."""
    out = []
    for key, value in node.items():
        if not _LABEL_KEY.match(key):
            value.fail("a label key of 1-64 lowercase letters, digits, '_' or '-' starting with "
                       "a letter", got=repr(key))
        text = value.string(what="a label value", allow_empty=True)
        if not _LABEL_VALUE.match(text):
            value.fail("a label value of at most 64 lowercase letters, digits, '_' or '-'")
        out.append((key, text))
    return tuple(sorted(out))


def display_name(node: Node) -> str:
    text = node.string(what="a display name")
    if len(text) > MAX_DISPLAY_NAME:
        node.fail(f"a display name of at most {MAX_DISPLAY_NAME} characters",
                  got=f"{len(text)} characters")
    return text


def local_options(node: Node, keys: dict[str, str]) -> LocalOptions:
    """``trialsLocal``/``local``: keys maps field -> the form's key name."""
    fields = node.mapping(set(keys.values()))
    by_field = {f: fields.get(k) for f, k in keys.items()}
    inject = by_field["inject_restarts"]
    rate = 0.0 if inject is None else inject.number()
    if inject is not None and not 0.0 <= rate <= 1.0:
        inject.fail("a rate of injected restarts per trial-second between 0 and 1")
    grace = by_field["grace_period_s"]
    memory = by_field["memory_limit_mb"]
    return LocalOptions(
        inject_restarts=rate,
        grace_period_s=None if grace is None else grace.duration_s(numbers_ok=True),
        memory_limit_mb=None if memory is None else memory.integer(lo=1, hi=INT32_MAX),
    )


def _num(value: object) -> str:
    from trials.protocol import format_value

    if isinstance(value, float) and not math.isfinite(value):
        return repr(value)
    return format_value(value)
