"""What running trials report: new steps to the store (intermediate values), tag warnings, and the
early-stopping rule's verdict on each trial's curve against the completed trials' curves."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from trials.controller import stopping
from trials.controller.trial_run import TrialRun
from trials.records import Measurement, measurement_from_dict
from trials.spec import JobSpec
from trials.study.store import JobStore

Progress = Callable[[str, dict[str, Any]], None]


class TrialMetrics:
    """Reads and judges the metrics of a job's running trials (one instance per job loop)."""

    def __init__(self, store: JobStore, job: JobSpec, progress: Progress):
        self.store = store
        self.job = job
        self.progress = progress
        self.metric_ids = job.study.metric_ids
        self._warned_tag_sets: set[frozenset[str]] = set()
        self._curves: list[list[tuple[float, float]]] | None = None

    def forget_curves(self) -> None:
        """A trial completed: the early-stopping rule compares against one more curve."""
        self._curves = None

    def warn_unknown_tags(self, run: TrialRun) -> None:
        if run.warned_tags or not run.reader.unknown_tags:
            return
        run.warned_tags = True
        tags = frozenset(run.reader.unknown_tags)
        if tags in self._warned_tag_sets:  # once per trial in the record, once per job here
            return
        self._warned_tag_sets.add(tags)
        names = ", ".join(sorted(tags))
        spec_ids = ", ".join(self.metric_ids)
        if self.metric_ids[0] in run.reader.reported_tags:
            # reported beside the objective: deliberate extra metrics, kept but not tuned
            self.progress("note", {"trial_id": run.trial_id, "message": (
                f"trial {run.trial_id} also reports {names}, not in the spec (spec metrics: "
                f"{spec_ids}): recorded in metrics.jsonl, not tuned")})
        else:
            self.progress("warning", {"trial_id": run.trial_id, "message": (
                f"trial {run.trial_id} reports tags not in the spec: {names} (spec metrics: "
                f"{spec_ids}); other trials reporting the same tags are not warned again")})

    def report_new(self, run: TrialRun) -> bool:
        """Record the primary metric of steps not yet in the storage (Optuna intermediate values)."""
        primary = self.metric_ids[0]
        new = [m for m in run.reader.measurements() if m.step > run.reported_steps and primary in m.metrics]
        if not new:
            return False
        items = [(m.step, m.metrics[primary]) for m in new]
        for m in new:  # a running trial's measurements carry elapsedDuration in describe
            elapsed = m.elapsed_s if m.elapsed_s is not None else (
                m.timestamp - run.start_wall if m.timestamp else None)
            if elapsed is not None:
                run.live_elapsed[str(m.step)] = round(max(0.0, elapsed), 6)
        self.store.report_many(run.claimed.storage_id, items,
                               {"live_elapsed_s": dict(run.live_elapsed)} if run.live_elapsed else None)
        run.reported_steps = items[-1][0]
        return True

    def early_stop(self, run: TrialRun) -> stopping.StopDecision | None:
        """The stopping rule's decision for a running trial, or None when there is no rule."""
        spec = self.job.study.stopping
        if spec is None:
            return None
        current = self.curve(run.reader.measurements(), run.start_wall)
        return stopping.decide(spec, current, self.completed_curves(), maximize=self.job.study.metrics[0].maximize)

    def ended_early(self, measurements: Sequence[Measurement]) -> bool:
        """Whether a trial told to stop ended before the last x completed trials reached (a trial that
        finished its work while being stopped was not stopped early)."""
        return stopping.ended_early(self.curve(measurements), self.completed_curves())

    def curve(self, measurements: Sequence[Measurement], start: float | None = None) -> list[tuple[float, float]]:
        spec = self.job.study.stopping
        primary = self.job.study.metrics[0]
        out = []
        for m in measurements:
            if primary.metric_id not in m.metrics:
                continue
            x = float(m.step)
            if spec is not None and spec.use_elapsed_duration:
                if m.elapsed_s is not None:
                    x = m.elapsed_s
                elif m.timestamp and start:
                    x = m.timestamp - start
            out.append((x, stopping.orient(m.metrics[primary.metric_id], primary.maximize)))
        return out

    def completed_curves(self) -> list[list[tuple[float, float]]]:
        if self._curves is None:
            curves = []
            for t in self.store.completed_curves():
                if t.user_attrs.get("stopped_early"):
                    continue
                curve = self.curve([measurement_from_dict(d) for d in t.user_attrs.get("measurements", [])])
                if curve:
                    curves.append(curve)
            self._curves = curves
        return self._curves
