"""The job report: a self-contained HTML page and Optuna's matplotlib plots in ``<job>/report/``."""

from __future__ import annotations

import html
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from trials import files
from trials.controller.jobs import describe
from trials.controller.policy.ranking import pareto_front, ranked
from trials.controller.report import staged_folder
from trials.controller.report.data import PlotTrial, plot_trials
from trials.controller.report.parallel import param_axes
from trials.controller.report.plots import PLOT_STEMS, Figure, draw_plots, matplotlib_available
from trials.controller.report.svg import CSS as SVG_CSS
from trials.controller.report.svg import inline_svg, tips_script, trial_tips
from trials.errors import ConfigError
from trials.printable import printable
from trials.records import TrialState
from trials.study.choice import suggestions_words

REPORT_DIR = "report"
INDEX_FILE = "index.html"
IMPORTANCES_CACHE = "importances.cache.json"  # in the job folder: the last importances, named by their inputs
TOP_N = 10


@dataclass(frozen=True, slots=True, kw_only=True)
class Report:
    """What ``write_report`` wrote: the page, its PNGs, the plots it skipped and why, the top table."""

    index_html: str
    note: str | None
    images: tuple[str, ...]
    skipped: tuple[tuple[str, str], ...]
    top_title: str
    top_header: tuple[str, ...]
    top_rows: tuple[tuple[str, ...], ...]


# --- pure: which trials, which tables ------------------------------------------------------------
def final_values(trial: Mapping[str, Any]) -> dict[str, float]:
    """``{metricId: value}`` of a REST trial's final measurement (empty when it has none)."""
    out = {}
    for m in trial.get("finalMeasurement", {}).get("metrics", []):
        try:
            out[m["metricId"]] = float(m["value"])
        except (TypeError, ValueError):
            continue
    return out


def top_trials(rest: Mapping[str, Any], metric_ids: Sequence[str], maximize: Sequence[bool],
               *, n: int = TOP_N) -> tuple[str, list[dict[str, Any]]]:
    """(title, trials): the best ``n`` succeeded trials by the metric, or the Pareto front.

    One metric: sorted best first. Several metrics: the non-dominated trials, best primary first.
    """
    local = rest.get("trialsLocal", {})
    done = sorted((t for t in rest.get("trials", [])
                   if t["state"] == TrialState.SUCCEEDED and all(m in final_values(t) for m in metric_ids)),
                  key=lambda t: int(t["id"]))
    # a trial stopped early holds the value where it stopped, not a result: ranked after every trial that
    # ran to its end (as Optuna's TPE ranks pruned trials), never beside them
    stopped = [t for t in done if local.get(t["id"], {}).get("stopped_early")]
    done = [t for t in done if t not in stopped]
    done = ranked(done, lambda t: final_values(t)[metric_ids[0]], maximize=maximize[0])
    if len(metric_ids) == 1:
        top = (done + ranked(stopped, lambda t: final_values(t)[metric_ids[0]], maximize=maximize[0]))[:n]
        after = " (those stopped early after those that ran to their end)" if len(top) > len(done) else ""
        return f"Top {len(top)} trials by {metric_ids[0]}{after}", top
    front = pareto_front(done, lambda t: [final_values(t)[m] for m in metric_ids], maximize)
    return f"Pareto-optimal trials ({', '.join(metric_ids)})", front[:n]


def top_table(rest: Mapping[str, Any], trials: Sequence[Mapping[str, Any]], metric_ids: Sequence[str], *,
          reason_chars: int | None = None) -> tuple[list[str], list[list[str]]]:
    """``describe.rows`` for a subset of trials, without the stopped-early and reason columns when empty;
    the reasons whole (the page wraps them) or cut at a word to ``reason_chars`` (a terminal)."""
    header, body = describe.rows({**rest, "trials": list(trials)}, metric_ids, local=local_view(rest),
                                 reason_chars=reason_chars)
    for column in ("reason", "stopped early"):
        i = header.index(column)
        if all(not row[i] for row in body):
            header, body = header[:i] + header[i + 1:], [row[:i] + row[i + 1:] for row in body]
    return header, body


def counts(rest: Mapping[str, Any]) -> dict[str, int]:
    local = rest.get("trialsLocal", {})
    states = [t["state"] for t in rest.get("trials", [])]
    return {
        "succeeded": states.count(TrialState.SUCCEEDED),
        "stopped early": sum(1 for t in rest.get("trials", [])
                             if local.get(t["id"], {}).get("stopped_early")),
        "infeasible": states.count(TrialState.INFEASIBLE),
        "active": states.count(TrialState.ACTIVE) + states.count(TrialState.STOPPING),
        "not run": int(rest.get("maxTrialCount", 0)) - len(states),
    }


# --- the page ------------------------------------------------------------------------------------
_CSS = """body{font-family:system-ui,sans-serif;margin:2em auto;max-width:75em;color:#222}
table{border-collapse:collapse;margin:.5em 0 1.5em;font-size:.9em}
td,th{border:1px solid #ccc;padding:.25em .6em;text-align:left;vertical-align:top}
th{background:#f2f2f2}.note{color:#555}.bad{color:#b00}td{overflow-wrap:break-word}
td:last-child{overflow-wrap:anywhere}.failures td:last-child{white-space:nowrap}
td pre{white-space:pre-wrap;margin:.3em 0 0;font-size:.9em;color:#444}.failures td:nth-child(2){min-width:30em}
.failures td:nth-child(3){overflow-wrap:anywhere}
dl{display:grid;grid-template-columns:max-content auto;gap:.2em 1em}dt{font-weight:bold}"""


def _text(value: object) -> str:
    """Text for the page: control characters escaped (a trainer's reason may hold them), then HTML."""
    return html.escape(printable(str(value)))


def _table_html(header: Sequence[str], body: Sequence[Sequence[str]]) -> str:
    head = "".join(f"<th>{_text(h)}</th>" for h in header)
    by_trial = bool(header) and header[0] == "trial"  # a row names its trial: linked to the plots
    rows = "".join((f"<tr data-trial='{_text(row[0])}'>" if by_trial else "<tr>")
                   + "".join(f"<td>{_text(c)}</td>" for c in row) + "</tr>" for row in body)
    return f"<table><tr>{head}</tr>{rows}</table>"


def render_html(*, job_id: str, rest: Mapping[str, Any], metric_ids: Sequence[str],
                maximize: Sequence[bool], figures: Sequence[Figure], tips: Mapping[str, str],
                skipped: Sequence[tuple[str, str]], plots_note: str | None, job_dir: str,
                sampler: str | None) -> str:
    """The whole page as one string: the plots inline as SVG, with a tip per trial (``tips``) on hover."""
    e = _text
    n = counts(rest)
    goals = ", ".join(f"{m} ({'maximize' if mx else 'minimize'})" for m, mx in zip(metric_ids, maximize, strict=False))
    study = rest.get("studySpec", {})
    summary = {
        "state": rest.get("state", ""), "metrics": goals,
        "trials": f"{len(rest.get('trials', []))} of {rest.get('maxTrialCount')} run: "
                  + ", ".join(f"{v} {k}" for k, v in n.items() if v),
        "parallel trials": str(rest.get("parallelTrialCount", 1)),
        "algorithm": f"{study.get('algorithm', 'ALGORITHM_UNSPECIFIED')}"
                     + (f" (Optuna sampler: {sampler})" if sampler else ""),
        "suggestions": (suggestions_words(rest.get("suggestionsLocal") or {}, sampler) or "").removeprefix(
            "suggestions: "),
        "created": rest.get("createTime", ""), "started": rest.get("startTime", ""),
        "ended": rest.get("endTime", ""), "folder": job_dir,
    }
    parts = [f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>trials report: {e(job_id)}"
             f"</title><style>{_CSS}\n{SVG_CSS}</style></head><body><h1>Tuning job {e(job_id)}</h1><dl>"]
    parts += [f"<dt>{e(k)}</dt><dd>{e(str(v))}</dd>" for k, v in summary.items() if v]
    parts.append("</dl>")
    if rest.get("error"):
        parts.append(f"<p class='bad'>Job error: {e(str(rest['error'].get('message', '')))}</p>")
    title, top = top_trials(rest, metric_ids, maximize)
    if top:
        parts.append(f"<h2>{e(title)}</h2>" + _table_html(*top_table(rest, top, metric_ids)))
    else:
        parts.append("<h2>No completed trial</h2><p class='bad'>No trial of this job has succeeded "
                     "yet, so there is no best trial and nothing to plot.</p>")
    parts.append("<h2>Plots</h2>")
    if plots_note:
        parts.append(f"<p class='note'>{e(plots_note)}</p>")
    for fig in figures:
        parts.append(f"<h3>{e(fig.title)}</h3><div class='plot' id='{e(fig.stem)}'>{inline_svg(fig.svg)}</div>"
                     f"<p class='note'>{e(fig.caption)}</p>")
    if figures:
        parts.append("<p class='note'>Point at a trial's mark for its values; it is highlighted in every "
                     "plot.</p>" + tips_script(tips))
    for name, why in skipped:
        parts.append(f"<p class='note'><b>{e(name)}</b>: skipped, {e(why)}.</p>")
    parts.append(_failures_html(rest))
    parts.append(_stopped_html(rest))
    parts.append("<h2>All trials</h2>" + _table_html(*describe.rows(rest, metric_ids, local=local_view(rest),
                                                                    reason_chars=None)))
    parts.append("</body></html>\n")
    return "".join(parts)


def _failures_html(rest: Mapping[str, Any]) -> str:
    """Per failed or infeasible trial: what went wrong (the exception and the traceback's last lines,
    when the trainer raised), Vertex's own reason, and the replica exits."""
    bad = [t for t in rest.get("trials", []) if t["state"] == TrialState.INFEASIBLE]
    if not bad:
        return "<h2>Failures</h2><p>No trial failed or was infeasible.</p>"
    local = rest.get("trialsLocal", {})
    rows = []
    for t in bad:
        mine = local.get(t["id"], {})
        detail = [str(line) for line in mine.get("error_detail") or []]
        vertex = str(t.get("infeasibleReason", ""))
        tail = "\n".join(_text(line) for line in detail[1:])  # the traceback's last lines
        what = (f"<b>{_text(detail[0])}</b>" + (f"<pre>{tail}</pre>" if tail else "")) if detail else _text(vertex)
        rows.append(f"<tr data-trial='{_text(t['id'])}'><td>{_text(t['id'])}</td><td>{what}</td>"
                    f"<td>{_text(vertex) if detail else '<i class=note>the same</i>'}</td>"
                    f"<td>{_text(attempts_text(mine.get('attempts')))}</td></tr>")
    head = "".join(f"<th>{h}</th>" for h in ("trial", "what went wrong", "Vertex's reason (infeasibleReason)",
                                             "replica exits"))
    return f"<h2>Failures and infeasible trials</h2><table class='failures'><tr>{head}</tr>{''.join(rows)}</table>"


def attempts_text(attempts: Any) -> str:
    """``workerpool0-0: exit 1`` per recorded replica exit (Vertex-style: 128 + signal)."""
    out = []
    for a in attempts or []:
        status = a.get("exitStatus")
        out.append(f"{a.get('replica', '?')}: exit {status}" + (" (out of memory)" if a.get("oomKilled") else ""))
    return "; ".join(out)


def _stopped_html(rest: Mapping[str, Any]) -> str:
    local = rest.get("trialsLocal", {})
    body = [[k, str(v.get("stop_reason", ""))] for k, v in sorted(local.items(), key=lambda kv: int(kv[0]))
            if v.get("stopped_early")]
    if not body:
        return ""
    return "<h2>Stopped early</h2>" + _table_html(["trial", "why"], body)


# --- effects ---
def _draw(h: Any, trials: Sequence[PlotTrial], metric_ids: Sequence[str], maximize: Sequence[bool],
          out_dir: str) -> tuple[list[Figure], list[tuple[str, str]]]:
    from trials.study.importances import param_importances

    stopped = {t.trial_id - 1 for t in trials if t.stopped}  # Optuna numbers trials from 0
    # read here, not in the importances: those may be computed in a forked child (``draw_plots``),
    # which must not use this process's storage connection (a database's socket is shared by a fork)
    frozen = h.store.frozen_trials()

    def importances() -> tuple[dict[str, float], str]:
        values, n_used, n_complete = param_importances(frozen, directions=maximize,
                                                       leave_out=stopped,
                                                       cache_path=os.path.join(h.job_dir, IMPORTANCES_CACHE))
        return values, importance_caveat(n_used, n_complete)

    axes = param_axes(h.job.study.all_parameters(), trials)
    return draw_plots(trials, metric_ids=metric_ids, maximize=maximize, axes=axes,
                      importances=importances, out_dir=out_dir)


def importance_caveat(n_used: int, n_complete: int) -> str:
    """What the importances were computed over, when not every trial that ran to its end."""
    if n_used >= n_complete:
        return ""
    return (f" Computed over a random sample of {n_used} of the {n_complete} trials that ran to their end "
            f"(the same sample each time), so they are an estimate.")


def local_view(rest: Mapping[str, Any]) -> Mapping[str, Mapping[str, Any]]:
    """Per trial id: the local details (attempts, stopped early, stop reason) beside the REST job."""
    local: Mapping[str, Mapping[str, Any]] = rest.get("trialsLocal", {})
    return local


# --- effects -------------------------------------------------------------------------------------
def report_entry(name: str) -> bool:
    """Whether a file name is one a report writes (its page, its plots, a page being written)."""
    return name == INDEX_FILE or name in {stem + ".png" for stem in PLOT_STEMS} or (
        name.startswith(INDEX_FILE + ".") and name.endswith(".tmp"))


def check_replaceable(out_dir: str) -> None:
    """A folder replaced whole by the new report must hold nothing but an earlier report."""
    if os.path.lexists(out_dir) and not os.path.isdir(out_dir):
        raise ConfigError(f"--out {printable(out_dir)}: expected a folder for the report, got a file")
    try:
        entries = os.listdir(out_dir)
    except FileNotFoundError:
        return
    foreign = sorted(e for e in entries if not report_entry(e))
    if foreign:
        more = f" and {len(foreign) - 3} more" if len(foreign) > 3 else ""
        shown = ", ".join(printable(e) for e in foreign[:3]) + more
        raise ConfigError(f"--out {printable(out_dir)}: expected a new folder or an earlier report (it is "
                          f"replaced whole), got a folder that also holds {shown}")


def write_report(h: Any, *, out_dir: str | None = None, plots: bool = True) -> Report:
    """Write ``index.html`` and the PNGs for the job behind handle ``h`` (``controller.open_job``).

    Args:
        h: the job handle; its storage is read, never written.
        out_dir: where to write (default ``<job folder>/report``): a new folder or an earlier
            report, replaced whole once the new one is written (a killed run changes nothing).
        plots: draw the plots (needs matplotlib; without it the page has tables only and says so).

    Returns:
        The paths written, the plots skipped with their reasons, and the top-trials table.
    """
    from trials.controller.jobs import view as job_view

    out_dir = out_dir or os.path.join(h.job_dir, REPORT_DIR)
    target = os.path.realpath(out_dir)  # a link to a folder: the folder is replaced, not the link
    check_replaceable(target)
    # the report's view: the v1 resource plus the local details beside it
    local = job_view.describe_local(h)
    rest = {**job_view.describe(h), "trialsLocal": local["trials"], "suggestionsLocal": local["suggestions"]}
    metric_ids = list(h.job.study.metric_ids)
    maximize = [m.maximize for m in h.job.study.metrics]
    note = None
    drawn: list[Figure] = []
    skipped: list[tuple[str, str]] = []
    trials = plot_trials(rest, local_view(rest), metric_ids)
    # written beside out_dir and swapped in whole: a killed report leaves the old one (or none)
    with staged_folder.staged(target) as staging:
        if not plots:
            note = "Plots were not requested (--no-plots): tables only."
        elif not matplotlib_available():
            note = "matplotlib is not installed, so this report has tables only: pip install 'trials[report]'"
        else:
            drawn, skipped = _draw(h, trials, metric_ids, maximize, staging)
        page = render_html(job_id=h.job_id, rest=rest, metric_ids=metric_ids, maximize=maximize,
                           figures=drawn, tips=trial_tips(trials, metric_ids, local_view(rest)),
                           skipped=skipped, plots_note=note, job_dir=h.job_dir,
                           sampler=h.store.meta().sampler)
        files.write_text_atomic(os.path.join(staging, INDEX_FILE), page)
    index = os.path.join(out_dir, INDEX_FILE)
    images = tuple(os.path.join(out_dir, os.path.basename(f.png_path)) for f in drawn)
    title, top = top_trials(rest, metric_ids, maximize)
    header, body = top_table(rest, top, metric_ids, reason_chars=describe.REASON_CHARS)  # printed in a terminal
    return Report(index_html=index, note=note, images=images, skipped=tuple(skipped),
                  top_title=title, top_header=tuple(header), top_rows=tuple(tuple(r) for r in body))
