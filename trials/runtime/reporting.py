"""Report one step's metrics: through the real cloudml-hypertune, to metrics.jsonl, to TensorBoard.

The hypertune library is the contract with Vertex AI; ``metrics.jsonl`` (one appended line per
report, see :mod:`trials.records`) is the lossless copy the local controller prefers, and the record
of what earlier attempts of this trial already reported, so a restarted trial never reports a step
twice.
"""

from __future__ import annotations

import math
import operator
import os
from collections.abc import Callable, Mapping
from typing import Any

from trials import protocol
from trials.errors import MetricsError
from trials.records import Measurement, format_record, parse_records

HYPERTUNE_DEFAULT_FILE = "/tmp/hypertune/output.metrics"  # the library's default path


def check_step(step: object) -> int:
    """A step is an integer >= 0 (numpy integers welcome); MetricsError otherwise."""
    if isinstance(step, bool):
        raise MetricsError(f"a step must be an integer >= 0, got {step!r}")
    try:
        value = operator.index(step)  # type: ignore[arg-type]
    except TypeError:
        raise MetricsError(f"a step must be an integer >= 0, got {step!r}") from None
    if value < 0:
        raise MetricsError(f"a step must be an integer >= 0, got {value}")
    return value


def check_metrics(metrics: Mapping[str, object], *, allow_nonfinite: bool = False) -> dict[str, float]:
    """Validate one report's metrics: non-empty names, real numbers, finite unless allowed.

    Raises:
        MetricsError: naming the metric and the value.
    """
    if not metrics:
        raise MetricsError("report() needs at least one metric, e.g. report(step, accuracy=0.9)")
    out: dict[str, float] = {}
    for name, value in metrics.items():
        if not isinstance(name, str) or not name or name.strip() != name:
            raise MetricsError(f"a metric name must be a non-empty string without spaces at the "
                               f"ends, got {name!r}")
        if isinstance(value, (bool, str, bytes)) or value is None:
            raise MetricsError(f"metric {name!r} must be a number, got {value!r}")
        try:
            number = float(value)  # type: ignore[arg-type]
        except (TypeError, ValueError):
            raise MetricsError(f"metric {name!r} must be a number, got {value!r}") from None
        if not math.isfinite(number) and not allow_nonfinite:
            raise MetricsError(
                f"metric {name!r} is {number!r}; pass allow_nonfinite=True to report it anyway "
                f"(the trial then becomes infeasible, as on Vertex AI)"
            )
        out[name] = number
    return out


def read_metrics_log(path: str) -> list[Measurement]:
    """Every complete record of a ``metrics.jsonl`` file (missing file: none)."""
    try:
        with open(path, encoding="utf-8") as file:
            return parse_records(file.read())
    except FileNotFoundError:
        return []


def read_hypertune_file(path: str) -> list[Measurement]:
    """Measurements from a cloudml-hypertune metric file (missing file: none); torn or foreign lines skipped."""
    from trials.hypertune_file import hypertune_measurements, parse_hypertune_text

    try:
        with open(path, encoding="utf-8") as file:
            text = file.read()
    except FileNotFoundError:
        return []
    return hypertune_measurements(parse_hypertune_text(text))


class Reporter:
    """Writes each report through ``hypertune.HyperTune`` and appends it to ``metrics.jsonl``.

    Args:
        metrics_log: the ``metrics.jsonl`` path (appended to; earlier attempts' lines are read to
            find the last reported step).
        metric_file: where hypertune writes; the library reads ``$CLOUD_ML_HP_METRIC_FILE``, and
            the instance is pointed here if that differs (local runs).
        attempt: this start's attempt number, recorded on each line.
        scalars: an optional TensorBoard writer with ``add(step, metrics, timestamp)`` and
            ``close(failed=...)``.
        on_skip: called with (step, last_step) when a step at or below the last one is skipped.
    """

    def __init__(self, *, metrics_log: str, metric_file: str, attempt: int = 0,
                 scalars: Any = None, on_skip: Callable[[int, int], None] | None = None):
        self.metrics_log = metrics_log
        self.metric_file = metric_file
        self.attempt = attempt
        self.scalars = scalars
        self._on_skip = on_skip or (lambda step, last: None)
        previous = read_metrics_log(metrics_log)
        self.last_step: int | None = max((m.step for m in previous), default=None)
        self.last_metrics: dict[str, float] = dict(previous[-1].metrics) if previous else {}
        self.n_reported = 0
        self._hypertune: Any = None
        self._fd: int | None = None

    def _hypertune_instance(self) -> Any:
        if self._hypertune is None:
            env_path = os.environ.get(protocol.ENV_METRIC_FILE, HYPERTUNE_DEFAULT_FILE)
            for path in {env_path, self.metric_file}:
                # the library's own makedirs has no exist_ok: two replicas can race on it
                os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
            import hypertune

            instance = hypertune.HyperTune()
            if instance.metric_path != self.metric_file:
                instance.metric_path = self.metric_file
            self._hypertune = instance
        return self._hypertune

    def _append(self, line: str) -> None:
        if self._fd is None:
            os.makedirs(os.path.dirname(os.path.abspath(self.metrics_log)), exist_ok=True)
            self._fd = os.open(self.metrics_log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        data = line.encode("utf-8")
        while data:  # one write of the whole line in practice; loop only on a short write
            written = os.write(self._fd, data)
            data = data[written:]

    def report(self, step: object, metrics: Mapping[str, object], *,
               allow_nonfinite: bool = False) -> bool:
        """Report one step. Returns False (and writes nothing) for a step <= the last reported one.

        Raises:
            MetricsError: a bad step or metric value.
        """
        step_value = check_step(step)
        values = check_metrics(metrics, allow_nonfinite=allow_nonfinite)
        if self.last_step is not None and step_value <= self.last_step:
            self._on_skip(step_value, self.last_step)
            return False
        instance = self._hypertune_instance()
        timestamp: float | None = None
        for tag, value in values.items():
            instance.report_hyperparameter_tuning_metric(
                hyperparameter_metric_tag=tag, metric_value=value, global_step=step_value)
            if timestamp is None:
                timestamp = _last_timestamp(instance)
        if timestamp is None:  # no metric: nothing went through hypertune
            timestamp = _last_timestamp(None)
        self._append(format_record(step_value, values, timestamp, self.attempt))
        self.last_step = step_value
        self.last_metrics = values
        self.n_reported += 1
        if self.scalars is not None:
            self.scalars.add(step_value, values, timestamp)
        return True

    def close(self, *, failed: bool = False) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)
        if self.scalars is not None:
            self.scalars.close(failed=failed)


def _last_timestamp(instance: Any) -> float:
    """The timestamp hypertune just wrote, so both files carry the same one."""
    import time

    try:
        return float(instance.metrics_queue[-1]["timestamp"])
    except (AttributeError, IndexError, KeyError, TypeError, ValueError):
        return time.time()
