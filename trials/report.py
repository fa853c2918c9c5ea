"""The job report: a self-contained HTML page and Optuna's matplotlib plots in ``<job>/report/``."""

from __future__ import annotations

import base64
import html
import importlib.util
import os
import re
import warnings
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

from trials import describe

REPORT_DIR = "report"
INDEX_FILE = "index.html"
TOP_N = 10
MAX_LEGEND_TRIALS = 20
STOPPED_COLOR = "#d62728"


@dataclass(frozen=True, slots=True, kw_only=True)
class Report:
    """What ``write_report`` wrote: the page, its PNGs, the plots it skipped and why, the top table."""

    index_html: str
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
    done = [t for t in rest.get("trials", [])
            if t["state"] == "SUCCEEDED" and all(m in final_values(t) for m in metric_ids)]
    signs = [1.0 if mx else -1.0 for mx in maximize]

    def key(t):  # larger is better, per metric
        v = final_values(t)
        return [s * v[m] for s, m in zip(signs, metric_ids)]

    done.sort(key=lambda t: (-key(t)[0], int(t["id"])))
    if len(metric_ids) == 1:
        return f"Top {min(n, len(done))} trials by {metric_ids[0]}", done[:n]
    keys = {t["id"]: key(t) for t in done}
    front = [t for t in done if not any(_dominates(keys[o["id"]], keys[t["id"]]) for o in done)]
    return f"Pareto-optimal trials ({', '.join(metric_ids)})", front[:n]


def _dominates(a: Sequence[float], b: Sequence[float]) -> bool:
    return all(x >= y for x, y in zip(a, b)) and any(x > y for x, y in zip(a, b))


def table(rest: Mapping[str, Any], trials: Sequence[Mapping[str, Any]],
          metric_ids: Sequence[str]) -> tuple[list[str], list[list[str]]]:
    """``describe.rows`` for a subset of trials, without the reason column when it is empty."""
    header, body = describe.rows({**rest, "trials": list(trials)}, metric_ids)
    local = rest.get("trialsLocal", {})
    for row in body:
        if local.get(row[0], {}).get("stopped_early"):
            row[1] += " (stopped early)"
    if body and all(not row[-1] for row in body):
        header, body = header[:-1], [row[:-1] for row in body]
    return header, body


def counts(rest: Mapping[str, Any]) -> dict[str, int]:
    local = rest.get("trialsLocal", {})
    states = [t["state"] for t in rest.get("trials", [])]
    return {
        "succeeded": states.count("SUCCEEDED"),
        "stopped early": sum(1 for t in rest.get("trials", [])
                             if local.get(t["id"], {}).get("stopped_early")),
        "infeasible": states.count("INFEASIBLE"),
        "active": states.count("ACTIVE") + states.count("STOPPING"),
        "not run": int(rest.get("maxTrialCount", 0)) - len(states),
    }


# --- plots ---------------------------------------------------------------------------------------
def matplotlib_available() -> bool:
    try:
        return importlib.util.find_spec("matplotlib") is not None
    except ValueError:  # a module set to None in sys.modules
        return False


def _plots(study: Any, metric_ids: Sequence[str], maximize: Sequence[bool],
           rest: Mapping[str, Any]) -> list[tuple[str, str, Callable]]:
    """(file stem, title, draw) for every plot this job gets; ``draw()`` returns Axes or raises."""
    from optuna.visualization import matplotlib as ovm  # the plots are Optuna's visualization

    multi = len(metric_ids) > 1
    primary = metric_ids[0]
    target = (lambda t: t.values[0]) if multi else None
    local = rest.get("trialsLocal", {})
    stopped = {int(k) - 1 for k, v in local.items() if v.get("stopped_early")}
    n_params = len({p["parameterId"] for t in rest.get("trials", []) for p in t.get("parameters", [])})
    n_done = sum(1 for t in rest.get("trials", []) if t["state"] == "SUCCEEDED")

    def history():
        ax = ovm.plot_optimization_history(study, target=target, target_name=primary)
        _shift_trial_numbers(ax)
        ax.set_xlabel("trial id")
        _title(ax, f"Optimization history: {primary}")
        return ax

    def curves():
        if not any(t.get("measurements") for t in rest.get("trials", [])):
            raise _Skip("no trial reported an intermediate value")
        ax = ovm.plot_intermediate_values(study)
        _mark_stopped(ax, stopped)
        ax.set_ylabel(primary)
        ax.set_xlabel("step")
        _title(ax, f"Learning curves: {primary} per step" + (" (X = stopped early)" if stopped else ""))
        return ax

    def parallel():
        ax = ovm.plot_parallel_coordinate(study, target=target, target_name=primary)
        _title(ax, f"Parallel coordinates (color: {primary})", y=1.05)  # above the tick labels
        return ax

    def importances():
        if n_done < 2 or n_params < 2:
            raise _Skip(f"needs at least 2 succeeded trials and more than 1 parameter; this job has "
                        f"{n_done} succeeded trial{'s' if n_done != 1 else ''} and {n_params} "
                        f"parameter{'s' if n_params != 1 else ''}")
        if not multi:  # the evaluator reads the study's direction
            ax = ovm.plot_param_importances(study, target_name=primary)
        else:  # only the primary metric, oriented so that lower is better as the evaluator assumes
            sign = -1.0 if maximize[0] else 1.0
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", UserWarning)
                ax = ovm.plot_param_importances(study, target=lambda t: sign * t.values[0],
                                                target_name=primary)
        _title(ax, f"Parameter importances for {primary}" + (" (primary metric)" if multi else ""))
        ax.set_xlabel("importance (Optuna's default evaluator)")
        return ax

    def pareto():
        if len(metric_ids) > 3:
            raise _Skip(f"Optuna draws Pareto fronts of 2 or 3 metrics; this job has {len(metric_ids)}")
        ax = ovm.plot_pareto_front(study, target_names=list(metric_ids))
        _title(ax, f"Pareto front: {' vs '.join(metric_ids)}")
        names = {"Trial": "trial", "Best Trial": "Pareto-optimal trial"}
        handles, labels = ax.get_legend_handles_labels()
        if handles:
            ax.legend(handles, [names.get(lb, lb) for lb in labels])
        return ax

    out = [("optimization_history", "Optimization history", history),
           ("intermediate_values", "Learning curves (intermediate values)", curves),
           ("parallel_coordinate", "Parallel coordinates", parallel),
           ("param_importances", "Parameter importances", importances)]
    if multi:
        out.append(("pareto_front", "Pareto front", pareto))
    return out


def _title(ax: Any, text: str, *, y: float | None = None) -> None:
    for loc in ("left", "right"):  # Optuna puts some titles on the left
        ax.set_title("", loc=loc)
    ax.set_title(text, y=y)


class _Skip(Exception):
    """A plot that does not apply to this job; the message says why."""


def _shift_trial_numbers(ax: Any) -> None:
    # Optuna numbers trials from 0; Vertex trial ids (and every table here) start at 1.
    for line in ax.get_lines():
        line.set_xdata([x + 1 for x in line.get_xdata()])
    for coll in ax.collections:
        offsets = coll.get_offsets()
        if len(offsets):
            offsets[:, 0] += 1
            coll.set_offsets(offsets)
    ax.relim()
    ax.autoscale_view()


def _mark_stopped(ax: Any, stopped: set[int]) -> None:
    from matplotlib.lines import Line2D

    lines = []
    for line in ax.get_lines():
        m = re.fullmatch(r"Trial(\d+)", str(line.get_label()))
        if not m:
            continue
        number = int(m.group(1))
        line.set_label(f"trial {number + 1}" + (" (stopped)" if number in stopped else ""))
        if number in stopped:
            line.set_linestyle("--")
            xs, ys = line.get_xdata(), line.get_ydata()
            if len(xs):
                ax.plot([xs[-1]], [ys[-1]], marker="X", markersize=10, color=STOPPED_COLOR,
                        linestyle="none", zorder=5)
        lines.append(line)
    handles: list[Any] = lines if len(lines) <= MAX_LEGEND_TRIALS else []
    if stopped:
        handles.append(Line2D([], [], marker="X", markersize=9, color=STOPPED_COLOR, linestyle="--",
                              label="stopped early"))
    legend = ax.get_legend()
    if legend is not None:
        legend.remove()
    if handles:
        ax.legend(handles=handles, bbox_to_anchor=(1.02, 1), loc="upper left", borderaxespad=0.0,
                  fontsize="small")


def draw_plots(study: Any, metric_ids: Sequence[str], maximize: Sequence[bool],
               rest: Mapping[str, Any], out_dir: str) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """Write one PNG per plot into ``out_dir``: ([(title, path)], [(title, reason skipped)])."""
    if not any(t["state"] == "SUCCEEDED" for t in rest.get("trials", [])):
        return [], [("all plots", "no trial has succeeded yet: there is nothing to plot")]
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    done, skipped = [], []
    for stem, title, draw in _plots(study, metric_ids, maximize, rest):
        try:
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", message=".* is experimental")  # Optuna's plots
                ax = draw()
        except _Skip as why:
            skipped.append((title, str(why)))
            continue
        except (ValueError, RuntimeError) as err:  # Optuna's "cannot plot this study" errors
            skipped.append((title, f"Optuna could not draw it: {err}"))
            plt.close("all")
            continue
        fig = ax.figure
        fig.set_size_inches(9, 5.5)
        path = os.path.join(out_dir, stem + ".png")
        fig.savefig(path, dpi=100, bbox_inches="tight")
        plt.close(fig)
        done.append((title, path))
    plt.close("all")
    return done, skipped


# --- the page ------------------------------------------------------------------------------------
_CSS = """body{font-family:system-ui,sans-serif;margin:2em auto;max-width:75em;color:#222}
table{border-collapse:collapse;margin:.5em 0 1.5em;font-size:.9em}
td,th{border:1px solid #ccc;padding:.25em .6em;text-align:left;vertical-align:top}
th{background:#f2f2f2}.note{color:#555}.bad{color:#b00}img{max-width:100%;border:1px solid #ddd}
dl{display:grid;grid-template-columns:max-content auto;gap:.2em 1em}dt{font-weight:bold}"""


def _table_html(header: Sequence[str], body: Sequence[Sequence[str]]) -> str:
    head = "".join(f"<th>{html.escape(str(h))}</th>" for h in header)
    rows = "".join("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in row) + "</tr>"
                   for row in body)
    return f"<table><tr>{head}</tr>{rows}</table>"


def render_html(*, job_id: str, rest: Mapping[str, Any], metric_ids: Sequence[str],
                maximize: Sequence[bool], images: Sequence[tuple[str, bytes]],
                skipped: Sequence[tuple[str, str]], plots_note: str | None, job_dir: str,
                sampler: str | None) -> str:
    """The whole page as one string: images are inlined as base64 data URIs."""
    e = html.escape
    n = counts(rest)
    goals = ", ".join(f"{m} ({'maximize' if mx else 'minimize'})" for m, mx in zip(metric_ids, maximize))
    study = rest.get("studySpec", {})
    summary = {
        "state": rest.get("state", ""), "metrics": goals,
        "trials": f"{len(rest.get('trials', []))} of {rest.get('maxTrialCount')} run: "
                  + ", ".join(f"{v} {k}" for k, v in n.items() if v),
        "parallel trials": str(rest.get("parallelTrialCount", 1)),
        "algorithm": f"{study.get('algorithm', 'ALGORITHM_UNSPECIFIED')}"
                     + (f" (Optuna sampler: {sampler})" if sampler else ""),
        "created": rest.get("createTime", ""), "started": rest.get("startTime", ""),
        "ended": rest.get("endTime", ""), "folder": job_dir,
    }
    parts = [f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>trials report: {e(job_id)}"
             f"</title><style>{_CSS}</style></head><body><h1>Tuning job {e(job_id)}</h1><dl>"]
    parts += [f"<dt>{e(k)}</dt><dd>{e(str(v))}</dd>" for k, v in summary.items() if v]
    parts.append("</dl>")
    if rest.get("error"):
        parts.append(f"<p class='bad'>Job error: {e(str(rest['error'].get('message', '')))}</p>")
    title, top = top_trials(rest, metric_ids, maximize)
    if top:
        parts.append(f"<h2>{e(title)}</h2>" + _table_html(*table(rest, top, metric_ids)))
    else:
        parts.append("<h2>No completed trial</h2><p class='bad'>No trial of this job has succeeded "
                     "yet, so there is no best trial and nothing to plot.</p>")
    parts.append("<h2>Plots</h2>")
    if plots_note:
        parts.append(f"<p class='note'>{e(plots_note)}</p>")
    for name, png in images:
        data = base64.b64encode(png).decode("ascii")
        parts.append(f"<h3>{e(name)}</h3><img alt='{e(name)}' src='data:image/png;base64,{data}'>")
    for name, why in skipped:
        parts.append(f"<p class='note'><b>{e(name)}</b>: skipped, {e(why)}.</p>")
    parts.append(_failures_html(rest))
    parts.append(_stopped_html(rest))
    parts.append("<h2>All trials</h2>" + _table_html(*describe.rows(rest, metric_ids)))
    parts.append("</body></html>\n")
    return "".join(parts)


def _failures_html(rest: Mapping[str, Any]) -> str:
    bad = [t for t in rest.get("trials", []) if t["state"] == "INFEASIBLE"]
    if not bad:
        return "<h2>Failures</h2><p>No trial failed or was infeasible.</p>"
    local = rest.get("trialsLocal", {})
    body = [[t["id"], t.get("infeasibleReason", ""), attempts_text(local.get(t["id"], {}).get("attempts"))]
            for t in bad]
    return "<h2>Failures and infeasible trials</h2>" + _table_html(["trial", "reason", "replica exits"], body)


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


# --- effects -------------------------------------------------------------------------------------
def write_report(h: Any, *, out_dir: str | None = None, plots: bool = True) -> Report:
    """Write ``index.html`` and the PNGs for the job behind handle ``h`` (``controller.open_job``).

    Args:
        h: the job handle; its storage is read, never written.
        out_dir: where to write (default ``<job folder>/report``).
        plots: draw the plots (needs matplotlib; without it the page has tables only and says so).

    Returns:
        The paths written, the plots skipped with their reasons, and the top-trials table.
    """
    from trials import controller

    out_dir = out_dir or os.path.join(h.job_dir, REPORT_DIR)
    os.makedirs(out_dir, exist_ok=True)
    rest = controller.describe(h)
    metric_ids = list(h.job.study.metric_ids)
    maximize = [m.maximize for m in h.job.study.metrics]
    for stale in os.listdir(out_dir):  # a plot that no longer applies must not linger
        if stale.endswith(".png"):
            os.remove(os.path.join(out_dir, stale))
    note = None
    drawn: list[tuple[str, str]] = []
    skipped: list[tuple[str, str]] = []
    if not plots:
        note = "Plots were not requested (--no-plots): tables only."
    elif not matplotlib_available():
        note = "matplotlib is not installed, so this report has tables only: pip install 'trials[report]'."
    else:
        drawn, skipped = draw_plots(h.store.study, metric_ids, maximize, rest, out_dir)
    reverse = [p.parameter_id for p in h.job.study.all_parameters() if p.scale_type.name == "UNIT_REVERSE_LOG_SCALE"
               and p.type.name in ("DOUBLE", "INTEGER")]
    if reverse and drawn:
        note = (f"Parameters on UNIT_REVERSE_LOG_SCALE ({', '.join(reverse)}) appear in the plots as "
                f"<name>:reverse_log, the mirrored value min + max - value that Optuna samples.")
    images = []
    for title, path in drawn:
        with open(path, "rb") as f:
            images.append((title, f.read()))
    page = render_html(job_id=h.job_id, rest=rest, metric_ids=metric_ids, maximize=maximize,
                       images=images, skipped=skipped, plots_note=note, job_dir=h.job_dir,
                       sampler=h.store.get_meta("sampler"))
    index = os.path.join(out_dir, INDEX_FILE)
    tmp = index + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(page)
    os.replace(tmp, index)
    title, top = top_trials(rest, metric_ids, maximize)
    header, body = table(rest, top, metric_ids)
    return Report(index_html=index, images=tuple(p for _, p in drawn), skipped=tuple(skipped),
                  top_title=title, top_header=tuple(header), top_rows=tuple(tuple(r) for r in body))
