"""What the controller prints while a job runs: a live line on a terminal, plain lines otherwise."""

from __future__ import annotations

import json
import math
import sys
import time
from typing import Any, TextIO

from trials.controller.jobs.describe import display
from trials.controller.policy.exits import missing_metric_advice
from trials.printable import printable


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

    def __call__(self, event: str, data: dict[str, Any]) -> None:
        try:
            self._handle(event, data)
        except (BrokenPipeError, OSError):
            # Output closed (`trials sweep … | head`): the job must go on, silently.
            self.mode = "quiet"
            self._live_shown = False
            self.out = _Discard()

    def _handle(self, event: str, data: dict[str, Any]) -> None:
        if event == "trial_started":
            self.running += 1
            what = "resumed" if data.get("resumed") else "started"
            params = " ".join(f"{k}={display(v, 3)}" for k, v in data["params"].items())
            self._line(f"trial {data['trial_id']} {what}: {params}", event, data)
        elif event == "trial_done":
            self.running -= 1
            self.done += 1
            if data["state"] != "SUCCEEDED":
                self.failed += 1
            if data.get("stopped_early"):
                self.stopped += 1
            values = data.get("values") or []
            if values and math.isfinite(values[0]) and not data.get("stopped_early"):  # not a result
                better = self.best is None or (values[0] > self.best if self.maximize else values[0] < self.best)
                if better:
                    self.best, self.best_trial = values[0], data["trial_id"]
            result = (f"{self.metric_ids[0]}={values[0]:.6g}" if values else data.get("reason") or "")
            n = data["steps"]  # how many steps it reported; last_step: the last one's number
            when = f"after {n} step{'' if n == 1 else 's'}"
            if data.get("stopped_early"):
                when = "(stopped early) " + (f"at step {data['last_step']}" if data.get("last_step") is not None
                                             else when)
            detail = "".join(f"\n    {line}" for line in data.get("detail") or ())
            self._line(f"trial {data['trial_id']} {data['state']} {when}, {data['seconds']:.1f}s: {result}"
                       + detail, event, data)
            if data.get("missing_metric") and not self.told_missing_metric:  # once, at the first such trial
                self.told_missing_metric = True
                self._handle("warning", {"trial_id": data["trial_id"], "message": missing_metric_advice(
                    data["trial_id"], self.metric_ids, data.get("reported_tags") or (),
                    source=data.get("metrics_source"))})
        elif event == "note":
            self._line(f"note: {data['message']}", event, data)
        elif event == "warning":
            self.warnings.append(data["message"])
            self._line(f"warning: {data['message']}", event, data, force=True)
        elif event == "replica_restart":
            self._line(f"trial {data['trial_id']} replica {data['replica']} restarting "
                       f"(restart {data['restarts']}, {data['why']})", event, data)
        elif event == "trial_stopping":
            detail = f": {data['detail']}" if data.get("detail") else ""
            self._line(f"trial {data['trial_id']} stopping ({data['reason']}){detail}", event, data)
        elif event == "trial_requeued":
            self.running -= 1
            self._line(f"trial {data['trial_id']} interrupted; it runs again on resume", event, data)
        elif event == "injected_restart":
            self._line(f"trial {data['trial_id']}: injected a maintenance restart of {data['replica']}", event, data)
        elif event == "trials_added":  # `trials resume --max-trial-count` while the job ran
            self.total = int(data["total"])
            self._line(f"trials added to the job: {data['waiting']} to run, {self.total} in all", event, data)
        elif event in ("job_cancelling",):
            self._line("cancelling the job: stopping every replica", event, data, force=True)
        elif event == "job_done":
            if self._live_shown:
                self.out.write("\n")  # keep the last status line; the summary starts below it
                self.out.flush()
                self._live_shown = False
            if self.mode == "json":
                self._emit_json(event, data, f"job {data.get('state')}")
            return
        if self.mode == "live":
            self._status()

    def _line(self, text: str, event: str, data: dict[str, Any], force: bool = False) -> None:
        if self.mode == "quiet" and not force:
            return
        # trial reasons, tags and warnings may carry a trainer's bytes; our own line breaks stay
        text = "\n".join(printable(line) for line in text.split("\n"))
        if self.mode == "json":
            self._emit_json(event, data, text)
            return
        if self._live_shown:
            self.out.write("\r\033[K")
            self._live_shown = False
        self.out.write(f"[{time.strftime('%H:%M:%S')}] {text}\n")
        self.out.flush()

    def _emit_json(self, event: str, data: dict[str, Any], message: str) -> None:
        # Cloud Logging's special fields: `message` is the display text, `severity` the level.
        record = {"severity": "WARNING" if event == "warning" else "INFO", "message": message,
                  "event": event, "timestampSeconds": int(time.time()), **data}
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
