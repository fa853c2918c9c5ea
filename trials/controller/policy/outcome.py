"""A finished trial's outcome: its state, final measurement and recorded attributes, then the record.

One pure function (:func:`finished_trial`) decides, shared by the job loop and ``trials.tune``;
:func:`record_finished` writes the result to the job's store.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from trials.controller.policy import exits
from trials.records import Measurement, TrialState, measurement_to_dict
from trials.spec import StudySpec


@dataclass(frozen=True, slots=True, kw_only=True)
class FinishedTrial:
    """What a finished trial is recorded as (Vertex trial state and the trial's attributes)."""

    state: TrialState
    reason: str | None  # why it is INFEASIBLE
    values: list[float]  # objective values (SUCCEEDED only)
    measurements: list[Measurement]
    stopped_early: bool = False
    attrs: dict[str, Any] = field(default_factory=dict)

    @property
    def succeeded(self) -> bool:
        return self.state is TrialState.SUCCEEDED


def finished_trial(
    measurements: Sequence[Measurement],
    study: StudySpec,
    *,
    failure: str | None,
    reported_tags: Iterable[str],
    end_time: str,
    stopped_early: bool = False,
    stop_detail: str = "",
    predicted: tuple[float, float] | None = None,
    stopped_by_job: str | None = None,
    custom_job: bool = False,
) -> FinishedTrial:
    """Decide the outcome of a trial that ended (pure).

    Args:
        measurements: what the trial reported, elapsed times set, in step order.
        study: the job's study spec (metrics, final-measurement selection).
        failure: why the trial failed (it is then INFEASIBLE with this reason), or None.
        reported_tags: every metric tag the trial reported (for the missing-metric message).
        end_time: RFC 3339 time the trial ended.
        stopped_early: the early-stopping rule stopped it; ``stop_detail`` says why.
        predicted: the convex rule's predicted final point (x, oriented value), recorded as the
            last measurement of a trial it stopped.
        stopped_by_job: the job failed while the trial ran and stopped it: INFEASIBLE with this
            reason (unless it failed itself), not counted as a failed trial, not run again.
        custom_job: a CustomJob's one trial: it succeeds by its replicas' exit, with or without a metric
            (its Optuna value 0.0 is no result, never shown).
    """
    ms = list(measurements)
    if predicted is not None and ms:
        x, oriented = predicted
        primary = study.metrics[0]
        value = oriented if primary.maximize else -oriented
        ms.append(Measurement(step=int(x), metrics={primary.metric_id: value}, elapsed_s=ms[-1].elapsed_s))
    state, reason, values, final = exits.trial_outcome(ms, study.metrics, best=study.selects_best,
                                                        failure=failure or stopped_by_job,
                                                        reported_tags=reported_tags)
    if custom_job and not (failure or stopped_by_job):
        state, reason, values, final = TrialState.SUCCEEDED, None, [0.0], None
    attrs: dict[str, Any] = {"state": TrialState(state).value, "end_time": end_time,
                             "measurements": [measurement_to_dict(m) for m in ms]}
    if final is not None:
        attrs["final_measurement"] = measurement_to_dict(final)
    if reason:
        attrs["infeasible_reason"] = reason
    if failure:
        attrs["failed"] = True
    elif stopped_by_job:
        attrs["stopped_by_job"] = True
    if stopped_early:
        attrs.update(stopped_early=True, stop_reason=stop_detail)
    return FinishedTrial(state=TrialState(state), reason=reason, values=values, measurements=ms,
                         stopped_early=stopped_early, attrs=attrs)


class TrialRecorder(Protocol):
    """The part of ``trials.study.store.JobStore`` that records a finished trial."""

    def set_trial_attrs(self, storage_id: int, **values: Any) -> None: ...
    def complete(self, number: int, values: Sequence[float], *, stopped_early: bool = False) -> None: ...
    def fail(self, number: int) -> None: ...


def record_finished(store: TrialRecorder, *, number: int, storage_id: int, outcome: FinishedTrial,
                    extra: dict[str, Any] | None = None) -> None:
    """Write the outcome: attributes first (with ``extra``), then COMPLETE/PRUNED or FAIL."""
    store.set_trial_attrs(storage_id, **{**(extra or {}), **outcome.attrs})
    if outcome.succeeded:
        store.complete(number, outcome.values, stopped_early=outcome.stopped_early)
    else:
        store.fail(number)
