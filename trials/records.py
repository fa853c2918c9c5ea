"""Measurements and the lossless ``metrics.jsonl`` log: its emitter and its parser in one place.

One line per ``report`` call::

    {"step": 3, "timestamp": 1796013114.31, "metrics": {"accuracy": 0.91, "loss": 0.3}, "attempt": 0}

The runtime appends lines (one ``write`` of a whole line, then flush); the controller parses them,
skipping a torn last line. Values are JSON numbers (NaN/inf as the strings "nan"/"inf"/"-inf").
"""

from __future__ import annotations

import enum
import json
import math

TYPE_CHECKING = False
if TYPE_CHECKING:  # pragma: no cover - typing costs ~2 ms on the trial start path
    from collections.abc import Iterable, Mapping
    from typing import Any


class Measurement:
    """One reported step: what Vertex calls a Measurement (stepCount, elapsedDuration, metrics).

    A plain immutable slotted class rather than a dataclass: this module is on every trial's
    start path and ``import dataclasses`` costs ~10 ms there.
    """

    __slots__ = ("step", "metrics", "timestamp", "elapsed_s", "attempt")
    step: int
    metrics: Mapping[str, float]
    timestamp: float | None  # wall clock (time.time()) of the report
    elapsed_s: float | None  # seconds since the trial started
    attempt: int

    def __init__(self, *, step: int, metrics: Mapping[str, float], timestamp: float | None = None,
                 elapsed_s: float | None = None, attempt: int = 0):
        object.__setattr__(self, "step", step)
        object.__setattr__(self, "metrics", metrics)
        object.__setattr__(self, "timestamp", timestamp)
        object.__setattr__(self, "elapsed_s", elapsed_s)
        object.__setattr__(self, "attempt", attempt)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"Measurement is immutable: cannot set {name!r}")

    def _key(self) -> tuple[int, dict[str, float], float | None, float | None, int]:
        return (self.step, dict(self.metrics), self.timestamp, self.elapsed_s, self.attempt)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Measurement) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash((self.step, tuple(sorted(self.metrics.items())), self.timestamp))

    def __repr__(self) -> str:
        return (f"Measurement(step={self.step!r}, metrics={dict(self.metrics)!r}, "
                f"timestamp={self.timestamp!r}, elapsed_s={self.elapsed_s!r}, attempt={self.attempt!r})")

    def with_elapsed(self, start_time: float) -> Measurement:
        if self.timestamp is None:
            return self
        return Measurement(
            step=self.step, metrics=self.metrics, timestamp=self.timestamp,
            elapsed_s=max(0.0, self.timestamp - start_time), attempt=self.attempt,
        )


def _encode_value(value: float) -> float | str:
    if isinstance(value, float) and not math.isfinite(value):
        return repr(value)  # 'nan', 'inf', '-inf'
    return value


def _decode_value(value: object) -> float:
    if isinstance(value, bool):
        raise ValueError("a metric value may not be a boolean")
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        return float(value)
    raise ValueError(f"expected a number, got {value!r}")


def format_record(step: int, metrics: Mapping[str, float], timestamp: float, attempt: int = 0) -> str:
    """One ``metrics.jsonl`` line, newline included."""
    record = {
        "step": int(step),
        "timestamp": timestamp,
        "metrics": {k: _encode_value(float(v)) for k, v in metrics.items()},
        "attempt": attempt,
    }
    return json.dumps(record, sort_keys=True, allow_nan=False) + "\n"


def parse_record(line: str) -> Measurement | None:
    """Parse one line; ``None`` for a blank, torn or foreign line (never raises)."""
    line = line.strip()
    if not line:
        return None
    try:
        record = json.loads(line)
        if not isinstance(record, dict) or not isinstance(record.get("metrics"), dict):
            return None
        step = record["step"]
        if isinstance(step, bool) or not isinstance(step, int) or step < 0:
            return None
        metrics = {str(k): _decode_value(v) for k, v in record["metrics"].items()}
        timestamp = record.get("timestamp")
        if timestamp is not None and not isinstance(timestamp, (int, float)):
            timestamp = None
        attempt = record.get("attempt", 0)
        attempt = attempt if isinstance(attempt, int) and not isinstance(attempt, bool) else 0
    except (ValueError, KeyError, TypeError, RecursionError):
        return None
    return Measurement(step=step, metrics=metrics, timestamp=timestamp, attempt=attempt)


def parse_records(text: str) -> list[Measurement]:
    """Every complete record in a ``metrics.jsonl`` text, in file order."""
    out = []
    for line in text.splitlines():
        m = parse_record(line)
        if m is not None:
            out.append(m)
    return out


Key = tuple[int, int]  # (step, occurrence): the k-th report of a step within one attempt


class MeasurementLog:
    """Measurements of one trial merged across reads and restarts, keyed by (step, occurrence).

    Reports of different metrics at one step form one measurement; a metric reported again at
    the same step in the same attempt (reports without ``global_step`` all say step 0) starts a
    new measurement, kept in report order, as the hypertune file keeps them. A restarted replica
    (a later attempt) that re-reports a step replaces that step's values only for the metrics it
    carries; ``conflicts`` counts values reported twice with a different value, for the
    consistency check of chaos mode; ``repeats`` counts reports that repeated a step.
    """

    __slots__ = ("by_key", "conflicts", "repeats", "_seen")

    def __init__(self) -> None:
        self.by_key: dict[Key, Measurement] = {}
        self.conflicts = 0
        self.repeats = 0
        self._seen: dict[tuple[int, int, str], int] = {}  # (attempt, step, tag) -> reports so far

    @property
    def by_step(self) -> dict[int, Measurement]:
        """The first measurement of each step."""
        return {step: m for (step, k), m in self.by_key.items() if k == 0}

    def add(self, measurements: Iterable[Measurement]) -> list[Key]:
        """Take in reports (oldest first); returns the keys they were stored under."""
        keys = []
        for m in measurements:
            k = max((self._seen.get((m.attempt, m.step, tag), 0) for tag in m.metrics), default=0)
            for tag in m.metrics:
                self._seen[(m.attempt, m.step, tag)] = k + 1
            if k:
                self.repeats += 1
            key = (m.step, k)
            keys.append(key)
            old = self.by_key.get(key)
            if old is None:
                self.by_key[key] = m
                continue
            merged = dict(old.metrics)
            for name, v in m.metrics.items():
                if name in merged and not same_value(merged[name], v):
                    self.conflicts += 1
                merged[name] = v
            self.by_key[key] = Measurement(
                step=m.step, metrics=merged,
                timestamp=m.timestamp if m.timestamp is not None else old.timestamp,
                elapsed_s=m.elapsed_s if m.elapsed_s is not None else old.elapsed_s,
                attempt=max(m.attempt, old.attempt),
            )
        return keys

    def ordered(self) -> list[Measurement]:
        return [self.by_key[key] for key in sorted(self.by_key)]


def same_value(a: float, b: float) -> bool:
    """Two reports of one metric agree (NaN agrees with NaN; floats within 1e-12 relative)."""
    if math.isnan(a) and math.isnan(b):
        return True
    return a == b or math.isclose(a, b, rel_tol=1e-12, abs_tol=0.0)


def measurement_to_dict(m: Measurement) -> dict[str, Any]:
    """A measurement as the controller stores it in a trial's attributes (NaN/inf as strings)."""
    return {
        "step": m.step,
        "elapsed_s": m.elapsed_s,
        "metrics": {k: (v if math.isfinite(v) else repr(v)) for k, v in m.metrics.items()},
    }


def measurement_from_dict(d: Mapping[str, Any]) -> Measurement:
    return Measurement(step=int(d["step"]), elapsed_s=d.get("elapsed_s"),
                       metrics={k: float(v) for k, v in d["metrics"].items()})


LIVE_ELAPSED_ATTR = "live_elapsed_s"  # a running trial's attribute: step -> elapsed seconds
LIVE_METRICS_ATTR = "live_metrics"  # step -> the metrics its intermediate value does not hold
# Both are kept in chunks of LIVE_CHUNK_STEPS steps (in the order the steps were first stored), one
# attribute each (``live_elapsed_s.0``, ``live_elapsed_s.1``, ...): a metrics poll writes only the
# chunks it changed. One attribute holding every step, written again at each poll, made the journal
# grow with the square of a trial's steps (400 steps of two metrics: 0.7 MB for one trial; 4,000:
# ~70 MB). An unchunked attribute (an older journal) is read too, its chunks' entries winning.
LIVE_CHUNK_STEPS = 64


def live_attr(attrs: Mapping[str, Any], name: str) -> dict[str, Any]:
    """A live attribute (``LIVE_ELAPSED_ATTR`` or ``LIVE_METRICS_ATTR``) whole: its unchunked form
    and its chunks merged, later chunks winning (pure; anything not a dict is ignored)."""
    out: dict[str, Any] = {}
    whole = attrs.get(name)
    if isinstance(whole, dict):
        out.update(whole)
    for _, chunk in live_chunks(attrs, name):
        out.update(chunk)
    return out


def live_chunks(attrs: Mapping[str, Any], name: str) -> list[tuple[int, dict[str, Any]]]:
    """The chunks of a live attribute, ``(index, {step: value})`` in index order."""
    prefix = name + "."
    found = []
    for key, value in attrs.items():
        if key.startswith(prefix) and key[len(prefix):].isdigit() and isinstance(value, dict):
            found.append((int(key[len(prefix):]), value))
    return sorted(found, key=lambda c: c[0])


def is_live_attr(key: str) -> bool:
    """Whether an attribute is a running trial's steps (a live attribute or one of its chunks)."""
    for name in (LIVE_ELAPSED_ATTR, LIVE_METRICS_ATTR):
        if key == name or (key.startswith(name + ".") and key[len(name) + 1:].isdigit()):
            return True
    return False


class LiveChunks:
    """Which chunk each stored step's live entries are in, and the chunks a poll changed (the
    controller's side of ``LIVE_CHUNK_STEPS``)."""

    def __init__(self) -> None:
        self.chunk_of: dict[str, int] = {}
        self.steps_in: dict[int, list[str]] = {}
        self.current = 0
        self.dirty: set[int] = set()

    @classmethod
    def from_attrs(cls, attrs: Mapping[str, Any]) -> LiveChunks:
        """The chunks a trial's stored attributes hold (a resumed run goes on after the last one;
        steps only in an unchunked attribute get a chunk when they are written again)."""
        out = cls()
        for name in (LIVE_ELAPSED_ATTR, LIVE_METRICS_ATTR):
            for index, chunk in live_chunks(attrs, name):
                for step in chunk:
                    if str(step) not in out.chunk_of:
                        out.chunk_of[str(step)] = index
                        out.steps_in.setdefault(index, []).append(str(step))
        if out.steps_in:
            out.current = max(out.steps_in)
        return out

    def touch(self, step: str) -> None:
        """A step's live entries changed: its chunk is written at the end of this poll."""
        index = self.chunk_of.get(step)
        if index is None:
            if len(self.steps_in.get(self.current, ())) >= LIVE_CHUNK_STEPS:
                self.current += 1
            index = self.chunk_of[step] = self.current
            self.steps_in.setdefault(index, []).append(step)
        self.dirty.add(index)

    def attrs(self, elapsed: Mapping[str, Any], metrics: Mapping[str, Any]) -> dict[str, Any]:
        """The changed chunks as attributes (each whole), and no chunk is dirty any more."""
        out: dict[str, Any] = {}
        for index in sorted(self.dirty):
            steps = self.steps_in[index]
            e = {s: elapsed[s] for s in steps if s in elapsed}
            m = {s: metrics[s] for s in steps if s in metrics}
            if e:
                out[f"{LIVE_ELAPSED_ATTR}.{index}"] = e
            if m:
                out[f"{LIVE_METRICS_ATTR}.{index}"] = m
        self.dirty.clear()
        return out


def live_metrics(metrics: Mapping[str, float], primary: str) -> dict[str, float | str]:
    """What a step's intermediate value (its finite primary metric) cannot hold: the other metrics
    and a non-finite primary, as they are stored in ``live_metrics`` (NaN/inf as strings)."""
    return {k: (v if math.isfinite(v) else repr(v)) for k, v in metrics.items()
            if k != primary or not math.isfinite(v)}


def stored_measurements(intermediate_values: Mapping[int, float], attrs: Mapping[str, Any],
                        primary: str) -> list[Measurement]:
    """A running (or requeued) trial's measurements as the storage holds them: the primary metric of
    each step in Optuna's intermediate values, the rest and the elapsed times in the trial's
    ``live_metrics`` and ``live_elapsed_s`` attributes; in step order (pure, never raises)."""
    elapsed = live_attr(attrs, LIVE_ELAPSED_ATTR)
    extra = live_attr(attrs, LIVE_METRICS_ATTR)
    by_step: dict[int, dict[str, float]] = {}
    for step, value in intermediate_values.items():
        by_step.setdefault(int(step), {})[primary] = float(value)
    for key, metrics in extra.items():
        if not isinstance(key, str) or not key.isdigit() or not isinstance(metrics, dict):
            continue
        for tag, value in metrics.items():
            try:
                by_step.setdefault(int(key), {})[str(tag)] = _decode_value(value)
            except ValueError:
                continue
    out = []
    for step in sorted(by_step):
        e = elapsed.get(str(step))
        out.append(Measurement(step=step, metrics=by_step[step],
                               elapsed_s=float(e) if isinstance(e, (int, float)) and not isinstance(e, bool)
                               else None))
    return out


# --- States and reasons recorded for a job and its trials -------------------------------------------
class _StrValued(str, enum.Enum):
    """A string-valued enum that prints and formats as its value (3.11's StrEnum, on 3.10 too).

    Members only ever get added: stored records and other tools compare against the strings.
    """

    def __str__(self) -> str:
        return str(self.value)

    def __format__(self, format_spec: str) -> str:
        return format(str(self.value), format_spec)


class JobState(_StrValued):
    """Vertex's ``JobState`` of a HyperparameterTuningJob."""

    QUEUED = "JOB_STATE_QUEUED"
    PENDING = "JOB_STATE_PENDING"
    RUNNING = "JOB_STATE_RUNNING"
    SUCCEEDED = "JOB_STATE_SUCCEEDED"
    FAILED = "JOB_STATE_FAILED"
    CANCELLING = "JOB_STATE_CANCELLING"
    CANCELLED = "JOB_STATE_CANCELLED"


FINAL_JOB_STATES = (JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED)


class TrialState(_StrValued):
    """Vertex's ``Trial.State`` (the ``state`` attribute of a trial in the storage)."""

    REQUESTED = "REQUESTED"
    ACTIVE = "ACTIVE"
    STOPPING = "STOPPING"
    SUCCEEDED = "SUCCEEDED"
    INFEASIBLE = "INFEASIBLE"


class StopReason(_StrValued):
    """Why the job loop stops a running trial."""

    SUCCESS = "success"  # the primary replica exited 0: the others are stopped
    EARLY = "early"  # the early-stopping rule
    TIMEOUT = "timeout"  # trialJobSpec.scheduling.timeout
    FAILED = "failed"  # a permanent failure (exit 1, OOM, restart budget, could not start)
    CANCEL = "cancel"  # the job is cancelled: the trial goes back to the queue
    JOB_END = "job_end"  # the job failed (too many failed trials): the trial ends with it, INFEASIBLE
    LEAVE = "leave"  # a `trials worker` leaves the job: the trial goes back to the queue
    LOST = "lost"  # another worker took the trial over: this worker records nothing more

    @property
    def requeues(self) -> bool:
        """Whether a trial stopped for this reason is not at fault and runs again later."""
        return self in (StopReason.CANCEL, StopReason.LEAVE)
