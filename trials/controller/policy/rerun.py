"""A trial stopped to run again (its job was cancelled, or its controller died): what it is shown as
until ``trials resume`` runs it again (pure).

Vertex has no word for it: a cancelled job is never resumed there. What it shows of a trial its service
stopped is the way a stopped trial ends (ACTIVE -> STOPPING -> SUCCEEDED or INFEASIBLE, see
VERTEX_EMULATION.md, "cancel"): SUCCEEDED with a final measurement picked from what the trial reported
by the job's selection rule (Vizier's ``CompleteTrial`` without one "auto-selects a previously reported
measurement"), else INFEASIBLE ("done but missing the final_measurement") with the reason; its start
time, end time and measurements kept. Never REQUESTED: v1 says that is a trial "not yet suggested".

It stays WAITING in the storage, so a resume runs it again as a new attempt of the same trial (same id
and parameters; its steps carried on, as a restarted replica's are); until then ``rerun_due`` (its end
time) marks it. The mark needs no clearing: the new attempt's end writes another end time. Each stopped
run is also kept whole in ``previous_runs`` (start, end, state, final measurement, why, attempts), which
nothing rewrites.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from trials.controller.policy.exits import RERUN_ATTR, select_final
from trials.controller.policy.outcome import FinishedTrial, finished_trial
from trials.records import Measurement, TrialState
from trials.spec import StudySpec

CANCELLED = "The trial was stopped because the job was cancelled."
CANCELLED_ORPHAN = "The trial was stopped because the job was cancelled after its controller had died."
ENDED_ORPHAN = ("The trial was stopped because its controller had died and the job ended before it ran again.")
PREVIOUS_RUNS_ATTR = "previous_runs"


def stopped_outcome(measurements: Sequence[Measurement], study: StudySpec, *, reported_tags: Iterable[str],
                    end_time: str, why: str) -> FinishedTrial:
    """A trial stopped by its job (not by its own fault, not early): SUCCEEDED with the final
    measurement the job's rule picks from what it reported, else INFEASIBLE saying ``why`` and what
    it lacked.
    """
    reported = sorted(set(reported_tags))
    outcome = finished_trial(measurements, study, failure=None, reported_tags=reported, end_time=end_time)
    if outcome.succeeded:
        return outcome
    if select_final(outcome.measurements, study.metrics, best=study.selects_best) is None:
        seen = ", ".join(reported) if reported else "no metrics at all"
        lacked = f"It had not reported the objective metric {', '.join(study.metric_ids)} (it reported {seen})."
    else:  # a final measurement whose value is not a number
        lacked = str(outcome.reason)
    reason = f"{why} {lacked}"
    return FinishedTrial(state=outcome.state, reason=reason, values=[], measurements=outcome.measurements,
                         attrs={**outcome.attrs, "infeasible_reason": reason})


def rerun_attrs(outcome: FinishedTrial, *, why: str, start_time: Any, previous_runs: Any,
                attempts: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The attributes of a trial stopped to run again: its outcome (``outcome.attrs``), the mark, and
    this run appended to ``previous_runs`` (the stored list, kept as it is)."""
    attrs = dict(outcome.attrs)
    run: dict[str, Any] = {"start_time": start_time, "end_time": attrs["end_time"], "state": attrs["state"],
                           "why": why, "steps": len(outcome.measurements), "attempts": list(attempts)}
    if "final_measurement" in attrs and outcome.state is TrialState.SUCCEEDED:
        run["final_measurement"] = attrs["final_measurement"]
    if outcome.reason:
        run["infeasible_reason"] = outcome.reason
    runs = [r for r in previous_runs if isinstance(r, dict)] if isinstance(previous_runs, list) else []
    attrs.update({RERUN_ATTR: attrs["end_time"], "requeued": True, PREVIOUS_RUNS_ATTR: [*runs, run]})
    return attrs


def last_stop(attrs: Mapping[str, Any]) -> str:
    """Why the run a trial waits to run again after was stopped ('' if none is known)."""
    runs = attrs.get(PREVIOUS_RUNS_ATTR)
    if isinstance(runs, list) and runs and isinstance(runs[-1], dict):
        return str(runs[-1].get("why") or "")
    return ""
