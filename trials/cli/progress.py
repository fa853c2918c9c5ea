"""What the controller prints while a job runs: a live line on a terminal, plain lines otherwise."""

from __future__ import annotations

import json
import sys
import time
from typing import TextIO

from trials.controller.jobs.describe import display
from trials.controller.loop import events as ev
from trials.controller.policy.exits import missing_metric_advice
from trials.controller.policy.ranking import best_of
from trials.printable import printable
from trials.records import TrialState


class Progress:
    """Receives the job loop's events. ``mode``: "live" (terminal), "plain", "json" or "quiet"."""

    def __init__(self, *, total: int, metric_ids: tuple[str, ...], maximize: bool,
                 out: TextIO | None = None, mode: str | None = None):
        self.out = out or sys.stdout
        self.mode = mode or ("live" if self.out.isatty() else "plain")
        self.total = total
        self.metric_ids = metric_ids
        self.maximize = maximize
        self.done = self.failed = self.running = self.stopped = 0
        self.best: float | None = None
        self.best_trial: str | None = None
        self.t0 = time.monotonic()
        self._live_shown = False
        self.warnings: list[str] = []
        self.told_missing_metric = False

    def __call__(self, event: ev.Event) -> None:
        try:
            self._handle(event)
        except (BrokenPipeError, OSError):
            # Output closed (`trials sweep … | head`): the job must go on, silently.
            self.mode = "quiet"
            self._live_shown = False
            self.out = _Discard()

    def _handle(self, event: ev.Event) -> None:
        if isinstance(event, ev.TrialStarted):
            self.running += 1
            what = "resumed" if event.resumed else "started"
            params = " ".join(f"{k}={display(v, 3)}" for k, v in event.params.items())
            self._line(f"trial {event.trial_id} {what}: {params}", event)
        elif isinstance(event, ev.TrialDone):
            self._trial_done(event)
        elif isinstance(event, ev.JobNote):
            self._line(f"note: {event.message}", event)
        elif isinstance(event, ev.JobWarning):
            self.warnings.append(event.message)
            self._line(f"warning: {event.message}", event, force=True)
        elif isinstance(event, ev.ReplicaRestart):
            self._line(f"trial {event.trial_id} replica {event.replica} restarting "
                       f"(restart {event.restarts}, {event.why})", event)
        elif isinstance(event, ev.TrialStopping):
            detail = f": {event.detail}" if event.detail else ""
            self._line(f"trial {event.trial_id} stopping ({event.reason.value}){detail}", event)
        elif isinstance(event, ev.TrialRequeued):
            self.running -= 1
            self._line(f"trial {event.trial_id} interrupted; it runs again on resume", event)
        elif isinstance(event, ev.InjectedRestart):
            self._line(f"trial {event.trial_id}: injected a maintenance restart of {event.replica}", event)
        elif isinstance(event, ev.TrialsAdded):  # `trials resume --max-trial-count` while the job ran
            self.total = event.total
            self._line(f"trials added to the job: {event.waiting} to run, {self.total} in all", event)
        elif isinstance(event, ev.JobCancelling):
            self._line("cancelling the job: stopping every replica", event, force=True)
        elif isinstance(event, ev.JobDone):
            if self._live_shown:
                self.out.write("\n")  # keep the last status line; the summary starts below it
                self.out.flush()
                self._live_shown = False
            if self.mode == "json":
                self._emit_json(event, f"job {event.state.value}")
            return
        if self.mode == "live":
            self._status()

    def _trial_done(self, event: ev.TrialDone) -> None:
        self.running -= 1
        self.done += 1
        if event.state is not TrialState.SUCCEEDED:
            self.failed += 1
        if event.stopped_early:
            self.stopped += 1
        values = event.values
        if values and not event.stopped_early:  # stopped early: where it stopped, not a result
            best = best_of([(self.best_trial, self.best), (event.trial_id, values[0])], lambda c: c[1],
                           maximize=self.maximize)  # a tie: the earlier trial stays the best
            if best is not None:
                self.best_trial, self.best = best
        result = f"{self.metric_ids[0]}={values[0]:.6g}" if values else event.reason or ""
        n = event.steps  # how many steps it reported; last_step: the last one's number
        when = f"after {n} step{'' if n == 1 else 's'}"
        if event.stopped_early:
            when = "(stopped early) " + (f"at step {event.last_step}" if event.last_step is not None else when)
        detail = "".join(f"\n    {line}" for line in event.detail)
        self._line(f"trial {event.trial_id} {event.state.value} {when}, {event.seconds:.1f}s: {result}" + detail,
                   event)
        if event.missing_metric and not self.told_missing_metric:  # once, at the first such trial
            self.told_missing_metric = True
            self._handle(ev.JobWarning(trial_id=event.trial_id, message=missing_metric_advice(
                event.trial_id, self.metric_ids, event.reported_tags, source=event.metrics_source)))

    def _line(self, text: str, event: ev.Event, force: bool = False) -> None:
        if self.mode == "quiet" and not force:
            return
        # trial reasons, tags and warnings may carry a trainer's bytes; our own line breaks stay
        text = "\n".join(printable(line) for line in text.split("\n"))
        if self.mode == "json":
            self._emit_json(event, text)
            return
        if self._live_shown:
            self.out.write("\r\033[K")
            self._live_shown = False
        self.out.write(f"[{time.strftime('%H:%M:%S')}] {text}\n")
        self.out.flush()

    def _emit_json(self, event: ev.Event, message: str) -> None:
        # Cloud Logging's special fields: `message` is the display text, `severity` the level.
        record = {"severity": "WARNING" if isinstance(event, ev.JobWarning) else "INFO", "message": message,
                  "event": event.name, "timestampSeconds": int(time.time()), **event.fields()}
        self.out.write(json.dumps(record, default=str) + "\n")
        self.out.flush()

    def _status(self) -> None:
        elapsed = time.monotonic() - self.t0
        eta = ""
        if self.done:
            left = max(0, self.total - self.done)
            eta = f", ETA {elapsed / self.done * left:.0f}s"
        best = f", best {self.metric_ids[0]}={self.best:.6g} (trial {self.best_trial})" if self.best is not None else ""
        self.out.write(f"\r\033[K{self.done}/{self.total} done, {self.running} running, "
                       f"{self.failed} failed{best}{eta}")
        self.out.flush()
        self._live_shown = True


class _Discard:
    """Where progress goes once its stream is closed."""

    def write(self, text: str) -> int:
        return len(text)

    def flush(self) -> None:
        pass

    def isatty(self) -> bool:
        return False
