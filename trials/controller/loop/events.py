"""What the job loop tells its listener: one small frozen dataclass per event.

The loop emits these through an injected ``Emit`` callable (``trials sweep`` prints them with
:class:`trials.cli.progress.Progress`; ``trials.tune`` listens for :class:`TrialDone`; tests collect
them). Each event's :meth:`~Event.fields` are its JSON form: ``--json-logs`` writes one object per
event, ``{"severity", "message", "event": <name>, "timestampSeconds", **fields}``. That form is a
public format; its schema is in ``docs/DESIGN.md`` ("The loop's events") and a test checks that
every event here is described there.

Modelled on honcho's ``printer.Message`` and syne-tune's ``trial_status``.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import ClassVar

from trials.records import JobState, StopReason, TrialState

JsonValue = str | int | float | bool | None | list["JsonValue"] | dict[str, "JsonValue"]
Params = Mapping[str, str | int | float]

# The version of the events' JSON form (``--json-logs``: each line's ``schema``): raised when a field changes
# meaning or goes away; a field that is added does not raise it (readers ignore what they do not know).
SCHEMA_VERSION = 1


@dataclass(frozen=True, slots=True, kw_only=True)
class Event:
    """The base of every event: ``name`` is its ``event`` field in the JSON lines."""

    name: ClassVar[str] = ""

    def fields(self) -> dict[str, JsonValue]:
        """The event's JSON fields (enums as their values, tuples as lists)."""
        values: dict[str, object] = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        return {key: _json(value) for key, value in values.items()}


def _json(value: object) -> JsonValue:
    if isinstance(value, (JobState, TrialState, StopReason)):
        return str(value.value)
    if isinstance(value, (list, tuple)):
        return [_json(v) for v in value]
    if isinstance(value, Mapping):
        return {str(k): _json(v) for k, v in value.items()}
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    return str(value)  # anything else (a path, a number type of numpy) as its text


Emit = Callable[[Event], None]


def ignore(event: Event) -> None:
    """The listener that listens to nothing."""


# ---------------------------------------------------------------------------------------- the job
@dataclass(frozen=True, slots=True, kw_only=True)
class JobRunning(Event):
    """The job is RUNNING with this controller (or worker)."""

    name: ClassVar[str] = "job_running"


@dataclass(frozen=True, slots=True, kw_only=True)
class JobCancelling(Event):
    """A cancel was seen (a stop signal, ``trials cancel``): every replica is being stopped."""

    name: ClassVar[str] = "job_cancelling"


@dataclass(frozen=True, slots=True, kw_only=True)
class JobLeft(Event):
    """A joined worker left the job (its trials went back to the queue); the job goes on."""

    name: ClassVar[str] = "job_left"


@dataclass(frozen=True, slots=True, kw_only=True)
class JobDone(Event):
    """The job's end state was written."""

    name: ClassVar[str] = "job_done"
    state: JobState
    error: Mapping[str, JsonValue] | None = None  # Vertex's ``error``: {"code", "message"}


@dataclass(frozen=True, slots=True, kw_only=True)
class TrialsAdded(Event):
    """``trials resume --max-trial-count`` added trials while the job ran: they run here too."""

    name: ClassVar[str] = "trials_added"
    waiting: int
    total: int


# ------------------------------------------------------------------------------------- its trials
@dataclass(frozen=True, slots=True, kw_only=True)
class TrialStarted(Event):
    name: ClassVar[str] = "trial_started"
    trial_id: str
    params: Params
    resumed: bool = False  # run again after a controller or worker stopped


@dataclass(frozen=True, slots=True, kw_only=True)
class TrialStopping(Event):
    """ACTIVE -> STOPPING: its replicas were told to stop (SIGTERM, then the grace period)."""

    name: ClassVar[str] = "trial_stopping"
    trial_id: str
    reason: StopReason
    detail: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class TrialRequeued(Event):
    """The trial went back to the queue (not its fault: a cancel, a worker leaving, a lost lease)."""

    name: ClassVar[str] = "trial_requeued"
    trial_id: str
    lost: bool = False  # another worker took it over and records it


@dataclass(frozen=True, slots=True, kw_only=True)
class TrialDone(Event):
    """The trial ended and its outcome is recorded."""

    name: ClassVar[str] = "trial_done"
    trial_id: str
    state: TrialState  # SUCCEEDED or INFEASIBLE
    reason: str | None  # why it is INFEASIBLE (Vertex's infeasibleReason)
    values: tuple[float, ...]  # the final measurement's value of each spec metric, in spec order
    stopped_early: bool
    steps: int  # how many steps its measurements hold
    seconds: float  # its length, from its start to its last replica's exit
    params: Params
    detail: tuple[str, ...] = ()  # the exception and the traceback's tail of a failure
    last_step: int | None = None  # the last step it reported (not predicted)
    final_step: int | None = None  # its final measurement's step (the spec's selection: the last, or the best)
    missing_metric: bool = False  # it ended without the spec's objective metric
    reported_tags: tuple[str, ...] = ()
    metrics_source: str | None = None  # where its metrics were read: "metrics.jsonl" or "hypertune"
    # told to stop early, it reached the last step completed trials reached: recorded as finished
    ran_to_end: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class TrialProgress(Event):
    """A running trial's latest step: when it reported new steps, and at least every few seconds."""

    name: ClassVar[str] = "trial_progress"
    trial_id: str
    step: int | None  # its last step so far (None: none reported yet)
    metrics: Mapping[str, float]  # the spec metrics that step reported
    seconds: float  # since it started here
    other: Mapping[str, tuple[int, float]] = field(default_factory=dict)  # tags not in the spec: last (step, value)


@dataclass(frozen=True, slots=True, kw_only=True)
class ReplicaRestart(Event):
    name: ClassVar[str] = "replica_restart"
    trial_id: str
    replica: str
    why: str  # the exit and the retry budget it uses
    restarts: int  # restarts of this replica so far


@dataclass(frozen=True, slots=True, kw_only=True)
class InjectedRestart(Event):
    """Chaos mode: a maintenance restart (SIGTERM) was injected."""

    name: ClassVar[str] = "injected_restart"
    trial_id: str
    replica: str


# ----------------------------------------------------------------------------------------- words
@dataclass(frozen=True, slots=True, kw_only=True)
class JobNote(Event):
    """Something worth knowing that needs nothing done."""

    name: ClassVar[str] = "note"
    message: str
    trial_id: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class JobWarning(Event):
    """Something the user should look at (printed even with ``--quiet``)."""

    name: ClassVar[str] = "warning"
    message: str
    trial_id: str | None = None


ALL_EVENTS: tuple[type[Event], ...] = (
    JobRunning, JobCancelling, JobLeft, JobDone, TrialsAdded, TrialStarted, TrialStopping, TrialRequeued,
    TrialDone, TrialProgress, ReplicaRestart, InjectedRestart, JobNote, JobWarning)


class HeldEvents:
    """An ``Emit`` that can hold its events for a block and pass them on, in order, at its end."""

    def __init__(self, emit: Emit):
        self._emit = emit
        self._held: list[Event] | None = None

    def __call__(self, event: Event) -> None:
        if self._held is not None:
            self._held.append(event)
        else:
            self._emit(event)

    @contextlib.contextmanager
    def held(self) -> Iterator[None]:
        """Events emitted inside reach the listener after the block (also when it raises)."""
        if self._held is not None:  # nested: the outer block passes them on
            yield
            return
        self._held = []
        try:
            yield
        finally:
            held, self._held = self._held, None
            for event in held:
                self._emit(event)
