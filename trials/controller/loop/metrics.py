"""What running trials report: new steps to the store (intermediate values), tag warnings, and the
early-stopping rule's verdict on each trial's curve against the other trials' curves: the completed ones,
and those stopped early up to their stop (:mod:`trials.controller.policy.stopping`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from trials import protocol
from trials.controller.loop import events
from trials.controller.loop.running import RunningTrial
from trials.controller.policy import stopping
from trials.records import (
    LIVE_ELAPSED_ATTR,
    LIVE_METRICS_ATTR,
    LiveChunks,
    Measurement,
    live_attr,
    live_metrics,
    measurement_from_dict,
    same_value,
    stored_measurements,
)
from trials.spec import JobSpec
from trials.study.store import JobStore
from trials.timefmt import parse_rfc3339


class TrialMetrics:
    """Reads and judges the metrics of a job's running trials (one instance per job loop)."""

    def __init__(self, store: JobStore, job: JobSpec, emit: events.Emit):
        self.store = store
        self.job = job
        self.emit = emit
        self.metric_ids = job.study.metric_ids
        self._warned_tag_sets: set[frozenset[str]] = set()
        self._curves: list[stopping.Reference] | None = None
        # trials this loop stopped, by trial id: their curves count from the stop on, before their record is read
        self._stopped_here: dict[str, stopping.Reference] = {}

    def forget_curves(self) -> None:
        """A trial completed: the early-stopping rule compares against one more curve (and reads again
        those of the trials stopped early since, in the storage)."""
        self._curves = None

    def warn_unknown_tags(self, run: RunningTrial) -> None:
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
            # reported beside the objective: deliberate extra metrics, kept but not tuned. A trials.main trainer's
            # (ctx.report(step, accuracy=…, loss=…): its TensorBoard scalars) are its design: nothing to say
            if run.reader.source == protocol.METRICS_LOG:
                return
            self.emit(events.JobNote(trial_id=run.trial_id, message=(
                f"trial {run.trial_id} also reports {names}, not in the spec (spec metrics: "
                f"{spec_ids}): recorded in metrics.jsonl, not tuned")))
        else:
            self.emit(events.JobWarning(trial_id=run.trial_id, message=(
                f"trial {run.trial_id} reports tags not in the spec: {names} (spec metrics: "
                f"{spec_ids}); other trials reporting the same tags are not warned again")))

    def resume_from_store(self, run: RunningTrial) -> None:
        """Start a trial's run from what the storage holds for it (the steps earlier controllers or
        runs read, with their metrics): its record is the union of every attempt's reports."""
        frozen = run.claimed.stored or self.store.storage.get_trial(run.claimed.storage_id)
        stored = stored_measurements(frozen.intermediate_values, frozen.user_attrs, self.metric_ids[0])
        if not stored:
            return
        attrs = frozen.user_attrs
        started = first_start(attrs.get("start_time"), run.reader.start_time)
        run.reader.start_time = started  # elapsed times count from the trial's start, as stored
        run.reader.seed(stored)
        run.stored = {m.step: dict(m.metrics) for m in stored}
        run.live_elapsed = {str(k): v for k, v in live_attr(attrs, LIVE_ELAPSED_ATTR).items()}
        run.live_metrics = {str(k): dict(v) for k, v in live_attr(attrs, LIVE_METRICS_ATTR).items()
                            if isinstance(v, dict)}
        run.live_chunks = LiveChunks.from_attrs(attrs)

    def report_new(self, run: RunningTrial) -> bool:
        """Store the steps read since the last call, and those whose values changed (a later report
        wins): the primary metric as Optuna's intermediate value, the other metrics and the
        elapsed time in the trial's live attributes (what ``describe`` shows of a running trial
        and what a resumed controller starts from)."""
        primary = self.metric_ids[0]
        new = steps_to_store(run.reader.measurements(), run.stored)
        if not new:
            return False
        for m in new:  # a running trial's measurements carry elapsedDuration in describe
            elapsed = m.elapsed_s if m.elapsed_s is not None else (
                m.timestamp - run.start_wall if m.timestamp else None)
            if elapsed is not None and str(m.step) not in run.live_elapsed:
                run.live_elapsed[str(m.step)] = round(max(0.0, elapsed), 6)
                run.live_chunks.touch(str(m.step))
            extra = live_metrics(m.metrics, primary)
            if extra or str(m.step) in run.live_metrics:
                run.live_metrics[str(m.step)] = extra
                run.live_chunks.touch(str(m.step))
        items = [(m.step, m.metrics[primary]) for m in new if primary in m.metrics]
        attrs = run.live_chunks.attrs(run.live_elapsed, run.live_metrics)  # the chunks this poll changed
        self.store.report_many(run.claimed.storage_id, items, attrs or None)
        run.stored.update((m.step, dict(m.metrics)) for m in new)
        return True

    def early_stop(self, run: RunningTrial, running: Sequence[RunningTrial] = ()) -> stopping.StopDecision | None:
        """The stopping rule's decision for a running trial, or None when there is no rule; ``running``: the
        trials running beside it here (their curves so far count too: issue 48)."""
        spec = self.job.study.stopping
        if spec is None:
            return None
        current = self.curve(run.reader.measurements(), run.start_wall)
        others = [r for r in self.completed_curves() if r.trial_id != run.trial_id]
        finished = {r.trial_id for r in others}
        for other in running:
            if other.trial_id == run.trial_id or other.trial_id in finished or other.lost:
                continue
            curve = self.curve(other.reader.measurements(), other.start_wall)
            if curve:
                others.append(stopping.Reference(curve=curve, trial_id=other.trial_id, completed=False,
                                                 running=True))
        decision = stopping.decide(spec, current, others, maximize=self.job.study.metrics[0].maximize)
        if decision.stop:  # its curve up to here is part of the bar from now on (the bar moves as the job learns)
            self._stopped_here[run.trial_id] = stopping.Reference(curve=current, trial_id=run.trial_id,
                                                                   completed=False)
        return decision

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

    def completed_curves(self) -> list[stopping.Reference]:
        """The curves the rules compare with: the completed trials', and those of the trials stopped early
        (up to their stop: from the storage, or as this loop stopped them), each with its trial id."""
        if self._curves is None:
            curves = []
            for t in self.store.finished_curves():
                curve = self.curve([measurement_from_dict(d) for d in t.user_attrs.get("measurements", [])
                                    if isinstance(d, dict)])
                if curve:
                    completed = t.state.name == "COMPLETE" and not t.user_attrs.get("stopped_early")
                    curves.append(stopping.Reference(curve=curve, trial_id=str(t.number + 1), completed=completed))
            self._curves = curves
        stored = {r.trial_id for r in self._curves}
        return self._curves + [r for t, r in self._stopped_here.items() if t not in stored]


def steps_to_store(measurements: Sequence[Measurement], stored: Mapping[int, Mapping[str, float]]
                   ) -> list[Measurement]:
    """The first measurement of each step whose metrics the storage does not hold yet, or holds
    with other values (pure; a repeated step's later reports are not stored, as before)."""
    out = []
    seen: set[int] = set()
    for m in measurements:
        if m.step in seen:
            continue
        seen.add(m.step)
        old = stored.get(m.step)
        if old is None or old.keys() != m.metrics.keys() or not all(
                same_value(v, m.metrics[k]) for k, v in old.items()):
            out.append(m)
    return out


def first_start(stored: object, now: float) -> float:
    """When a trial started: its stored ``start_time`` (RFC 3339) if it is earlier than ``now``
    (a resumed trial started under an earlier controller), else ``now`` (pure)."""
    if not isinstance(stored, str):
        return now
    try:
        return min(parse_rfc3339(stored), now)
    except ValueError:
        return now
