"""Trials whose controller is gone when their job is cancelled (it died, or ended on an error): recorded
as the loop records a trial a cancel stopped (``policy.rerun``), from what the storage holds of them, and
queued to run again on resume."""

from __future__ import annotations

import time
from typing import Any

from trials.controller.policy import rerun
from trials.records import stored_measurements
from trials.spec import StudySpec
from trials.timefmt import rfc3339


def requeue_stopped(store: Any, study: StudySpec, frozen: Any, *, why: str, wall: float | None = None) -> None:
    """Record the RUNNING trial ``frozen`` (an Optuna FrozenTrial of ``store``, a ``JobStore``) as
    stopped at ``wall`` (now by default: when its controller ran it last is not known), with the steps
    its controller stored, and put it back in the queue (same id and parameters on resume)."""
    attrs = frozen.user_attrs
    measurements = stored_measurements(frozen.intermediate_values, attrs, study.metric_ids[0])
    tags = {tag for m in measurements for tag in m.metrics}
    outcome = rerun.stopped_outcome(measurements, study, reported_tags=tags,
                                    end_time=rfc3339(time.time() if wall is None else wall), why=why)
    storage_id = frozen._trial_id
    store.set_trial_attrs(storage_id, **rerun.rerun_attrs(
        outcome, why=why, start_time=attrs.get("start_time"), previous_runs=attrs.get(rerun.PREVIOUS_RUNS_ATTR),
        attempts=attrs.get("attempts") or []))
    store.requeue(storage_id)
