"""The report's plots, drawn with matplotlib from the job's own records (Vertex trial ids, no Optuna).

Each plot is a function of ``PlotTrial``s. A trial stopped early is always marked as such: its value
is where it was stopped, not a result, so it never counts as a best value. matplotlib is imported
only when a plot is drawn.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import math
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from trials.controller.report.data import PlotTrial, best_so_far, best_trial, pareto_ids
from trials.controller.report.parallel import Axis, draw_parallel
from trials.controller.report.scale import integer_limits, nice_limits, with_strip
from trials.controller.report.svg import TrialLines, trial_marks
from trials.records import TrialState

RESULT_COLOR = "#1f77b4"
BEST_COLOR = "#d62728"
STOPPED_COLOR = "#8c8c8c"
FAILED_COLOR = "#b00000"
FAILED_STRIP = 0.1  # of the history's height: the strip at its bottom where failed trials are marked
MIN_IMPORTANCE_TRIALS = 20  # fewer completed trials: the importances are a rough estimate, and say so
PLOT_STEMS = ("optimization_history", "intermediate_values", "parallel_coordinate", "param_importances",
              "pareto_front")
Importances = Callable[[], tuple[Mapping[str, float], str]]  # (values, caveat for the caption)
Draw = Callable[[Any], tuple[str, str]]


def matplotlib_available() -> bool:
    try:
        return importlib.util.find_spec("matplotlib") is not None
    except ValueError:  # a module set to None in sys.modules
        return False


class Skip(Exception):
    """A plot that does not apply to this job; the message says why."""


def _integer_x(ax: Any, values: Sequence[int]) -> None:
    """Whole-number ticks; limits half a unit (or more) past the ends, so no mark sits on the frame."""
    from matplotlib.ticker import MaxNLocator

    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    if values:
        ax.set_xlim(*integer_limits(min(values), max(values)))


def _round_axis(axis: Any, limits: tuple[float, float, float]) -> None:
    """Limits on round values with ticks every step (``scale.nice_limits``) on a matplotlib axis."""
    from matplotlib.ticker import MultipleLocator

    low, high, step = limits
    axis.set_major_locator(MultipleLocator(step))
    if axis.axis_name == "y":
        axis.axes.set_ylim(low, high)
    else:
        axis.axes.set_xlim(low, high)


def _goal(metric: str, maximize: bool) -> str:
    return f"{metric} ({'higher' if maximize else 'lower'} is better)"


def points(ax: Any, trials: Sequence[PlotTrial], x: Callable[[PlotTrial], Any], y: Callable[[PlotTrial], Any],
           fmt: str, *, label: str, color: Any, mfc: str | None = None, markersize: float = 6.0,
           markeredgewidth: float = 1.0, **style: Any) -> None:
    """One mark per trial (``fmt`` ``"o"`` or ``"x"``; ``mfc="none"``: hollow), linked to its trial
    for the page's hover (``svg.trial_marks``: one collection)."""
    trial_marks(ax, [t.trial_id for t in trials], [x(t) for t in trials], [y(t) for t in trials], fmt,
                color=color, hollow=mfc == "none", size=markersize, edge_width=markeredgewidth, label=label,
                **style)
    ax.autoscale_view()


def legend_below(ax: Any, **kw: Any) -> None:
    """The legend under the axes, where it hides no trial: matplotlib's ``loc="best"`` tries every
    place against every artist, seconds of a 1,000-trial report."""
    ax.legend(fontsize="small", loc="upper center", bbox_to_anchor=(0.5, -0.12), ncols=2, frameon=False, **kw)


def history(ax: Any, trials: Sequence[PlotTrial], metric: str, maximize: bool, index: int = 0) -> None:
    """Final value per trial id; stopped-early trials hollow, failed ones as crosses in a strip at
    the bottom (inside the frame: they have no value); the best so far runs to the last trial."""
    from matplotlib.patches import Rectangle

    done = [t for t in trials if t.result]
    stopped = [t for t in trials if t.state == TrialState.SUCCEEDED and t.stopped and t.values
               and t.values[index] is not None]
    failed = [t for t in trials if t.state == TrialState.INFEASIBLE]
    points(ax, done, lambda t: t.trial_id, lambda t: t.values[index], "o", color=RESULT_COLOR,
           label="completed trial")
    points(ax, stopped, lambda t: t.trial_id, lambda t: t.values[index], "o", mfc="none",
           color=STOPPED_COLOR, label="stopped early (value when stopped, not a result)")
    line = best_so_far(trials, maximize=maximize, index=index)
    last = max(t.trial_id for t in trials)
    if line:  # the best so far holds until the last trial, whatever the trials after it did
        line = [*line, (last, line[-1][1])] if line[-1][0] < last else line
        ax.step([i for i, _ in line], [v for _, v in line], where="post", color=BEST_COLOR,
                alpha=0.8, label="best so far", gid="best-so-far")
    values = [v for t in done + stopped if (v := t.values[index]) is not None]
    if values:
        low, high = min(values), max(values)
        high += 0.05 * (high - low)  # room above the best for its label
        _round_axis(ax.yaxis, with_strip(low, high, strip=FAILED_STRIP * 1.5) if failed else nice_limits(low, high))
    if failed and values:  # no value tick in the strip: it says "failed" there instead
        bottom, top = ax.get_ylim()
        strip_top = bottom + FAILED_STRIP * (top - bottom)
        ticks = [y for y in ax.get_yticks() if strip_top < y <= top]
        ax.set_yticks([bottom + FAILED_STRIP / 2 * (top - bottom), *ticks],
                      ["failed", *(ax.yaxis.get_major_formatter().format_ticks(ticks))])
        ax.get_yticklabels()[0].set_color(FAILED_COLOR)
    if failed:  # a shaded strip at the bottom, inside the frame, the crosses in its middle
        ax.add_patch(Rectangle((0, 0), 1, FAILED_STRIP, transform=ax.transAxes, color="#fbeaea", zorder=0,
                               linewidth=0, gid="failed-strip"))
        points(ax, failed, lambda t: t.trial_id, lambda t: FAILED_STRIP / 2, "x", color=FAILED_COLOR,
               transform=ax.get_xaxis_transform(), markersize=8, markeredgewidth=1.6,
               label="failed or infeasible (no value)")
    best = best_trial(trials, maximize=maximize) if index == 0 else None
    if best is not None:
        ax.annotate(f"best: trial {best.trial_id}", (best.trial_id, best.values[0]),
                    xytext=(6, 6), textcoords="offset points", fontsize=9, color=BEST_COLOR)
    _integer_x(ax, [t.trial_id for t in trials])
    ax.set_xlabel("trial id")
    ax.set_ylabel(_goal(metric, maximize))
    legend_below(ax)


def overlapping(ends: Sequence[tuple[int, float]], tolerance: float) -> list[tuple[int, float, int]]:
    """(step, top value, count) for each group of ends at one step whose marks overlap (values within
    ``tolerance`` of the next): where marks cover each other, the plot says how many there are."""
    by_step: dict[int, list[float]] = {}
    for step, value in ends:
        by_step.setdefault(step, []).append(value)
    out = []
    for step, values in sorted(by_step.items()):
        group: list[float] = []
        for v in sorted(values) + [math.inf]:
            if group and v - group[-1] > tolerance:
                if len(group) > 1:
                    out.append((step, group[-1], len(group)))
                group = []
            group.append(v)
    return out


def _ends_counted(ax: Any, ends: Sequence[tuple[int, float]], what: str, color: str) -> None:
    """"N stopped" beside each pile of overlapping end marks (after the axes' limits are set)."""
    bottom, top = ax.get_ylim()
    for step, value, n in overlapping(ends, 0.025 * (top - bottom)):
        ax.annotate(f"{n} {what}", (step, value), xytext=(7, 5), textcoords="offset points", fontsize=8,
                    color=color, zorder=5, bbox={"boxstyle": "round,pad=0.15", "fc": "white", "ec": "none",
                                                 "alpha": 0.85})


def curves(ax: Any, trials: Sequence[PlotTrial], metric: str, maximize: bool) -> None:
    """The primary metric per step: colour by trial id (a colour bar, not a legend entry per trial).
    How a curve ends shows how its trial ended: solid, it ran to its end; dashed to a hollow circle,
    it was stopped early there; dotted to a red cross, it failed there; faint, it is still running."""
    import matplotlib as mpl
    from matplotlib.lines import Line2D

    drawn = [t for t in trials if t.curve]
    if not drawn:
        raise Skip("no trial reported an intermediate value")
    ids = [t.trial_id for t in drawn]
    norm = mpl.colors.Normalize(min(ids), max(ids) if max(ids) > min(ids) else min(ids) + 1)
    cmap = mpl.colormaps["viridis"]
    best = best_trial(trials, maximize=maximize)
    stops: list[tuple[int, float]] = []  # where the stopped and the failed trials ended: one artist for each kind
    fails: list[tuple[int, float]] = []
    running = False
    lines = TrialLines()
    lone: list[tuple[int, int, float, Any, float]] = []  # (id, step, value, colour, alpha): a curve of one point
    for t in drawn:
        steps, values = [s for s, _ in t.curve], [v for _, v in t.curve]
        is_best = best is not None and t.trial_id == best.trial_id
        failed = t.state == TrialState.INFEASIBLE
        live = t.state not in (TrialState.SUCCEEDED, TrialState.INFEASIBLE)
        running = running or live
        style = "--" if t.stopped else ":" if failed else "-"
        color, alpha = cmap(norm(t.trial_id)), 1.0 if is_best else 0.45 if live else 0.8
        if len(steps) == 1 and not (t.stopped or failed):  # a lone point needs a mark to show
            lone.append((t.trial_id, steps[0], values[0], color, alpha))
        else:  # (the best on top of the others)
            lines.add(t.trial_id, steps, values, color=color, linestyle=style,
                      linewidth=2.8 if is_best else 1.6 if failed else 1.2, alpha=alpha, zorder=1 if is_best else 0)
        if t.stopped:
            stops.append((steps[-1], values[-1]))
        elif failed:
            fails.append((steps[-1], values[-1]))
        if is_best:
            ax.annotate(f"best: trial {t.trial_id}", (steps[-1], values[-1]), xytext=(6, 0),
                        textcoords="offset points", fontsize=9, va="center")
    lines.draw(ax, gid="curves")
    if lone:
        trial_marks(ax, [i for i, *_ in lone], [s for _, s, *_ in lone], [v for _, _, v, *_ in lone], "o",
                    colors=[(*c[:3], a) for *_, c, a in lone], gid="single-step-curves")
    stop_mark: dict[str, Any] = {"marker": "o", "markersize": 7, "markerfacecolor": "none",
                                 "markeredgecolor": "#444444", "markeredgewidth": 1.3}
    fail_mark: dict[str, Any] = {"marker": "x", "markersize": 8, "markeredgecolor": FAILED_COLOR,
                                 "markeredgewidth": 2.0}
    for ends, mark, gid in ((stops, stop_mark, "stopped-ends"), (fails, fail_mark, "failed-ends")):
        if ends:
            ax.plot([s for s, _ in ends], [v for _, v in ends], linestyle="none", zorder=4, gid=gid, **mark)
    all_values = [v for t in drawn for _, v in t.curve]
    _round_axis(ax.yaxis, nice_limits(min(all_values), max(all_values)))
    _ends_counted(ax, stops, "stopped", "#444444")
    _ends_counted(ax, fails, "failed", FAILED_COLOR)
    _integer_x(ax, [s for t in drawn for s, _ in t.curve])
    bar = ax.figure.colorbar(mpl.cm.ScalarMappable(norm=norm, cmap=cmap), ax=ax, pad=0.02)
    bar.set_label("trial id")
    bar.ax.yaxis.set_major_locator(mpl.ticker.MaxNLocator(integer=True))
    handles = [Line2D([], [], color="#444444", label="ran to its end")]
    if stops:
        handles.append(Line2D([], [], color="#444444", linestyle="--", label="stopped early (○: where)",
                              **stop_mark))
    if fails:
        handles.append(Line2D([], [], color="#444444", linestyle=":", linewidth=1.6,
                              label="failed (×: its last report)", **fail_mark))
    if running:
        handles.append(Line2D([], [], color="#444444", alpha=0.45, label="still running"))
    legend_below(ax, handles=handles)
    ax.set_xlabel("step")
    ax.set_ylabel(_goal(metric, maximize))


def importances_bar(ax: Any, values: Mapping[str, float], metric: str) -> None:
    if not values:
        raise Skip("Optuna found no parameter shared by every completed trial")
    items = sorted(values.items(), key=lambda kv: kv[1])
    ax.barh([k for k, _ in items], [v for _, v in items], color=RESULT_COLOR, height=0.6)
    for i, (_, v) in enumerate(items):
        ax.text(v, i, f" {v:.2f}", va="center", fontsize=9)
    ax.set_xlabel(f"importance for {metric} (Optuna's fANOVA over the completed trials)")
    _, high, step = nice_limits(0.0, max(1e-9, max(v for _, v in items)) * 1.12, pad=0.0)  # room for the labels
    _round_axis(ax.xaxis, (0.0, high, step))


def few_trials_caveat(n_done: int) -> str:
    """The warning an importance plot over fewer than ``MIN_IMPORTANCE_TRIALS`` trials carries."""
    if n_done >= MIN_IMPORTANCE_TRIALS:
        return ""
    return (f"only {n_done} completed trials (fewer than {MIN_IMPORTANCE_TRIALS}): "
            f"a rough estimate that may change with more trials")


def pareto(ax: Any, trials: Sequence[PlotTrial], metric_ids: Sequence[str], maximize: Sequence[bool]) -> None:
    """The first two metrics; the Pareto-optimal trials (on every metric) red and labelled."""
    front = pareto_ids(trials, maximize)
    done = [t for t in trials if t.result]
    stopped = [t for t in trials if t.state == TrialState.SUCCEEDED and t.stopped and len(t.values) >= 2
               and None not in t.values[:2]]
    others = [t for t in done if t.trial_id not in front]
    best = sorted((t for t in done if t.trial_id in front), key=lambda t: t.values[0] or 0.0)
    points(ax, others, lambda t: t.values[0], lambda t: t.values[1], "o", color=RESULT_COLOR, alpha=0.7,
           label="completed trial")
    points(ax, stopped, lambda t: t.values[0], lambda t: t.values[1], "o", mfc="none",
           color=STOPPED_COLOR, label="stopped early (not a result)")
    if best:
        ax.plot([t.values[0] for t in best], [t.values[1] for t in best], "-", color=BEST_COLOR, zorder=1)
        points(ax, best, lambda t: t.values[0], lambda t: t.values[1], "o", color=BEST_COLOR,
               label="Pareto-optimal trial", zorder=2)
        for t in best:
            ax.annotate(str(t.trial_id), (t.values[0], t.values[1]), xytext=(5, 5),
                        textcoords="offset points", fontsize=9, color=BEST_COLOR)
    shown = done + stopped
    if shown:
        for i, axis in enumerate((ax.xaxis, ax.yaxis)):
            values = [t.values[i] or 0.0 for t in shown]
            _round_axis(axis, nice_limits(min(values), max(values)))
    ax.set_xlabel(_goal(metric_ids[0], maximize[0]))
    ax.set_ylabel(_goal(metric_ids[1], maximize[1]))
    legend_below(ax)


@dataclass(frozen=True, slots=True, kw_only=True)
class Figure:
    """One drawn plot: its PNG file, the same as SVG text (for the page), and what it shows."""

    stem: str
    title: str
    png_path: str
    svg: str
    caption: str


def _plots(trials: Sequence[PlotTrial], metric_ids: Sequence[str], maximize: Sequence[bool],
           axes: Sequence[Axis], importances: Importances) -> list[tuple[str, str, Draw]]:
    """(file stem, title, draw(ax) -> (heading, caption)) for every plot this job gets."""
    primary, mx = metric_ids[0], maximize[0]
    multi = len(metric_ids) > 1
    n_done = sum(1 for t in trials if t.result)
    n_stopped = sum(1 for t in trials if t.stopped)
    n_failed = sum(1 for t in trials if t.state == TrialState.INFEASIBLE)
    n_failed_curves = sum(1 for t in trials if t.state == TrialState.INFEASIBLE and t.curve)
    stopped = (f" Hollow markers: the {n_stopped} trial{'s' if n_stopped != 1 else ''} stopped early, "
               f"at the value where {'they were' if n_stopped != 1 else 'it was'} stopped (not a result)."
               if n_stopped else "")

    def importance(ax: Any) -> tuple[str, str]:
        if n_done < 2 or len(axes) < 2:
            raise Skip(f"needs at least 2 completed trials and more than 1 parameter; this job has "
                       f"{n_done} completed trial{'s' if n_done != 1 else ''} (not stopped early) and "
                       f"{len(axes)} parameter{'s' if len(axes) != 1 else ''}")
        try:
            values, caveat = importances()
        except (ValueError, RuntimeError) as err:  # Optuna's "cannot evaluate this study" errors
            raise Skip(f"Optuna could not compute them: {err}") from err
        importances_bar(ax, values, primary)
        few = few_trials_caveat(n_done)
        if few:  # beside the bars, not only in the caption
            ax.text(0.5, -0.13, few[0].upper() + few[1:], transform=ax.transAxes, ha="center", va="top",
                    fontsize=10, color=FAILED_COLOR, style="italic", gid="importance-caveat",
                    bbox={"boxstyle": "round,pad=0.3", "fc": "#fff4f4", "ec": FAILED_COLOR, "lw": 0.8})
        return (f"Parameter importances for {primary}" + (" (primary metric)" if multi else ""),
                "How much of the variation of the result each parameter explains (sums to 1), over the "
                "trials that ran to their end; a conditional parameter that some trials lack is left out."
                + (f" Caution: {few}." if few else "") + caveat)

    def hist(ax: Any) -> tuple[str, str]:
        history(ax, trials, primary, mx)
        failed = (f" Crosses in the shaded strip at the bottom: the {n_failed} failed or infeasible "
                  f"trial{'s' if n_failed != 1 else ''} (no value)." if n_failed else "")
        return (f"Optimization history: {primary}",
                f"Each trial's final {primary} by trial id; the red line is the best result so far, up "
                f"to the last trial."
                + stopped + failed)

    def curve(ax: Any) -> tuple[str, str]:
        curves(ax, trials, primary, mx)
        return (f"Learning curves: {primary} per step",
                f"Every reported {primary}, one line per trial, coloured by trial id."
                + (" Dashed lines ending in a circle: trials stopped early, where they stopped."
                   if n_stopped else "")
                + (" Dotted lines ending in a red cross: trials that failed, at their last report."
                   if n_failed_curves else ""))

    def parallel(ax: Any) -> tuple[str, str]:
        draw_parallel(ax, trials, axes, metric=primary, maximize=mx)
        return (f"Parallel coordinates (colour: {primary})",
                f"One line per trial through its parameter values, coloured by its {primary} (the colour "
                "bar's scale): the darker, the better; the best is thickest. 'inactive': a conditional "
                "parameter the trial did not have."
                + (" Grey dashed: stopped early." if n_stopped else ""))

    def front(ax: Any) -> tuple[str, str]:
        pareto(ax, trials, metric_ids, maximize)
        suffix = "" if len(metric_ids) == 2 else f" (first 2 of {len(metric_ids)} metrics)"
        return (f"Pareto front: {metric_ids[0]} vs {metric_ids[1]}{suffix}",
                "Red, labelled by trial id: the trials no other trial beats on every metric." + stopped)

    out: list[tuple[str, str, Draw]] = [
        ("optimization_history", "Optimization history", hist),
        ("intermediate_values", "Learning curves (intermediate values)", curve),
        ("parallel_coordinate", "Parallel coordinates", parallel),
        ("param_importances", "Parameter importances", importance),
    ]
    if multi:
        out.append(("pareto_front", "Pareto front", front))
    return out


# Plots a second process draws, when the machine has a second CPU (about half a 1,000-trial report's
# drawing: the learning curves' thousands of lines, and the importances, whose first computation
# imports scikit-learn); the rest are drawn here meanwhile. False: all here, one after another.
IN_CHILD = ("intermediate_values", "param_importances")
PARALLEL = True


def draw_plots(trials: Sequence[PlotTrial], *, metric_ids: Sequence[str], maximize: Sequence[bool],
               axes: Sequence[Axis], importances: Importances,
               out_dir: str) -> tuple[list[Figure], list[tuple[str, str]]]:
    """Write one PNG per plot into ``out_dir``: (figures drawn, [(title, reason skipped)])."""
    if not any(t.state == TrialState.SUCCEEDED for t in trials):
        return [], [("all plots", "no trial has succeeded yet: there is nothing to plot")]
    import threading

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot  # noqa: F401 - (imported before a fork: the child does not import it again)

    plots = _plots(trials, metric_ids, maximize, axes, importances)
    forkable = PARALLEL and _cpus() > 1 and threading.active_count() == 1  # (a fork copies no other thread)
    apart = [p for p in plots if p[0] in IN_CHILD] if forkable else []
    child = _fork_drawing(apart, axes, out_dir) if apart else None
    try:
        results = {stem: _draw_one(stem, title, draw, axes, out_dir) for stem, title, draw in plots
                   if (stem, title, draw) not in apart}
    except BaseException:
        if child is not None:  # (this report fails: its child's plots are not wanted)
            _end_child(child)
        raise
    drawn = _child_results(child) if child is not None else None
    for stem, title, draw in apart:  # (the child's, or drawn here if it failed: the same error, if any, raised here)
        results[stem] = drawn[stem] if drawn is not None and stem in drawn else _draw_one(stem, title, draw, axes,
                                                                                         out_dir)
    done = [r for stem, _, _ in plots if isinstance(r := results[stem], Figure)]
    skipped = [r for stem, _, _ in plots if isinstance(r := results[stem], tuple)]
    return done, skipped


def _draw_one(stem: str, title: str, draw: Draw, axes: Sequence[Axis], out_dir: str) -> Figure | tuple[str, str]:
    """One plot: its PNG written, its SVG text kept; or (title, why it was skipped)."""
    import matplotlib.pyplot as plt

    # SVG text as text (smaller, searchable); ids salted per plot: several share one page
    with plt.rc_context({"svg.fonttype": "none", "svg.hashsalt": stem}):
        width = max(9.0, 1.4 * (len(axes) + 1)) if stem == "parallel_coordinate" else 9.0
        fig, ax = plt.subplots(figsize=(width, 5.5), layout="constrained")
        ax.grid(True, color="#e5e5e5")
        ax.set_axisbelow(True)
        try:
            heading, caption = draw(ax)
        except Skip as why:
            plt.close(fig)
            return title, str(why)
        ax.set_title(heading)
        path = os.path.join(out_dir, stem + ".png")
        fig.savefig(path, dpi=100)
        fig.set_layout_engine("none")  # laid out once (measuring every label): the SVG keeps the PNG's layout
        svg = io.StringIO()
        fig.savefig(svg, format="svg", metadata={"Date": None})  # (the same plot, the same text)
        plt.close(fig)
    return Figure(stem=stem, title=title, png_path=path, svg=svg.getvalue(), caption=caption)


def _cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _fork_drawing(plots: Sequence[tuple[str, str, Draw]], axes: Sequence[Axis], out_dir: str
                  ) -> tuple[int, int] | None:
    """Draw ``plots`` in a forked child (this process has matplotlib loaded and runs no other thread):
    its (pid, read end of the pipe its pickled results come through), or None (not forked). The child
    dies with this process (``PR_SET_PDEATHSIG``): a report killed half way leaves no drawing child."""
    import pickle

    from trials.controller.process.deathsig import die_with_parent, libc_prctl

    prctl, parent = libc_prctl(), os.getpid()
    try:
        read_fd, write_fd = os.pipe()
        pid = os.fork()
    except OSError:
        return None
    if pid:
        os.close(write_fd)
        return pid, read_fd
    status = 1
    try:  # the child: never returns into the caller
        if prctl is not None:  # killed with the parent (whose caller may wait for our stderr to close)
            die_with_parent(parent, prctl)()
        os.close(read_fd)
        null = os.open(os.devnull, os.O_RDWR)
        os.dup2(null, 0)
        os.dup2(null, 1)  # (what it prints is not the command's output; its warnings still reach stderr)
        out: dict[str, Figure | tuple[str, str]] = {}
        for stem, title, draw in plots:
            try:
                out[stem] = _draw_one(stem, title, draw, axes, out_dir)
            except Exception:  # noqa: BLE001 - drawn again in the parent, which says why
                continue
        with os.fdopen(write_fd, "wb") as pipe:
            pipe.write(pickle.dumps(out, protocol=pickle.HIGHEST_PROTOCOL))
        status = 0
    finally:
        os._exit(status)


def _end_child(child: tuple[int, int]) -> None:
    import signal

    pid, read_fd = child
    with contextlib.suppress(OSError):
        os.kill(pid, signal.SIGKILL)
    with contextlib.suppress(OSError):
        os.close(read_fd)
    with contextlib.suppress(OSError):
        os.waitpid(pid, 0)


def _child_results(child: tuple[int, int]) -> dict[str, Figure | tuple[str, str]] | None:
    """What the child drew (None if it failed: the parent draws its plots)."""
    import pickle

    pid, read_fd = child
    with os.fdopen(read_fd, "rb") as pipe:
        data = pipe.read()
    _, status = os.waitpid(pid, 0)
    if status != 0 or not data:
        return None
    try:
        out: dict[str, Figure | tuple[str, str]] = pickle.loads(data)
    except Exception:  # noqa: BLE001 - a torn answer: drawn here instead
        return None
    return out
