"""Pure decisions of the job loop: classify a replica's exit, pick the next action, word the errors."""

from __future__ import annotations

import difflib
import enum
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from trials import protocol
from trials.controller.policy import crash
from trials.records import Measurement, TrialState
from trials.spec import JobSpec, MetricSpec
from trials.timefmt import duration

ALLOW_MORE = "--max-failed-trial-count N allows N failed trials"
KEEP_GOING = "--keep-going runs every trial"
SAME_REASON_TRIALS = 3  # the first trials infeasible for one reason, none succeeded: the job stops (ours)
JOB_FAILED_CODE = 3  # google.rpc.Code INVALID_ARGUMENT: what Vertex reports for user-code failures
MAX_RESTARTS_PER_REPLICA = 5  # Vertex: "up to 5 restarts per worker"
PERMANENT_EXIT_CODES = frozenset({protocol.EXIT_ERROR, protocol.EXIT_USAGE})
TRANSIENT_SIGNAL_CODES = frozenset({6, 134, 11, 139})  # SIGABRT, SIGSEGV (custom containers: 128+n)
MAX_JOB_RETRIES = 3  # Vertex: such an exit "may be transient": the whole job is retried up to 3 times


class ExitKind(str, enum.Enum):
    SUCCEEDED = "succeeded"
    PERMANENT = "permanent"  # user code error: the trial fails
    OOM = "oom"  # killed for memory: the trial fails
    RESTARTABLE = "restartable"  # restart the replica (same trial id, same env)
    RETRY_JOB = "retry_job"  # a transient exit: the trial's whole CustomJob runs again


@dataclass(frozen=True, slots=True, kw_only=True)
class ExitClassification:
    kind: ExitKind
    status: int
    message: str | None = None  # Vertex-style error text when the trial fails
    detail: tuple[str, ...] = ()  # the exception and the traceback's last lines (local view)
    budget: str = ""  # which retry budget a restart uses: "worker restart 2 of 5", "job retry 1 of 3"


def classify_exit(
    status: int,
    *,
    replica: str,
    oom_killed: bool,
    restarts_so_far: int,
    stderr_tail: Sequence[str] = (),
    max_restarts: int = MAX_RESTARTS_PER_REPLICA,
    job_retries_so_far: int = 0,
    max_job_retries: int = MAX_JOB_RETRIES,
) -> ExitClassification:
    """Decide what a replica's exit means. ``status`` is Vertex-style (128+signal for signals).

    Two budgets, as Vertex's lifecycle page describes them: a non-permanent exit restarts that
    worker, up to ``max_restarts`` times, "after that, the whole job is retried up to 3 times"; a
    transient exit (SIGABRT 6/134, SIGSEGV 11/139) retries the trial's whole CustomJob at once, from
    the same ``max_job_retries``. ``restarts_so_far`` counts the worker's restarts since the job's
    last retry (each retry starts every worker afresh). Exits 1 and 2 (user code) are permanent.
    An exit the loop asked for (the trial was stopping) is never classified: the loop records it
    (``loop.running.decide_exit``).
    """
    if status == 0:
        return ExitClassification(kind=ExitKind.SUCCEEDED, status=0)
    if oom_killed:
        return ExitClassification(kind=ExitKind.OOM, status=status, message=oom_message(replica, status))
    detail = tuple(crash.summary(stderr_tail))
    if status in PERMANENT_EXIT_CODES:
        return ExitClassification(kind=ExitKind.PERMANENT, status=status,
                            message=exit_message(replica, status), detail=detail)
    if status in TRANSIENT_SIGNAL_CODES:
        if job_retries_so_far >= max_job_retries:
            return ExitClassification(
                kind=ExitKind.PERMANENT, status=status, message=exit_message(replica, status),
                detail=(*detail, f"(the trial's CustomJob was retried {job_retries_so_far} times, "
                                 f"the limit for transient exits, and failed again)"))
        return ExitClassification(kind=ExitKind.RETRY_JOB, status=status, detail=detail,
                            budget=f"job retry {job_retries_so_far + 1} of {max_job_retries}")
    if restarts_so_far >= max_restarts:
        if job_retries_so_far < max_job_retries:  # the worker's restarts are used up: the job again
            return ExitClassification(
                kind=ExitKind.RETRY_JOB, status=status, detail=detail,
                budget=f"job retry {job_retries_so_far + 1} of {max_job_retries}, after "
                       f"{restarts_so_far} worker restarts")
        return ExitClassification(
            kind=ExitKind.PERMANENT, status=status, message=exit_message(replica, status),
            detail=(*detail, f"(restarted {restarts_so_far} times, the limit of restarts per "
                             f"worker, after the trial's CustomJob was retried {job_retries_so_far} "
                             f"times, and failed again)"))
    return ExitClassification(kind=ExitKind.RESTARTABLE, status=status, detail=detail,
                        budget=f"worker restart {restarts_so_far + 1} of {max_restarts}")


def exit_message(replica: str, status: int) -> str:
    """Vertex's words for a user-code failure: ``The replica workerpool0-0 exited with a non-zero
    status of 1. Termination reason: Error.`` (the container's termination reason; the exception
    goes to the local view: ``crash.summary``)."""
    return (f"The replica {replica} exited with a non-zero status of {status}. "
            f"Termination reason: Error.")


def oom_message(replica: str, status: int) -> str:
    return f"The replica {replica} ran out of memory and exited with a non-zero status of {status}."


def timeout_message(timeout_s: float) -> str:
    return (
        f"The trial exceeded its maximum running time of {duration(timeout_s)} "
        f"(trialJobSpec.scheduling.timeout) and was stopped."
    )


def missing_metric_message(metric_ids: Iterable[str], reported: Iterable[str]) -> str:
    missing = ", ".join(metric_ids)
    got = sorted(reported)
    seen = ", ".join(got) if got else "no metrics at all"
    return (
        f"The trial finished without reporting the objective metric {missing}; it reported {seen}. "
        f"Report it with hypertune's report_hyperparameter_tuning_metric("
        f"hyperparameter_metric_tag=...)."
    )


def missing_metric_advice(trial_id: str, metric_ids: Sequence[str], reported: Iterable[str], *,
                          source: str | None) -> str:
    """What to do when a trial ended without the spec's metric: said once, at the first such trial.

    ``source`` is where its metrics came from: ``"metrics.jsonl"`` (a ``trials.main`` trainer),
    ``"hypertune"`` (a plain trainer) or None (it reported nothing): the advice fits the trainer.
    """
    got = sorted(reported)
    missing = [m for m in metric_ids if m not in got] or list(metric_ids)
    first = missing[0]
    seen = f"it reported {', '.join(got)}" if got else "it reported no metric at all"
    others = [t for t in got if t not in metric_ids]
    close = difflib.get_close_matches(first, others, n=1, cutoff=0.5) or (others if len(others) == 1 else [])
    runtime = (f"ctx.report(step, {first}=value)" if first.isidentifier()
               else f"ctx.report(step, {{{first!r}: value}})")
    plain = (f"hypertune.HyperTune().report_hyperparameter_tuning_metric(hyperparameter_metric_tag={first!r}, "
             f"metric_value=value, global_step=step)")
    how = {"metrics.jsonl": f"report it with {runtime}", "hypertune": f"report it with {plain}"}.get(
        source or "", f"report it with {runtime} in a trials.main trainer, or {plain} in a plain one")
    meant = f", or make the spec's metric {close[0]!r} if that is the one you meant" if close else ""
    return (f"trial {trial_id} ended without the spec's metric {', '.join(missing)} ({seen}), so it "
            f"counts as infeasible, and so will every trial that does the same: {how}{meant}.")


NONFINITE_FIX = ("Make the trainer report a finite value (a run that diverges: narrow the search space, "
                 "or report a finite penalty).")


def nonfinite_message(metric_id: str, value: float) -> str:
    return f"The objective metric {metric_id} has the non-finite final value {value!r}."


# --- Final measurement ----------------------------------------------------------------------------
def select_final(
    measurements: Sequence[Measurement], metrics: Sequence[MetricSpec], *, best: bool
) -> Measurement | None:
    """The final measurement: LAST (unset) or BEST by the first metric's goal.

    Only measurements carrying every objective metric qualify.
    """
    ids = [m.metric_id for m in metrics]
    usable = [m for m in measurements if all(i in m.metrics for i in ids)]
    if not usable:
        return None
    if not best:
        return usable[-1]
    primary = metrics[0]

    def key(m: Measurement) -> float:
        v = m.metrics[primary.metric_id]
        if math.isnan(v):
            return -math.inf
        return v if primary.maximize else -v

    return max(usable, key=key)


# --- Job-level failure rule -----------------------------------------------------------------------
def job_failure(
    job: JobSpec, *, n_failed: int, n_succeeded: int, first_failure: str | None
) -> str | None:
    """Return the job's error message when failed trials end the job, else None.

    ``maxFailedTrialCount`` > 0: the job fails when that many trials failed. 0 (unset): as on Vertex,
    the job fails when the first trial fails; after a success it fails when failures reach 3 and
    outnumber successes (Vertex says only "too many in count or ratio"; this rule is ours).
    """
    limit = job.max_failed_trial_count
    if limit > 0:
        if n_failed >= limit:
            return (
                f"{n_failed} trials failed, reaching maxFailedTrialCount={limit}; the job stopped "
                f"({ALLOW_MORE}). First failure: {first_failure}"
            )
        return None
    if n_failed and n_succeeded == 0:
        return (f"The first trial failed, so the job stopped (maxFailedTrialCount unset; "
                f"{ALLOW_MORE}). {first_failure}")
    if n_failed >= 3 and n_failed > n_succeeded:
        return (
            f"{n_failed} trials failed against {n_succeeded} that succeeded (maxFailedTrialCount "
            f"unset; {ALLOW_MORE}); the job stopped. First failure: {first_failure}"
        )
    return None


def infeasible_by_end(attrs: Mapping[int, Mapping[str, Any]]) -> list[tuple[str, str]]:
    """(trial id, reason) of the trials infeasible without failing (not failed, not stopped because the
    job failed or was cancelled), in the order they ended, from ``{number: attributes}``
    (``INFEASIBLE_ATTRS``) (pure)."""
    rows = sorted((str(a.get("end_time") or ""), number, str(a["infeasible_reason"])) for number, a in attrs.items()
                  if a.get("state") == TrialState.INFEASIBLE and not a.get("failed") and not a.get("stopped_by_job")
                  and a.get("infeasible_reason") and not waits_to_rerun(a))
    return [(str(number + 1), reason) for _, number, reason in rows]


RERUN_ATTR = "rerun_due"  # a trial stopped to run again: the end time of the run that was stopped


def waits_to_rerun(attrs: Mapping[str, Any]) -> bool:
    """Whether a trial is shown as its stopped run ended, waiting to run again (``policy.rerun``): its
    mark is its end time, which the next run's end replaces (pure)."""
    due = attrs.get(RERUN_ATTR)
    return due is not None and due == attrs.get("end_time") and attrs.get("state") in (
        TrialState.SUCCEEDED, TrialState.INFEASIBLE)


INFEASIBLE_ATTRS = ("state", "failed", "infeasible_reason", "stopped_by_job", "end_time", RERUN_ATTR)


def same_reason_failure(job: JobSpec, *, infeasible: Sequence[tuple[str, str]], n_succeeded: int,
                        n_left: int, keep_going: bool, n: int = SAME_REASON_TRIALS) -> str | None:
    """Return the job's error message when its first ``n`` finished trials were infeasible for one
    reason and none succeeded, else None (our rule: running the others would only repeat it).

    ``infeasible``: (trial id, reason) of each trial infeasible without failing (it ended without the
    objective metric, or with a non-finite value), in the order they finished; ``n_left``: trials not
    started yet (none: there is nothing to save, the job ends as Vertex would end it). Only when
    ``maxFailedTrialCount`` is unset (0): a job that sets it gets Vertex's rule alone
    (:func:`job_failure`). ``keep_going`` (``--keep-going``) turns the rule off.
    """
    if keep_going or job.max_failed_trial_count > 0 or n_succeeded or not n_left or len(infeasible) < n:
        return None
    first = infeasible[:n]
    reason = first[0][1]
    if any(r != reason for _, r in first):
        return None
    fix = f" {NONFINITE_FIX}" if reason.startswith("The objective metric ") and "non-finite" in reason else ""
    ids = ", ".join(t for t, _ in first)
    return (f"The first {n} trials were infeasible for the same reason and none succeeded, so the job "
            f"stopped (maxFailedTrialCount unset; {KEEP_GOING}). Trials {ids}: {reason}{fix}")


def trial_outcome(
    measurements: Sequence[Measurement],
    metrics: Sequence[MetricSpec],
    *,
    best: bool,
    failure: str | None,
    reported_tags: Iterable[str],
) -> tuple[str, str | None, list[float], Measurement | None]:
    """(Vertex trial state, infeasible reason, objective values, final measurement) of a finished trial."""
    if failure:
        return TrialState.INFEASIBLE, failure, [], None
    final = select_final(measurements, metrics, best=best)
    ids = [m.metric_id for m in metrics]
    if final is None:
        return TrialState.INFEASIBLE, missing_metric_message(ids, reported_tags), [], None
    values = [final.metrics[i] for i in ids]
    for metric_id, v in zip(ids, values, strict=False):
        if not math.isfinite(v):
            return TrialState.INFEASIBLE, nonfinite_message(metric_id, v), [], final
    return TrialState.SUCCEEDED, None, values, final


def missing_steps(steps: Sequence[int]) -> int:
    """How many steps a trial's sequence lacks, judged by its usual stride (the most common gap).

    ``[1, 2, 3, 5]`` lacks 1; ``[10, 20, 30, 35]`` (a last, shorter step) lacks none.
    """
    ordered = sorted(set(steps))
    gaps = [b - a for a, b in zip(ordered, ordered[1:], strict=False)]
    if not gaps:
        return 0
    stride = max(set(gaps), key=lambda g: (gaps.count(g), -g))
    return sum(g // stride - 1 for g in gaps if g > stride)
