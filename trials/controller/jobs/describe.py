"""The job as Vertex's REST JSON (camelCase, enum names, int64 as strings) and as a table/CSV."""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from trials import protocol
from trials.controller.policy.exits import waits_to_rerun
from trials.controller.policy.rerun import PREVIOUS_RUNS_ATTR, last_stop
from trials.job_meta import JobMeta
from trials.printable import printable
from trials.protocol import format_value
from trials.records import LIVE_METRICS_ATTR, JobState, TrialState, live_attr, measurement_to_dict, stored_measurements
from trials.timefmt import duration

STATE_NAMES = {s.value for s in TrialState}
ENDED_STATES = (TrialState.SUCCEEDED, TrialState.INFEASIBLE)
REASON_CHARS = 80  # describe's table: a longer reason ends in "…" (its whole text: --format csv, the report)


def _measurement(d: Mapping[str, Any], order: Sequence[str]) -> dict[str, Any]:
    out: dict[str, Any] = {"stepCount": str(int(d["step"]))}
    if d.get("elapsed_s") is not None:
        out["elapsedDuration"] = duration(float(d["elapsed_s"]))
    metrics = d.get("metrics", {})
    keys = [k for k in order if k in metrics]
    if len(keys) < len(metrics):  # (sorted only when needed: describe converts every step of every trial)
        keys += sorted(k for k in metrics if k not in order)
    out["metrics"] = [{"metricId": k, "value": _num(metrics[k])} for k in keys]
    return out


def _num(v: Any) -> Any:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return v
    if math.isfinite(f):
        return f
    # JSON has no NaN: protobuf's JSON mapping writes the strings "NaN", "Infinity", "-Infinity"
    return "NaN" if math.isnan(f) else ("Infinity" if f > 0 else "-Infinity")


def trial_state(t: Any) -> str:
    """The Vertex trial state of an Optuna FrozenTrial (duck-typed: no optuna import here)."""
    state = t.user_attrs.get("state")
    if state in STATE_NAMES:
        return str(state)
    name = getattr(t.state, "name", str(t.state))
    states = {"COMPLETE": TrialState.SUCCEEDED, "FAIL": TrialState.INFEASIBLE, "RUNNING": TrialState.ACTIVE,
              "PRUNED": TrialState.SUCCEEDED}
    return states.get(name, TrialState.REQUESTED)


def shown(t: Any) -> bool:
    """Whether a trial is part of the job's view: it started, now or before it was sent back to the
    queue (a trial only queued is not shown)."""
    return (trial_state(t) != TrialState.REQUESTED or bool(t.user_attrs.get("start_time"))
            or bool(t.user_attrs.get("requeued")))


def trial_to_rest(t: Any, params: Mapping[str, Any], metric_ids: Sequence[str], *,
                  steps: bool = True) -> dict[str, Any]:
    """One Trial message (v1 field names only); ``steps=False`` leaves its measurements as stored
    (for ``rows``, which only counts them: converting every step is most of a big job's describe)."""
    attrs = t.user_attrs
    state = trial_state(t)
    out: dict[str, Any] = {"id": str(t.number + 1), "state": state}
    out["parameters"] = [{"parameterId": k, "value": v} for k, v in params.items()]
    if state == TrialState.REQUESTED:  # not run yet (or, in an older journal, sent back to the queue)
        return out
    # its recorded measurements once it ended (a run again keeps its steps: shown live from the storage)
    measurements = attrs.get("measurements") if state in ENDED_STATES else None
    if measurements is None and (t.intermediate_values or live_attr(attrs, LIVE_METRICS_ATTR)):
        measurements = [measurement_to_dict(m) for m in
                        stored_measurements(t.intermediate_values, attrs, metric_ids[0])]
    if attrs.get("final_measurement") and state == TrialState.SUCCEEDED:
        out["finalMeasurement"] = _measurement(attrs["final_measurement"], metric_ids)
    if measurements:
        out["measurements"] = [_measurement(m, metric_ids) for m in measurements] if steps else measurements
    if attrs.get("start_time"):
        out["startTime"] = attrs["start_time"]
    if attrs.get("end_time") and state in ENDED_STATES:
        out["endTime"] = attrs["end_time"]
    if state == TrialState.INFEASIBLE and attrs.get("infeasible_reason"):
        out["infeasibleReason"] = attrs["infeasible_reason"]
    return out


def job_to_rest(job_id: str, meta: JobMeta, trials: Sequence[Any],
                params_of: Any, metric_ids: Sequence[str], *, steps: bool = True,
                entry: Callable[[Any], Any] | None = None, update_time: str | None = None) -> dict[str, Any]:
    """The HyperparameterTuningJob resource, exactly (it parses strictly as the v1 type);
    ``params_of(trial) -> {parameterId: value}``. Local details are in ``local_details``;
    ``steps=False``: measurements as stored, for ``rows`` (see ``trial_to_rest``); ``entry(trial)``:
    what stands for each shown trial instead of its ``trial_to_rest`` (its text, already encoded)."""
    spec = dict(meta.spec or {})
    project = meta.project_number or protocol.DEFAULT_PROJECT_NUMBER
    parent = meta.api_parent or f"projects/{project}/locations/local"  # (`trials serve` keeps its path's)
    out: dict[str, Any] = {"name": f"{parent}/hyperparameterTuningJobs/{job_id}"}
    out["displayName"] = spec.get("displayName") or job_id
    for key in ("studySpec", "maxTrialCount", "parallelTrialCount", "maxFailedTrialCount", "trialJobSpec", "labels",
                "encryptionSpec"):
        if key in spec:
            out[key] = spec[key]
    out["maxTrialCount"] = len(trials) if trials else spec.get("maxTrialCount", 1)
    if entry is None:
        out["trials"] = [trial_to_rest(t, params_of(t), metric_ids, steps=steps) for t in trials if shown(t)]
    else:
        out["trials"] = [entry(t) for t in trials if shown(t)]
    out["state"] = (meta.state or JobState.QUEUED).value
    for value, name in ((meta.create_time, "createTime"), (meta.start_time, "startTime"),
                        (meta.end_time, "endTime"), (update_time, "updateTime")):
        if value:
            out[name] = value
    if meta.error:
        out["error"] = meta.error
    return out


LOCAL_FIELDS = ("error_detail", "attempts", "stopped_early", "stop_reason", "injected_restarts",
                "metrics_warning", "unknown_tags", "trial_dir", "worker", PREVIOUS_RUNS_ATTR)


def local_details(trials: Sequence[Any]) -> dict[str, dict[str, Any]]:
    """Per trial id, what only the local run knows: replica attempts and exit statuses, early
    stops and why, metric warnings, the trial folder, the worker (``describe --format
    local-json``)."""
    out = {}
    for t in trials:
        a = t.user_attrs
        extra = {k: a[k] for k in LOCAL_FIELDS if a.get(k)}
        if waits_to_rerun(a):  # stopped by its job before its end: it runs again on resume
            extra.update(stopped_early=True, stop_reason=last_stop(a), runs_again=True)
        if extra:
            out[str(t.number + 1)] = extra
    return out


def rows(rest: Mapping[str, Any], metric_ids: Sequence[str], *,
         local: Mapping[str, Mapping[str, Any]] | None = None,
         exact: bool = False, reason_chars: int | None = REASON_CHARS) -> tuple[list[str], list[list[str]]]:
    """A table of trials: id, state, final metrics, parameters, steps, stopped early, reason.

    Args:
        rest: the REST job (``job_to_rest``, its steps converted or not: they are only counted).
        metric_ids: the spec's metrics, in order.
        local: per trial id, the local details (``local_details``: ``stopped_early``,
            ``stop_reason``); none by default.
        exact: numbers as they are (``repr``: a CSV loses nothing, reasons whole); else rounded for
            reading.
        reason_chars: rounded for reading, the reason is cut to this many characters at a word,
            ending in "…" (``None``: whole, for a page that wraps it).

    The reason is the infeasible reason (with the exception, when the local view has it), or why
    the trial was stopped early.
    """
    local = local or {}
    fmt = format_value if exact else display
    trials = rest.get("trials", [])
    seen: dict[str, None] = {}  # (a dict: ordered, and a set's speed: 10,000 trials' parameters)
    for t in trials:
        for p in t.get("parameters", []):
            seen.setdefault(p["parameterId"])
    param_ids = list(seen)
    header = ["trial", "state", *metric_ids, *param_ids, "steps", "stopped early", "reason"]
    body: list[list[str]] = []
    append = body.append
    for t in trials:
        final_m = t.get("finalMeasurement")
        final = {m["metricId"]: m["value"] for m in final_m.get("metrics", [])} if final_m else {}
        params = {p["parameterId"]: p["value"] for p in t.get("parameters", [])}
        mine = local.get(t["id"], {})
        reason = str(t.get("infeasibleReason") or mine.get("stop_reason") or "")
        if mine.get("error_detail"):  # Vertex's text says only "Error": the exception says why
            reason = f"{_exit_words(reason)}{mine['error_detail'][0]}"
        append([
            t["id"], t["state"], *["" if (v := final.get(m)) is None else fmt(v) for m in metric_ids],
            *["" if (v := params.get(p)) is None else fmt(v) for p in param_ids],
            str(len(t.get("measurements", []))),
            "yes" if mine.get("stopped_early") else "",
            reason if exact or reason_chars is None else cut_words(reason, reason_chars),
        ])
    return header, body


def trial_rows(trials: Sequence[Any], params_of: Callable[[Any], Mapping[str, Any]], metric_ids: Sequence[str], *,
          exact: bool = False, reason_chars: int | None = REASON_CHARS) -> tuple[list[str], list[list[str]]]:
    """``rows`` of the job's shown trials, straight from the trials: what
    ``rows(job_to_rest(..., steps=False), metric_ids, local=local_details(trials), exact=exact,
    reason_chars=reason_chars)`` gives, without making the REST job and the local details first
    (most of a 10,000-trial describe)."""
    fmt = format_value if exact else display
    seen: dict[str, None] = {}
    cells = []
    for t in trials:
        if not shown(t):
            continue
        a = t.user_attrs
        state = trial_state(t)
        params = params_of(t)
        for k in params:
            seen.setdefault(k)
        final: Mapping[str, Any] = {}
        n_steps = 0
        infeasible = None
        if state != TrialState.REQUESTED:  # (trial_to_rest: a queued trial shows nothing of an old run)
            measurements = a.get("measurements") if state in ENDED_STATES else None
            if measurements is None and (t.intermediate_values or live_attr(a, LIVE_METRICS_ATTR)):
                measurements = stored_measurements(t.intermediate_values, a, metric_ids[0])
            n_steps = len(measurements) if measurements else 0
            fm = a.get("final_measurement")
            if fm and state == TrialState.SUCCEEDED:
                final = fm.get("metrics", {})
            if state == TrialState.INFEASIBLE:
                infeasible = a.get("infeasible_reason")
        rerun = waits_to_rerun(a)
        reason = str(infeasible or (last_stop(a) if rerun else a.get("stop_reason")) or "")
        detail = a.get("error_detail")
        if detail:  # Vertex's text says only "Error": the exception says why
            reason = f"{_exit_words(reason)}{detail[0]}"
        cells.append((t, state, params, final, n_steps, reason, rerun or bool(a.get("stopped_early"))))
    param_ids = list(seen)
    header = ["trial", "state", *metric_ids, *param_ids, "steps", "stopped early", "reason"]
    body = [[
        str(t.number + 1), state, *["" if (v := _num(final.get(m))) is None else fmt(v) for m in metric_ids],
        *["" if (v := params.get(p)) is None else fmt(v) for p in param_ids], str(n_steps),
        "yes" if stopped else "", reason if exact or reason_chars is None else cut_words(reason, reason_chars),
    ] for t, state, params, final, n_steps, reason, stopped in cells]
    return header, body


def cut_words(text: str, max_chars: int) -> str:
    """``text`` in at most ``max_chars`` characters: whole, or cut at the last word that fits and
    ending in "…" (mid-word only when a single word is longer than that)."""
    if len(text) <= max_chars:
        return text
    room = max_chars - 1  # for the "…"
    head = text[:room]
    if not text[room].isspace():  # the last word would be cut: leave it out
        space = max(head.rfind(" "), 0)
        head = head[:space] if space else head
    return head.rstrip(" ,;:") + "…"


def _exit_words(reason: str) -> str:
    """``exit 1: `` from Vertex's ``… exited with a non-zero status of 1. …`` (else nothing)."""
    marker = "non-zero status of "
    if marker not in reason:
        return ""
    return "exit " + reason.split(marker, 1)[1].split(".", 1)[0] + ": "


def display(v: Any, digits: int = 6) -> str:
    """A number rounded for reading (``digits`` significant digits, integers whole); text as is."""
    if isinstance(v, float) and math.isfinite(v) and not (v.is_integer() and abs(v) < 2**53):
        return f"{v:.{digits}g}"
    return format_value(v)


def format_table(header: Sequence[str], body: Sequence[Sequence[str]]) -> str:
    header = _printable_row(header)  # a trainer's reason or tag: never raw to a terminal
    body = [_printable_row(row) for row in body]
    widths = ([max(map(len, col)) for col in zip(header, *body, strict=False)] if body
              else [len(h) for h in header])
    n = len(widths)
    line = "  ".join(f"{{:<{w}}}" if w else "{}" for w in widths).format  # each cell left-justified to w
    return "\n".join(line(*row[:n]).rstrip() if len(row) >= n else
                     "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=False)).rstrip()
                     for row in (header, *body))


def _printable_row(row: Sequence[Any]) -> list[str]:
    return [c if type(c) is str and c.isprintable() else printable(str(c)) for c in row]


def format_csv(header: Sequence[str], body: Sequence[Sequence[str]]) -> str:
    buf = io.StringIO()
    writer = csv.writer(buf)
    writer.writerow([printable(str(c)) for c in header])
    writer.writerows([printable(str(c)) for c in row] for row in body)
    return buf.getvalue()
