"""What the controller prints while a job runs: a live view on a terminal, plain lines otherwise.

On a terminal ("live") the view under the event lines is redrawn in place: the job's line, then one
line per running trial (its last step, its metrics, its time), at most ``trial_lines`` of them and
"+N more". In a pipe ("plain", "json") a running trial gets a heartbeat line at most every
``heartbeat_s``. The view is cleared when the job ends (or ``close``): nothing stale stays above
the summary.
"""

from __future__ import annotations

import json
import math
import shutil
import sys
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TextIO

from trials.controller.jobs.describe import display
from trials.controller.loop import events as ev
from trials.controller.policy.exits import missing_metric_advice
from trials.controller.policy.ranking import best_of
from trials.printable import printable
from trials.records import TrialState

HEARTBEAT_S = 30.0  # a pipe hears of a running trial at most this often
TRIAL_LINES = 6  # the live view shows at most this many running trials (then "+N more")
REDRAW_S = 0.2  # the live view is redrawn at most this often for progress alone
# the rule of `ended_early` (loop/metrics.py), said where its outcome is printed
RAN_TO_END = "not marked stopped early: it reached where the completed trials ended before it stopped"


@dataclass
class _Running:
    """What the view knows of a running trial."""

    step: int | None = None
    metrics: Mapping[str, float] = field(default_factory=dict)
    seconds: float = 0.0  # its time, as the loop last told it
    told: float = 0.0  # when its time was told (monotonic)
    last_beat: float = 0.0  # its last heartbeat line, or its start (monotonic)


class Progress:
    """Receives the job loop's events. ``mode``: "live" (terminal), "plain", "json" or "quiet".

    ``trial_lines``: running trials shown under the job's line on a terminal (0: the job's line
    only, as with ``--echo``, whose lines would break a view redrawn in place); ``heartbeat_s``: the
    least time between two heartbeat lines of a trial in a pipe; ``clock``: monotonic seconds.
    """

    def __init__(self, *, total: int, metric_ids: tuple[str, ...], maximize: bool,
                 out: TextIO | None = None, mode: str | None = None, trial_lines: int = TRIAL_LINES,
                 heartbeat_s: float = HEARTBEAT_S, clock: Callable[[], float] = time.monotonic):
        self.out = out or sys.stdout
        self.mode = mode or ("live" if self.out.isatty() else "plain")
        self.trial_lines = trial_lines
        self.heartbeat_s = heartbeat_s
        self.clock = clock
        self.trials: dict[str, _Running] = {}
        self._shown = 0  # lines of the live view on the terminal now (the cursor ends its last one)
        self._drawn_at = -math.inf
        self.total = total
        self.metric_ids = metric_ids
        self.maximize = maximize
        self.done = self.failed = self.running = self.stopped = 0
        self.best: float | None = None
        self.best_trial: str | None = None
        self.t0 = clock()
        self.warnings: list[str] = []
        self.told_missing_metric = False
        self.seconds_done = 0.0  # the finished trials' lengths, for the ETA
        self.most_running = 0  # the most trials seen running at once: the job's slots, for the ETA

    def __call__(self, event: ev.Event) -> None:
        try:
            self._handle(event)
        except (BrokenPipeError, OSError):
            # Output closed (`trials sweep … | head`): the job must go on, silently.
            self.mode = "quiet"
            self._shown = 0
            self.out = _Discard()

    def close(self) -> None:
        """Clear the live view (the job ended, or the loop stopped on an error): the summary or
        the error starts on a clean line."""
        try:
            self._clear()
            self.out.flush()
        except (BrokenPipeError, OSError):
            self._shown = 0

    def _handle(self, event: ev.Event) -> None:
        if isinstance(event, ev.TrialProgress):
            self._trial_progress(event)
            return
        if isinstance(event, ev.TrialStarted):
            self.running += 1
            now = self.clock()
            self.trials[event.trial_id] = _Running(told=now, last_beat=now)
            self.most_running = max(self.most_running, len(self.trials))
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
            self.trials.pop(event.trial_id, None)
            self._line(f"trial {event.trial_id} interrupted; it runs again on resume", event)
        elif isinstance(event, ev.InjectedRestart):
            self._line(f"trial {event.trial_id}: injected a maintenance restart of {event.replica}", event)
        elif isinstance(event, ev.TrialsAdded):  # `trials resume --max-trial-count` while the job ran
            self.total = event.total
            self._line(f"trials added to the job: {event.waiting} to run, {self.total} in all", event)
        elif isinstance(event, ev.JobCancelling):
            self._line("cancelling the job: stopping every replica", event, force=True)
        elif isinstance(event, ev.JobDone):
            self.trials.clear()
            self.close()  # no stale view above the summary
            if self.mode == "json":
                self._emit_json(event, f"job {event.state.value}")
            return
        if self.mode == "live":
            self._status()

    def _trial_progress(self, event: ev.TrialProgress) -> None:
        run = self.trials.get(event.trial_id)
        if run is None:
            return
        now = self.clock()
        run.step, run.metrics, run.seconds, run.told = event.step, event.metrics, event.seconds, now
        if self.mode == "live":
            if now - self._drawn_at >= REDRAW_S:
                self._status()
        elif self.mode in ("plain", "json") and now - run.last_beat >= self.heartbeat_s:
            run.last_beat = now
            if event.step is not None:
                where = f"step {event.step}"
            elif event.other:  # it reports, but not the spec's metric: say what, not "nothing"
                where = "no step of the spec's metric yet; reported " + ", ".join(
                    f"{printable(tag)}={value:.6g} at step {step}"
                    for tag, (step, value) in sorted(event.other.items()))
            else:
                where = "no step reported yet"
            self._line(f"trial {event.trial_id} running, {event.seconds:.0f}s: {where}"
                       + "".join(f", {m}={v:.6g}" for m, v in event.metrics.items()), event)

    def _trial_done(self, event: ev.TrialDone) -> None:
        self.running -= 1
        self.trials.pop(event.trial_id, None)
        self.done += 1
        self.seconds_done += max(0.0, event.seconds)
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
        if values and event.final_step is not None and event.last_step is not None and \
                event.final_step != event.last_step and not event.stopped_early:
            # the spec selects the best measurement: say so, or it reads as the last step's value
            result += f" (the best, at step {event.final_step} of {event.last_step})"
        n = event.steps  # how many steps it reported; last_step: the last one's number
        when = f"after {n} step{'' if n == 1 else 's'}"
        if event.stopped_early:
            when = "(stopped early) " + (f"at step {event.last_step}" if event.last_step is not None else when)
        detail = "".join(f"\n    {line}" for line in event.detail)
        why = f" ({RAN_TO_END})" if event.ran_to_end else ""
        self._line(f"trial {event.trial_id} {event.state.value} {when}, {event.seconds:.1f}s: {result}{why}"
                   + detail, event)
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
        self._clear()
        self.out.write(f"[{time.strftime('%H:%M:%S')}] {text}\n")
        self.out.flush()

    def _emit_json(self, event: ev.Event, message: str) -> None:
        # Cloud Logging's special fields: `message` is the display text, `severity` the level.
        record = {"severity": "WARNING" if isinstance(event, ev.JobWarning) else "INFO", "message": message,
                  "event": event.name, "schema": ev.SCHEMA_VERSION, "timestampSeconds": int(time.time()),
                  **event.fields()}
        self.out.write(json.dumps(record, default=str) + "\n")
        self.out.flush()

    def _eta(self, now: float) -> float:
        """Seconds left: the trials not started at the finished ones' mean length, and the running ones' rest of
        it, over the job's slots. (The job's elapsed time over the trials done grew while none finished, and
        counted the start-up: an ETA that went 34 -> 46 -> 25 s in one job.)"""
        mean = self.seconds_done / self.done
        running = [r.seconds + max(0.0, now - r.told) for r in self.trials.values()]
        not_started = max(0, self.total - self.done - len(running))
        work = not_started * mean + sum(max(0.0, mean - ran) for ran in running)
        return work / max(1, self.most_running)

    def _clear(self) -> None:
        """Erase the live view; the cursor goes to the start of its first line."""
        if self._shown:
            self.out.write("\r\033[K" + "\033[1A\033[K" * (self._shown - 1))
            self._shown = 0

    def _status(self) -> None:
        now = self.clock()
        eta = f", ETA {self._eta(now):.0f}s" if self.done else ""
        best = f", best {self.metric_ids[0]}={self.best:.6g} (trial {self.best_trial})" if self.best is not None else ""
        lines = [f"{self.done}/{self.total} done, {self.running} running, {self.failed} failed{best}{eta}",
                 *self._trial_view(now)]
        width = max(20, shutil.get_terminal_size().columns - 1)  # a wrapped line would not be erased
        self._clear()
        self.out.write("\r\033[K" + "\n".join(printable(line, limit=width) for line in lines))
        self.out.flush()
        self._shown = len(lines)
        self._drawn_at = now

    def _trial_view(self, now: float) -> list[str]:
        """One line per running trial (in trial order), at most ``trial_lines`` with "+N more"."""
        if self.trial_lines <= 0 or not self.trials:
            return []
        ids = sorted(self.trials, key=lambda t: (len(t), t))  # "2" before "10"
        shown = ids if len(ids) <= self.trial_lines else ids[:self.trial_lines - 1]
        lines = []
        for trial_id in shown:
            run = self.trials[trial_id]
            where = f"step {run.step}" if run.step is not None else "no step yet"
            metrics = "".join(f"  {m}={v:.4g}" for m, v in run.metrics.items())
            lines.append(f"  trial {trial_id}  {where}{metrics}  {run.seconds + now - run.told:.0f}s")
        if len(shown) < len(ids):
            lines.append(f"  +{len(ids) - len(shown)} more running")
        return lines


def sampler_words(sampler: object, n_startup: object, n_trials: int) -> str:
    """The job's first line's words for its sampler: its name, and when its model starts (a sampler with a
    random start-up that takes the whole job says so: it is never announced as if its model ran)."""
    name = str(sampler)
    if name in ("random", "grid") or not isinstance(n_startup, int) or isinstance(n_startup, bool):
        return f"sampler {name}"
    if n_startup >= n_trials:
        return f"sampler {name} (all {n_trials} trials are its random start-up: its model never runs)"
    return f"sampler {name}"  # (its model runs once the start-up's trials finished: the end line counts)


def suggestions_end_line(trials: Iterable[object], sampler: object) -> str | None:
    """The line after the job's end line: how many trials' parameters the sampler's model chose and how many
    were random (its start-up, a fallback) or given, as each claim noted; None if no claim noted it."""
    from trials.study.choice import suggestion_counts, suggestions_words

    return suggestions_words(suggestion_counts(trials), str(sampler) if sampler else None)


class _Discard:
    """Where progress goes once its stream is closed."""

    def write(self, text: str) -> int:
        return len(text)

    def flush(self) -> None:
        pass

    def isatty(self) -> bool:
        return False
