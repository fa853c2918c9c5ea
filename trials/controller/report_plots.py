"""The report's plots: Optuna's matplotlib visualization of a job, relabelled with Vertex trial ids.

Optuna numbers trials from 0 and knows nothing of early stopping; the plots here show Vertex trial
ids (number + 1) and mark stopped-early trials. matplotlib and ``optuna.visualization`` are
imported only when a plot is drawn.
"""

from __future__ import annotations

import importlib.util
import os
import re
import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any

MAX_LEGEND_TRIALS = 20
STOPPED_COLOR = "#d62728"
PLOT_STEMS = ("optimization_history", "intermediate_values", "parallel_coordinate", "param_importances",
              "pareto_front")


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
        shift_trial_numbers(ax)
        ax.set_xlabel("trial id")
        _title(ax, f"Optimization history: {primary}")
        return ax

    def curves():
        if not any(t.get("measurements") for t in rest.get("trials", [])):
            raise _Skip("no trial reported an intermediate value")
        ax = ovm.plot_intermediate_values(study)
        mark_stopped(ax, stopped)
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


def shift_trial_numbers(ax: Any) -> None:
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


def mark_stopped(ax: Any, stopped: set[int]) -> None:
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
