"""What the report's plots show, read from the job's REST view: one ``PlotTrial`` per trial, pure."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from trials.controller.policy.ranking import best_of, pareto_front
from trials.records import TrialState

Value = float | int | str


@dataclass(frozen=True, slots=True, kw_only=True)
class PlotTrial:
    """One trial as the plots need it (``values`` in the spec's metric order, None when missing)."""

    trial_id: int
    state: str
    stopped: bool = False
    values: tuple[float | None, ...] = ()
    curve: tuple[tuple[int, float], ...] = ()  # (step, primary metric)
    params: Mapping[str, Value] = field(default_factory=dict)

    @property
    def result(self) -> bool:
        """A real result: succeeded, not stopped early, every metric present."""
        return (self.state == TrialState.SUCCEEDED and not self.stopped and bool(self.values)
                and all(v is not None for v in self.values))


def _finite(v: Any) -> float | None:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


def _metrics(measurement: Mapping[str, Any]) -> dict[str, float | None]:
    return {m["metricId"]: _finite(m.get("value")) for m in measurement.get("metrics", [])}


def plot_trials(rest: Mapping[str, Any], local: Mapping[str, Mapping[str, Any]],
                metric_ids: Sequence[str]) -> list[PlotTrial]:
    """Every trial of the REST job that ran, with its stopped-early flag from the local view."""
    out = []
    for t in rest.get("trials", []):
        final = _metrics(t.get("finalMeasurement", {}))
        curve = []
        for m in t.get("measurements", []):
            v = _metrics(m).get(metric_ids[0])
            if v is not None:
                curve.append((int(m.get("stepCount", 0)), v))
        out.append(PlotTrial(
            trial_id=int(t["id"]), state=t["state"],
            stopped=bool(local.get(t["id"], {}).get("stopped_early")),
            values=tuple(final.get(m) for m in metric_ids) if final else (),
            curve=tuple(curve), params={p["parameterId"]: p["value"] for p in t.get("parameters", [])},
        ))
    return out


def best_so_far(trials: Sequence[PlotTrial], *, maximize: bool, index: int = 0) -> list[tuple[int, float]]:
    """(trial id, best result up to it) over the trials with a real result, in id order."""
    out: list[tuple[int, float]] = []
    best: PlotTrial | None = None
    for t in sorted(trials, key=lambda t: t.trial_id):
        if not t.result or t.values[index] is None:
            continue
        best = best_of([t] if best is None else [best, t], lambda c: c.values[index], maximize=maximize)
        if best is not None and (value := best.values[index]) is not None:
            out.append((t.trial_id, value))
    return out


def best_trial(trials: Sequence[PlotTrial], *, maximize: bool) -> PlotTrial | None:
    """The trial with the best primary result (ties: the lower id)."""
    done = sorted((t for t in trials if t.result), key=lambda t: t.trial_id)
    return best_of(done, lambda t: t.values[0], maximize=maximize)


def pareto_ids(trials: Sequence[PlotTrial], maximize: Sequence[bool]) -> set[int]:
    """The trial ids no other result dominates (every metric as good, one better)."""
    done = [t for t in trials if t.result]
    return {t.trial_id for t in pareto_front(done, lambda t: [v or 0.0 for v in t.values], maximize)}
