"""A job as the commands show it: its Vertex resource, its local details, its best trials."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from trials.controller.jobs.describe import job_to_rest
from trials.controller.policy.ranking import best_of, pareto_front
from trials.study.space import values_from_optuna
from trials.timefmt import rfc3339

if TYPE_CHECKING:
    from trials.controller.jobs.registry import JobHandle
    from trials.spec import Value
    from trials.study.store import FrozenTrial


# --- describe -------------------------------------------------------------------------------------
def params_of(h: JobHandle) -> Callable[[FrozenTrial], dict[str, Value]]:
    study = h.job.study

    def get(t: FrozenTrial) -> dict[str, Value]:
        return values_from_optuna(study, t.params)

    return get


def describe(h: JobHandle) -> dict[str, Any]:
    meta = h.store.meta()
    meta["update_time"] = rfc3339(time.time())
    return job_to_rest(h.job_id, meta, h.store.frozen_trials(), params_of(h),
                       h.job.study.reported_metric_ids)


def describe_local(h: JobHandle) -> dict[str, Any]:
    """What only the local run knows, per trial (``describe --format local-json``)."""
    from trials.controller.jobs.describe import local_details

    meta = h.store.meta()
    return {"jobId": h.job_id, "jobFolder": h.job_dir, "state": meta.get("state"),
            "baseOutput": meta.get("base_output"), "localCommand": meta.get("local_command"),
            **({"studyStopped": meta["study_stopped"]} if meta.get("study_stopped") else {}),
            "trials": local_details(h.store.frozen_trials())}


def best_trials(h: JobHandle) -> list[Any]:
    """The best SUCCEEDED trial (single metric), or the Pareto front (several metrics)."""
    done = [t for t in h.store.frozen_trials() if t.state.name == "COMPLETE"]
    metrics = h.job.study.metrics
    if len(metrics) == 1:
        best = best_of(done, lambda t: t.values[0], maximize=metrics[0].maximize)
        return [best] if best is not None else []
    return pareto_front(done, lambda t: t.values, [m.maximize for m in metrics])
