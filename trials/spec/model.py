"""The job model: immutable value objects for a HyperparameterTuningJob (stdlib only).

Every input form (gcloud YAML, REST JSON, legacy ``hptuning_config.yaml``, short search space) is
parsed into these objects by ``trials.spec.load``; ``trials.spec.export`` writes them back.
Construction validates the invariants that do not depend on where the data came from; the loader
adds file/path context to the messages.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TypeAlias

Value: TypeAlias = float | int | str


class Goal(str, enum.Enum):
    GOAL_TYPE_UNSPECIFIED = "GOAL_TYPE_UNSPECIFIED"  # treated as MAXIMIZE
    MAXIMIZE = "MAXIMIZE"
    MINIMIZE = "MINIMIZE"


class ParameterType(str, enum.Enum):
    DOUBLE = "DOUBLE"
    INTEGER = "INTEGER"
    CATEGORICAL = "CATEGORICAL"
    DISCRETE = "DISCRETE"


class ScaleType(str, enum.Enum):
    SCALE_TYPE_UNSPECIFIED = "SCALE_TYPE_UNSPECIFIED"
    UNIT_LINEAR_SCALE = "UNIT_LINEAR_SCALE"
    UNIT_LOG_SCALE = "UNIT_LOG_SCALE"
    UNIT_REVERSE_LOG_SCALE = "UNIT_REVERSE_LOG_SCALE"


class Algorithm(str, enum.Enum):
    ALGORITHM_UNSPECIFIED = "ALGORITHM_UNSPECIFIED"
    GRID_SEARCH = "GRID_SEARCH"
    RANDOM_SEARCH = "RANDOM_SEARCH"


class MeasurementSelection(str, enum.Enum):
    MEASUREMENT_SELECTION_TYPE_UNSPECIFIED = "MEASUREMENT_SELECTION_TYPE_UNSPECIFIED"  # = LAST
    LAST_MEASUREMENT = "LAST_MEASUREMENT"
    BEST_MEASUREMENT = "BEST_MEASUREMENT"


class StoppingKind(str, enum.Enum):
    MEDIAN = "medianAutomatedStoppingSpec"
    DECAY_CURVE = "decayCurveStoppingSpec"
    CONVEX = "convexAutomatedStoppingSpec"


_FROZEN = dict(frozen=True, slots=True, kw_only=True)
MAX_DISCRETE_VALUES = 1000
DISCRETE_MIN_GAP = 1e-10


@dataclass(**_FROZEN)
class MetricSpec:
    """A metric. ``safety_config`` (the ``safetyConfig`` JSON as given) marks a safety metric:
    reported and exported, never optimised."""

    metric_id: str
    goal: Goal = Goal.GOAL_TYPE_UNSPECIFIED
    safety_config: str | None = None

    @property
    def maximize(self) -> bool:
        """Unset goal means maximize (the API's rule)."""
        return self.goal != Goal.MINIMIZE


@dataclass(**_FROZEN)
class ConditionalParameterSpec:
    """A child parameter that exists in a trial only when its parent takes one of ``parent_values``."""

    parent_values: tuple[Value, ...]
    parameter: ParameterSpec


@dataclass(**_FROZEN)
class ParameterSpec:
    """One hyperparameter. ``min_value``/``max_value`` for DOUBLE/INTEGER, ``values`` otherwise."""

    parameter_id: str
    type: ParameterType
    min_value: float | int | None = None
    max_value: float | int | None = None
    values: tuple[Value, ...] = ()
    scale_type: ScaleType = ScaleType.SCALE_TYPE_UNSPECIFIED
    conditionals: tuple[ConditionalParameterSpec, ...] = ()

    def bounds(self) -> tuple[float | int, float | int]:
        """``(min_value, max_value)`` of a DOUBLE or INTEGER parameter (ValueError for the others)."""
        if self.min_value is None or self.max_value is None:
            raise ValueError(f"{self.type.value} parameter {self.parameter_id!r} has no range")
        return self.min_value, self.max_value

    def contains(self, value: object) -> bool:
        """True when ``value`` is a feasible value of this parameter."""
        if self.type is ParameterType.CATEGORICAL:
            return isinstance(value, str) and value in self.values
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return False
        if self.type is ParameterType.DISCRETE:
            return any(abs(float(value) - float(v)) <= DISCRETE_MIN_GAP for v in self.values)
        if self.type is ParameterType.INTEGER and float(value) != int(value):
            return False
        low, high = self.bounds()
        return low <= value <= high

    def describe_range(self) -> str:
        """Human text for the feasible set: ``[0.0001, 0.1] (log)`` or ``{adam, sgd}``."""
        if self.type in (ParameterType.CATEGORICAL, ParameterType.DISCRETE):
            from trials.protocol import format_value

            return "{" + ", ".join(format_value(v) for v in self.values) + "}"
        scale = {
            ScaleType.UNIT_LOG_SCALE: " (log)",
            ScaleType.UNIT_REVERSE_LOG_SCALE: " (reverse log)",
        }.get(self.scale_type, "")
        from trials.protocol import format_value

        return f"[{format_value(self.min_value)}, {format_value(self.max_value)}]{scale}"

    def grid_points(self) -> Sequence[Value]:
        """The values a grid search visits (INTEGER: every integer in range, as a lazy ``range``)."""
        if self.type is ParameterType.INTEGER:
            low, high = self.bounds()
            return range(int(low), int(high) + 1)
        if self.type is ParameterType.DOUBLE:
            raise ValueError(f"DOUBLE parameter {self.parameter_id!r} has no grid")
        return self.values

    def walk(self) -> list[ParameterSpec]:
        """This parameter and every nested conditional parameter, depth first."""
        out = [self]
        for cond in self.conditionals:
            out.extend(cond.parameter.walk())
        return out


@dataclass(**_FROZEN)
class StoppingSpec:
    """One of the three automated stopping specs (``kind`` names the REST oneof field)."""

    kind: StoppingKind
    use_elapsed_duration: bool = False
    # convexAutomatedStoppingSpec only
    max_step_count: int | None = None
    min_step_count: int | None = None
    min_measurement_count: int | None = None
    learning_rate_parameter_name: str | None = None
    update_all_stopped_trials: bool | None = None


@dataclass(**_FROZEN)
class StudySpec:
    metrics: tuple[MetricSpec, ...]
    parameters: tuple[ParameterSpec, ...]
    algorithm: Algorithm = Algorithm.ALGORITHM_UNSPECIFIED
    measurement_selection: MeasurementSelection = (
        MeasurementSelection.MEASUREMENT_SELECTION_TYPE_UNSPECIFIED
    )
    stopping: StoppingSpec | None = None
    # Safety metrics (``safetyConfig``): reported, never objectives. ``safety_positions`` are their
    # indexes in the spec's ``metrics`` list, so export writes the list in its original order.
    safety_metrics: tuple[MetricSpec, ...] = ()
    safety_positions: tuple[int, ...] = ()

    def all_parameters(self) -> list[ParameterSpec]:
        """Every parameter, conditional ones included, in StudySpec (depth-first) order."""
        out: list[ParameterSpec] = []
        for p in self.parameters:
            out.extend(p.walk())
        return out

    def parameter(self, parameter_id: str) -> ParameterSpec:
        for p in self.all_parameters():
            if p.parameter_id == parameter_id:
                return p
        raise KeyError(parameter_id)

    @property
    def metric_ids(self) -> tuple[str, ...]:
        """The objective metrics' ids (safety metrics excluded)."""
        return tuple(m.metric_id for m in self.metrics)

    @property
    def reported_metric_ids(self) -> tuple[str, ...]:
        """Every metric a trial's measurements record: the objectives, then the safety metrics."""
        return self.metric_ids + tuple(m.metric_id for m in self.safety_metrics)

    def spec_metrics(self) -> list[MetricSpec]:
        """The spec's ``metrics`` list in its original order (objectives and safety metrics)."""
        objectives, safety = iter(self.metrics), iter(self.safety_metrics)
        n = len(self.metrics) + len(self.safety_metrics)
        return [next(safety) if i in self.safety_positions else next(objectives)
                for i in range(n)]

    @property
    def selects_best(self) -> bool:
        """Unset selection means LAST (the API's rule; the Python SDK sends BEST explicitly)."""
        return self.measurement_selection is MeasurementSelection.BEST_MEASUREMENT

    def active_parameters(self, values: Mapping[str, Value]) -> list[ParameterSpec]:
        """The parameters present in a trial with ``values``: conditionals only under a matching parent."""
        out: list[ParameterSpec] = []

        def visit(p: ParameterSpec) -> None:
            out.append(p)
            if p.parameter_id not in values:
                return
            for cond in p.conditionals:
                if parent_matches(values[p.parameter_id], cond.parent_values):
                    visit(cond.parameter)

        for p in self.parameters:
            visit(p)
        return out

    def choose(self, pick: Callable[[ParameterSpec], Value]) -> dict[str, Value]:
        """One trial's values, parents before their children: ``pick`` gives each visited parameter's
        value, and a conditional child is visited only when its parent's value selects it."""
        values: dict[str, Value] = {}

        def visit(p: ParameterSpec) -> None:
            value = values[p.parameter_id] = pick(p)
            for cond in p.conditionals:
                if parent_matches(value, cond.parent_values):
                    visit(cond.parameter)

        for p in self.parameters:
            visit(p)
        return values


def parent_matches(value: Value, parent_values: Sequence[Value]) -> bool:
    """Whether a parent taking ``value`` selects a conditional child with these ``parent_values``.

    Categories match exactly; numbers (DISCRETE, INTEGER parents) match within ``DISCRETE_MIN_GAP``.
    """
    if isinstance(value, str):
        return value in parent_values
    return any(
        not isinstance(v, str) and abs(float(value) - float(v)) <= DISCRETE_MIN_GAP
        for v in parent_values
    )


@dataclass(**_FROZEN)
class EnvVar:
    name: str
    value: str


@dataclass(**_FROZEN)
class MachineSpec:
    machine_type: str | None = None
    accelerator_type: str | None = None
    accelerator_count: int = 0


@dataclass(**_FROZEN)
class ContainerSpec:
    image_uri: str
    command: tuple[str, ...] = ()
    args: tuple[str, ...] = ()
    env: tuple[EnvVar, ...] = ()


@dataclass(**_FROZEN)
class PythonPackageSpec:
    executor_image_uri: str
    python_module: str
    package_uris: tuple[str, ...] = ()
    args: tuple[str, ...] = ()
    env: tuple[EnvVar, ...] = ()


@dataclass(**_FROZEN)
class WorkerPoolSpec:
    """One worker pool. Exactly one of ``container`` / ``python_package``."""

    machine_spec: MachineSpec = field(default_factory=MachineSpec)
    replica_count: int = 1
    container: ContainerSpec | None = None
    python_package: PythonPackageSpec | None = None
    disk_spec: tuple[tuple[str, object], ...] = ()  # passed through on export

    @property
    def args(self) -> tuple[str, ...]:
        task = self.container or self.python_package
        return task.args if task else ()

    @property
    def env(self) -> tuple[EnvVar, ...]:
        task = self.container or self.python_package
        return task.env if task else ()


@dataclass(**_FROZEN)
class Scheduling:
    timeout_s: float | None = None  # per trial; Vertex's default is 7 days
    restart_job_on_worker_restart: bool = False


@dataclass(**_FROZEN)
class TrialJobSpec:
    """The CustomJobSpec run for every trial. ``None`` entries are skipped (``{}``) pools."""

    worker_pools: tuple[WorkerPoolSpec | None, ...]
    base_output_directory: str | None = None
    scheduling: Scheduling = field(default_factory=Scheduling)

    def replicas(self) -> list[tuple[int, int, WorkerPoolSpec]]:
        """(pool index, replica index, pool) for every replica, primary first."""
        out = []
        for i, pool in enumerate(self.worker_pools):
            if pool is None:
                continue
            for j in range(pool.replica_count):
                out.append((i, j, pool))
        return out


@dataclass(**_FROZEN)
class LocalOptions:
    """Options only the local controller reads (``trialsLocal:`` in a spec; dropped on export)."""

    inject_restarts: float = 0.0
    grace_period_s: float | None = None
    memory_limit_mb: int | None = None
    # A CustomJob (``trials serve``'s customJobs): one trial of no parameters whose success is its
    # replicas' exit, not a metric (see ``vertex.custom_job``).
    custom_job: bool = False


@dataclass(**_FROZEN)
class JobSpec:
    """A whole HyperparameterTuningJob.

    Example:
        >>> from trials.spec.load import load_spec
        >>> job = load_spec("search_spaces/mlp.yaml")  # doctest: +SKIP
        >>> job.study.metric_ids  # doctest: +SKIP
        ('accuracy',)
    """

    study: StudySpec
    display_name: str | None = None
    max_trial_count: int = 1
    parallel_trial_count: int = 1
    max_failed_trial_count: int = 0
    trial_job: TrialJobSpec | None = None
    labels: tuple[tuple[str, str], ...] = ()
    local: LocalOptions = field(default_factory=LocalOptions)
    # Vertex fields kept for export but not emulated: (REST path, JSON text), sorted by path.
    carried: tuple[tuple[str, str], ...] = ()
    # Fields of the input form that have no Vertex field (legacy only): listed by validate.
    dropped: tuple[str, ...] = field(default=(), compare=False)


LOCAL_IMAGE_URI = "local"  # the image of a trial that runs a local command, not a container
