"""Vertex's study stopping (``studySpec.studyStoppingConfig``): whether the job stops asking for trials.

v1 reference (``StudySpec.StudyStoppingConfig``): "Before Vizier would generate a new suggestion, it
first checks each specified stopping rule, from top to bottom in this list. Note that the first few
rules (e.g. minimum_runtime_constraint, min_num_trials) will prevent other stopping rules from being
evaluated until they are met. [...] It follows the first applicable rule (whose 'if' condition is
satisfied) to make a stopping decision. If none of the specified rules are applicable, then Vizier
decides that the study should not stop." The rules, in that order:

1. ``minimumRuntimeConstraint`` — the time (``maxDuration`` since the study began, or ``endTime``)
   has not passed: do not stop;
2. ``minNumTrials`` — fewer COMPLETED trials than this: do not stop;
3. ``maximumRuntimeConstraint`` — the time has passed: stop;
4. ``maxNumTrials`` — more trials than this: stop;
5. ``maxNumTrialsNoProgress`` — the objective has not improved for this many consecutive trials: stop;
6. ``maxDurationNoProgress`` — it has not improved for this long: stop (5 and 6: single-objective
   studies only, as the reference warns).

``shouldStopAsap``: the running trials are interrupted at once instead of finishing. Pure: the job
loop asks :func:`decide` before each claim and acts on its answer.
"""

from __future__ import annotations

import datetime
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass

from trials.spec import JobSpec
from trials.timefmt import duration, rfc3339


@dataclass(frozen=True, slots=True, kw_only=True)
class TimeConstraint:
    """``StudyTimeConstraint``: a duration since the study began, or a wall-clock end time."""

    max_duration_s: float | None = None
    end_time: float | None = None  # epoch seconds

    def passed(self, *, began: float, now: float) -> bool:
        if self.max_duration_s is not None:
            return now - began >= self.max_duration_s
        return self.end_time is not None and now >= self.end_time

    def describe(self) -> str:
        if self.max_duration_s is not None:
            return f"{duration(self.max_duration_s)} since the job began"
        return rfc3339(self.end_time) if self.end_time is not None else "no time"


@dataclass(frozen=True, slots=True, kw_only=True)
class StudyStopping:
    """The fields of ``studyStoppingConfig`` (None: not given; 0 counts as not given, as in proto3)."""

    should_stop_asap: bool = False
    minimum_runtime: TimeConstraint | None = None
    maximum_runtime: TimeConstraint | None = None
    min_num_trials: int | None = None
    max_num_trials: int | None = None
    max_num_trials_no_progress: int | None = None
    max_duration_no_progress_s: float | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Finished:
    """A trial that ended: when (epoch seconds), and its objective value oriented so that higher is
    better (None: it is not COMPLETED — infeasible, or stopped early)."""

    end_time: float
    value: float | None


@dataclass(frozen=True, slots=True, kw_only=True)
class StudyStopDecision:
    stop: bool
    reason: str = ""  # why the study stopped, in the job's words (its end line, describe)


GO_ON = StudyStopDecision(stop=False)


def decide(config: StudyStopping, *, began: float, now: float, n_trials: int,
           finished: Sequence[Finished], single_objective: bool) -> StudyStopDecision:
    """Whether the study stops asking for trials now.

    Args:
        began: when the job began (epoch seconds). ``now``: the wall time now.
        n_trials: the trials the study would have with the one about to be asked for (so
            ``maxNumTrials`` N lets N trials run: the N + 1st would make "more than this many").
        finished: the ended trials in the order they ended.
        single_objective: the study has one metric (rules 5 and 6 apply only then).
    """
    completed = [f for f in finished if f.value is not None]
    if config.minimum_runtime is not None and not config.minimum_runtime.passed(began=began, now=now):
        return GO_ON
    if config.min_num_trials is not None and len(completed) < config.min_num_trials:
        return GO_ON
    if config.maximum_runtime is not None and config.maximum_runtime.passed(began=began, now=now):
        return StudyStopDecision(stop=True, reason=(
            f"the study stopped: its maximum running time ({config.maximum_runtime.describe()}, "
            f"studyStoppingConfig.maximumRuntimeConstraint) has passed"))
    if config.max_num_trials is not None and n_trials > config.max_num_trials:
        return StudyStopDecision(stop=True, reason=(
            f"the study stopped: another trial would make {n_trials}, more than "
            f"studyStoppingConfig.maxNumTrials ({config.max_num_trials})"))
    if not single_objective or not completed:
        return GO_ON
    since, stale_for = _no_progress(finished)
    limit = config.max_num_trials_no_progress
    if limit is not None and since >= limit:
        return StudyStopDecision(stop=True, reason=(
            f"the study stopped: the objective has not improved for {since} consecutive trials "
            f"(studyStoppingConfig.maxNumTrialsNoProgress {limit})"))
    if config.max_duration_no_progress_s is not None and stale_for is not None \
            and now - stale_for >= config.max_duration_no_progress_s:
        return StudyStopDecision(stop=True, reason=(
            f"the study stopped: the objective has not improved for {duration(now - stale_for)} "
            f"(studyStoppingConfig.maxDurationNoProgress {duration(config.max_duration_no_progress_s)})"))
    return GO_ON


def _no_progress(finished: Sequence[Finished]) -> tuple[int, float | None]:
    """(trials ended since the best one, when the best one ended)."""
    best = -math.inf
    best_at: float | None = None
    since = 0
    for f in finished:
        if f.value is not None and f.value > best:
            best, best_at, since = f.value, f.end_time, 0
        else:
            since += 1
    return since, best_at


CARRIED_PATH = "studySpec.studyStoppingConfig"


def from_job(job: JobSpec) -> StudyStopping | None:
    """The job's ``studyStoppingConfig`` (None: it has none, or none of its rules is set).

    The spec loader checked it against the v1 type and keeps it in canonical JSON (defaults left
    out, durations as "3600s", times as RFC 3339) among the job's carried fields.
    """
    text = dict(job.carried).get(CARRIED_PATH)
    if text is None:
        return None
    doc = json.loads(text)
    if not isinstance(doc, dict):
        return None
    config = StudyStopping(
        should_stop_asap=bool(doc.get("shouldStopAsap", False)),
        minimum_runtime=_time(doc.get("minimumRuntimeConstraint")),
        maximum_runtime=_time(doc.get("maximumRuntimeConstraint")),
        min_num_trials=_count(doc.get("minNumTrials")),
        max_num_trials=_count(doc.get("maxNumTrials")),
        max_num_trials_no_progress=_count(doc.get("maxNumTrialsNoProgress")),
        max_duration_no_progress_s=_seconds(doc.get("maxDurationNoProgress")),
    )
    return None if config == StudyStopping(should_stop_asap=config.should_stop_asap) else config


def _count(value: object) -> int | None:
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        return None
    n = int(value)
    return n if n > 0 else None


def _seconds(value: object) -> float | None:
    if not isinstance(value, str) or not value.endswith("s"):
        return None
    seconds = float(value[:-1])
    return seconds if seconds > 0 else None


def _time(value: object) -> TimeConstraint | None:
    if not isinstance(value, dict):
        return None
    if "maxDuration" in value:
        return TimeConstraint(max_duration_s=_seconds(value["maxDuration"]))
    if isinstance(value.get("endTime"), str):
        return TimeConstraint(end_time=_epoch(value["endTime"]))
    return None


def _epoch(text: str) -> float:
    """An RFC 3339 time as protobuf writes it (fractions of 0 to 9 digits, ``Z`` or an offset)."""
    head, dot, rest = text.partition(".")
    if dot:  # datetime takes at most 6 fraction digits
        digits = len(rest) - len(rest.lstrip("0123456789"))
        rest = rest[:min(digits, 6)] + rest[digits:]
        text = f"{head}.{rest}"
    return datetime.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
