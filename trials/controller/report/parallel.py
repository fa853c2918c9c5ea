"""The report's parallel-coordinates plot: one axis per parameter (spec scale) and one for the metric.

Pure axis logic (``Axis``: where a value sits, which tick labels fit without overlapping) and one
drawing function. A conditional parameter a trial did not have sits in a separate "inactive" slot
below its axis, never as "None"; lines are coloured by the metric's value (a linear colour bar with
value ticks), the better the darker, and the best are drawn on top; stopped-early trials are grey and
dashed, as their value is not a result.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from trials.controller.report.data import PlotTrial, Value
from trials.controller.report.scale import nice_limits
from trials.controller.report.svg import TrialLines
from trials.records import TrialState

INACTIVE_Y = -0.12
MIN_LABEL_GAP = 0.07  # of the axis height: closer tick labels would overlap
STOPPED_COLOR = "#9a9a9a"
MAX_LABEL_CHARS = 14


def short(v: Any) -> str:
    """A value as an axis label: 3 significant digits, integers whole, long names cut."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        text = str(v)
        return text if len(text) <= MAX_LABEL_CHARS else text[:MAX_LABEL_CHARS - 1] + "…"
    if isinstance(v, int) or float(v).is_integer() and abs(v) < 1e6:
        return str(int(v))
    return f"{v:.3g}"


@dataclass(frozen=True, slots=True, kw_only=True)
class Axis:
    """One vertical axis: ``kind`` is "log", "linear" or "category"."""

    name: str
    kind: str
    low: float = 0.0
    high: float = 1.0
    categories: tuple[str, ...] = ()
    step: float = 0.0  # a linear axis' tick step (0: about 5 round ticks between its ends)

    def position(self, value: Value | None) -> float | None:
        """Where ``value`` sits, 0 (bottom) to 1 (top); None when absent or not on this axis."""
        if value is None:
            return None
        if self.kind == "category":
            text = short(value)
            if text not in self.categories:
                return None
            n = len(self.categories)
            return 0.5 if n == 1 else self.categories.index(text) / (n - 1)
        try:
            x = float(value)
        except (TypeError, ValueError):
            return None
        lo, hi = self.low, self.high
        if self.kind == "log":
            if x <= 0 or lo <= 0:
                return None
            x, lo, hi = math.log10(x), math.log10(lo), math.log10(hi)
        return 0.5 if hi == lo else (x - lo) / (hi - lo)

    def ticks(self) -> list[tuple[float, str]]:
        """(position, label) pairs, at most one label per ``MIN_LABEL_GAP`` of height."""
        if self.kind == "category":
            n = len(self.categories)
            every = max(1, math.ceil(n * MIN_LABEL_GAP))
            picked = [i for i in range(n) if i % every == 0 or i == n - 1]
            return [(self.position(self.categories[i]) or 0.0, self.categories[i]) for i in picked]
        if self.kind == "log":
            values = [self.low, self.high]
            lo, hi = math.floor(math.log10(self.low)), math.ceil(math.log10(self.high))
            values += [10.0 ** k for k in range(lo, hi + 1) if self.low < 10.0 ** k < self.high]
        elif self.step:
            n = round((self.high - self.low) / self.step)
            values = [self.low, self.high, *(round(self.low + i * self.step, 12) for i in range(1, n))]
        else:
            values = [self.low, self.high, *nice_ticks(self.low, self.high)]
        out: list[tuple[float, str]] = []
        for v in values:  # the ends first: they always show
            y = self.position(v)
            if y is not None and all(abs(y - o) >= MIN_LABEL_GAP for o, _ in out):
                out.append((y, short(v)))
        return sorted(out)


def nice_ticks(low: float, high: float, n: int = 5) -> list[float]:
    """About ``n`` round values strictly inside (low, high)."""
    if not high > low:
        return []
    raw = (high - low) / n
    mag = 10.0 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    first = math.ceil(low / step) * step
    return [round(first + i * step, 12) for i in range(n + 1) if low < first + i * step < high]


def param_axes(parameters: Sequence[Any], trials: Sequence[PlotTrial]) -> list[Axis]:
    """One axis per parameter id (spec order); ``parameters`` are spec ``ParameterSpec``s."""
    by_id: dict[str, list[Any]] = {}
    for p in parameters:
        by_id.setdefault(p.parameter_id, []).append(p)
    out = []
    for pid, specs in by_id.items():
        kinds = {p.type.name for p in specs}
        if kinds & {"CATEGORICAL", "DISCRETE"}:
            cats: list[str] = []
            for p in specs:
                cats += [short(v) for v in p.values if short(v) not in cats]
            for t in trials:  # a value outside the spec (an older spec) still gets a place
                if pid in t.params and short(t.params[pid]) not in cats:
                    cats.append(short(t.params[pid]))
            out.append(Axis(name=pid, kind="category", categories=tuple(cats)))
            continue
        log = all(p.scale_type.name == "UNIT_LOG_SCALE" for p in specs)
        low = min(float(p.min_value) for p in specs)
        high = max(float(p.max_value) for p in specs)
        out.append(Axis(name=pid, kind="log" if log and low > 0 else "linear", low=low, high=high))
    return out


def metric_axis(name: str, trials: Sequence[PlotTrial]) -> Axis:
    """The metric's axis over the real results (a stopped-early value is not one)."""
    values = [t.values[0] for t in trials if t.result and t.values[0] is not None]
    if not values:
        return Axis(name=name, kind="linear")
    low, high, step = nice_limits(min(values), max(values))  # round ends, a little past the results
    low, high = math.floor(low / step + 1e-9) * step, math.ceil(high / step - 1e-9) * step  # ends on ticks
    return Axis(name=name, kind="linear", low=round(low, 12), high=round(high, 12), step=step)


def draw_parallel(ax: Any, trials: Sequence[PlotTrial], axes: Sequence[Axis], *,
                  metric: str, maximize: bool) -> None:
    """Draw on matplotlib Axes ``ax``: the parameter axes, then the metric's, lines coloured by it."""
    import matplotlib as mpl
    from matplotlib.lines import Line2D

    axes = [*axes, metric_axis(metric, trials)]
    shown = [t for t in trials if t.state == TrialState.SUCCEEDED and t.values and t.values[0] is not None]
    results = sorted((t for t in shown if t.result), key=lambda t: (t.values[0] or 0.0) * (1 if maximize else -1))
    base = mpl.colormaps["YlOrRd"]
    cmap = mpl.colors.ListedColormap(base([0.2 + 0.8 * i / 255 for i in range(256)]))
    if not maximize:  # the better, the darker: low values dark
        cmap = cmap.reversed()
    values = [t.values[0] or 0.0 for t in results]
    low, high = min(values, default=0.0), max(values, default=1.0)
    norm = mpl.colors.Normalize(low, high) if high > low else mpl.colors.Normalize(low - 0.5, high + 0.5)
    xs = list(range(len(axes)))

    def ys(t: PlotTrial) -> list[float]:
        out = [a.position(t.params.get(a.name)) for a in axes[:-1]]
        out.append(axes[-1].position(t.values[0]) if t.result else None)
        return [INACTIVE_Y if y is None else y for y in out]

    stopped = TrialLines()
    for t in shown:
        if not t.result:
            stopped.add(t.trial_id, xs, ys(t), color=STOPPED_COLOR, linestyle="--", linewidth=0.9, alpha=0.7)
    stopped.draw(ax, zorder=1, gid="stopped-lines")
    lines = TrialLines()
    n = len(results)
    for rank, t in enumerate(results):  # worst first: the best end up on top, darkest
        best = rank == n - 1
        lines.add(t.trial_id, xs, ys(t), color=cmap(norm(t.values[0] or 0.0)), linewidth=3.0 if best else 1.4,
                  alpha=1.0 if best else 0.85)
    lines.draw(ax, gid="result-lines")
    inactive = set()
    for i, a in enumerate(axes):
        ax.plot([i, i], [0, 1], color="#333333", linewidth=1.0, zorder=1000)
        for y, label in a.ticks():
            ax.plot([i - 0.02, i], [y, y], color="#333333", linewidth=1.0, zorder=1000)
            ax.text(i + 0.04, y, label, fontsize=8, va="center", ha="left", zorder=1001,
                    bbox={"boxstyle": "round,pad=0.15", "fc": "white", "ec": "none", "alpha": 0.8})
        last = i == len(axes) - 1
        if any(ys(t)[i] == INACTIVE_Y for t in shown):
            inactive.add(i)
            ax.text(i + 0.04, INACTIVE_Y, "stopped early" if last else "inactive", fontsize=8,
                    va="center", ha="left", color="#666666", style="italic", zorder=1001,
                    bbox={"boxstyle": "round,pad=0.15", "fc": "white", "ec": "none", "alpha": 0.8})
    ax.set_xticks(xs, [a.name for a in axes], rotation=20 if len(axes) > 6 else 0,
                  ha="right" if len(axes) > 6 else "center")
    ax.set_xlim(-0.3, len(axes) - 0.4)
    ax.set_ylim(INACTIVE_Y - 0.06 if inactive else -0.05, 1.05)
    ax.set_yticks([])
    for side in ("left", "right", "top"):
        ax.spines[side].set_visible(False)
    ax.grid(False)
    if n:  # colour by value: the bar's ticks are values, evenly spaced as on any axis
        bar = ax.figure.colorbar(mpl.cm.ScalarMappable(norm=norm, cmap=cmap), ax=ax, pad=0.02)
        bar.set_label(f"{metric} ({'higher' if maximize else 'lower'} is better: darker)")
    if len(shown) > len(results):
        ax.legend(handles=[Line2D([], [], color=STOPPED_COLOR, linestyle="--",
                                  label="stopped early (not a result)")],
                  loc="upper center", bbox_to_anchor=(0.5, -0.12 if len(axes) <= 6 else -0.2),
                  frameon=False, fontsize="small")

