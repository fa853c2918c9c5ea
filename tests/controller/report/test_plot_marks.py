"""The report's plots read from their SVG as geometry: how each kind of trial end is drawn (dash
arrays, marks), where the failed marks and the legends sit against the plot's frame, round axis
limits, the best-so-far line's reach, the parallel coordinates' colour bar and the importance caveat."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

import pytest
from jobkit import fake_job

from trials.cli import main

NS = {"svg": "http://www.w3.org/2000/svg"}
TRACEBACK = ["RuntimeError: loss became NaN at step 4: the learning rate 0.3 is too high, lower it",
             '  File "train.py", line 16, in <module>', "    raise RuntimeError(...)"]
VERTEX = "The replica workerpool0-0 exited with a non-zero status of 1. Termination reason: Error."


def _outcomes() -> list:
    ok = [("ok", [0.9 + 0.01 * i - 0.1 * s for s in range(5)], False) for i in range(6)]  # 1-6; 1 is best
    stopped = [("ok", [0.95], True)] * 3  # trials 7-9: stopped at step 1, the same value
    failed = [("fail", VERTEX, [0.8, 0.7, 0.65], TRACEBACK),  # trial 10: crashed at step 4
              ("fail", "The trial finished without reporting the objective metric loss; it reported acc.")]
    return ok + stopped + failed + [("fail", VERTEX, [0.85, 0.75], TRACEBACK)]  # trial 12, the last: crashed


@pytest.fixture(scope="module")
def page(tmp_path_factory: pytest.TempPathFactory) -> str:
    pytest.importorskip("matplotlib")
    tmp_path = tmp_path_factory.mktemp("marks")
    text = """
display_name: rep
metrics: {loss: minimize}
parameters:
  lr: {type: double, min: 0.001, max: 1.0, scale: log}
  width: {type: discrete, values: [8, 16, 32]}
max_trial_count: 12
"""
    fake_job(tmp_path, text, outcomes=_outcomes())
    assert main(["report", "rep", "--root", str(tmp_path / "jobs")]) == 0
    return (tmp_path / "jobs" / "rep" / "report" / "index.html").read_text()


def _svg(page: str, stem: str) -> ET.Element:
    svg = re.search(rf"<div class='plot' id='{stem}'>(.*?)</div>", page, re.S).group(1)
    return ET.fromstring(svg)


def _by_id(root: ET.Element, gid: str) -> ET.Element:
    found = root.find(f".//*[@id='{gid}']")
    assert found is not None, gid
    return found


def _trial(root: ET.Element, tid: int) -> ET.Element:
    found = root.find(f".//svg:g[@data-trial='{tid}']", NS)
    assert found is not None, tid
    return found


def _points(path: ET.Element) -> list[tuple[float, float]]:
    return [(float(x), float(y)) for x, y in re.findall(r"[ML] ([-\d.]+) ([-\d.]+)", path.get("d", ""))]


def _frame(root: ET.Element, axes: str = "axes_1") -> tuple[float, float, float, float]:
    """(left, top, right, bottom) of an axes' background patch, in SVG pixels (y grows downwards)."""
    xs, ys = zip(*_points(_by_id(_by_id(root, axes), "patch_2" if axes == "axes_1" else "patch_7")
                          .find("svg:path", NS)), strict=True)
    return min(xs), min(ys), max(xs), max(ys)


def _style(el: ET.Element, key: str) -> str | None:
    m = re.search(rf"(?:^|; ){re.escape(key)}: ([^;]+)", el.get("style", ""))
    return m.group(1) if m else None


def _texts(el: ET.Element) -> list[tuple[str, float, float]]:
    return [(t.text or "", float(t.get("x", 0)), float(t.get("y", 0))) for t in el.iter(f"{{{NS['svg']}}}text")]


def _marks(el: ET.Element) -> list[tuple[float, float]]:
    """Where the marks under ``el`` are: each ``<use>``'s place, or (a collection of a few marks, each
    written out whole) each path's centre."""
    uses = [(float(u.get("x")), float(u.get("y"))) for u in el.iter(f"{{{NS['svg']}}}use")]
    if uses:
        return uses
    out = []
    for path in el.iter(f"{{{NS['svg']}}}path"):
        xs, ys = zip(*[(float(x), float(y)) for x, y in re.findall(r"([-\d.]+) ([-\d.]+)", path.get("d", ""))],
                     strict=True)
        out.append(((min(xs) + max(xs)) / 2, (min(ys) + max(ys)) / 2))
    return out


def test_a_failed_curve_is_dotted_to_a_cross_unlike_a_stopped_or_finished_one(page: str) -> None:
    svg = _svg(page, "intermediate_values")
    dashes = {tid: _style(_trial(svg, tid).find("svg:path", NS), "stroke-dasharray") for tid in (1, 10, 12)}
    assert dashes[1] is None  # ran to its end: solid
    assert dashes[10] == dashes[12] and dashes[10] is not None
    stopped = _by_id(svg, "stopped-ends")
    failed = _by_id(svg, "failed-ends")
    assert len(_marks(failed)) == 2 and len(_marks(stopped)) == 3
    # a failed trial's cross sits at its last report, the end of its dotted line
    assert _marks(failed)[0] == _points(_trial(svg, 10).find("svg:path", NS))[-1]
    legend = [t for t, _, _ in _texts(_by_id(svg, "legend_1"))]
    assert legend == ["ran to its end", "stopped early (○: where)", "failed (×: its last report)"]
    styles = {t: _style(p.find("svg:path", NS), "stroke-dasharray")
              for t, p in zip(legend, _by_id(svg, "legend_1").findall("svg:g[@id]", NS)[::2], strict=True)}
    assert styles["failed (×: its last report)"] == dashes[10]


def test_trials_stopped_at_the_same_place_are_counted(page: str) -> None:
    svg = _svg(page, "intermediate_values")
    assert len(set(_marks(_by_id(svg, "stopped-ends")))) == 1  # three marks on one spot
    assert "3 stopped" in [t for t, _, _ in _texts(svg)]
    assert "failed" not in " ".join(t for t, _, _ in _texts(svg) if t[0].isdigit())  # apart: not counted


def test_history_marks_failed_trials_inside_the_frame_and_runs_the_best_line_to_the_last_trial(page: str) -> None:
    svg = _svg(page, "optimization_history")
    left, top, right, bottom = _frame(svg)
    crosses = [m for tid in (10, 11, 12) for m in _marks(_trial(svg, tid))]
    assert len(crosses) == 3
    for x, y in crosses:  # inside the frame, a whole mark (8 px) from its edges
        assert left + 4 < x < right - 4 and top + 4 < y < bottom - 4, (x, y, bottom)
    best = _points(_by_id(svg, "best-so-far").find("svg:path", NS))
    last_x = _marks(_trial(svg, 12))[0][0]  # trial 12 failed: the line still reaches it
    assert max(x for x, _ in best) == pytest.approx(last_x, abs=0.01)
    assert len({round(y, 3) for _, y in best}) == 1  # loss 0.5 of trial 1 was never beaten
    labels = [t for t, _, _ in _texts(_by_id(svg, "matplotlib.axis_2"))]
    assert labels[0] == "failed" and labels[-1].startswith("loss")  # the strip is named, not a value


def _yticks(svg: ET.Element) -> list[tuple[str, float]]:
    """(label, y in SVG pixels) of the y axis' ticks that have a number as label."""
    out = []
    for tick in _by_id(svg, "matplotlib.axis_2").findall("svg:g", NS):
        if tick.get("id", "").startswith("ytick"):
            (label, _, _), (_, y) = _texts(tick)[0], _marks(tick)[0]
            if re.fullmatch(r"[−-]?[\d.]+", label):
                out.append((label, y))
    return out


@pytest.mark.parametrize("stem", ["optimization_history", "intermediate_values"])
def test_value_axes_end_on_round_numbers(page: str, stem: str) -> None:
    svg = _svg(page, stem)
    ticks = _yticks(svg)
    values = [float(t.replace("−", "-")) for t, _ in ticks]
    assert all(len(t.split(".")[-1]) <= 2 for t, _ in ticks), ticks  # 0.4, 0.45: round
    steps = {round(b - a, 9) for a, b in zip(values, values[1:], strict=False)}
    assert len(steps) == 1, ticks  # evenly spaced
    half = steps.pop() / 2
    (v0, y0), (v1, y1) = (values[0], ticks[0][1]), (values[-1], ticks[-1][1])
    _, top, _, bottom = _frame(svg)
    for edge in (top, bottom):  # the frame's ends, read off the ticks' places: multiples of half a step
        limit = v0 + (edge - y0) * (v1 - v0) / (y1 - y0)
        assert limit / half == pytest.approx(round(limit / half), abs=1e-3), (limit, half)
    marks = [y for g in svg.findall(".//svg:g[@data-trial]", NS)
             for _, y in _marks(g) + [p for path in g.findall("svg:path", NS) for p in _points(path)]]
    assert marks and all(top < y < bottom for y in marks)  # none on the frame


def test_legends_sit_below_the_plot_not_on_it(page: str) -> None:
    for stem in ("optimization_history", "intermediate_values"):
        svg = _svg(page, stem)
        _, _, _, bottom = _frame(svg)
        ys = [y for _, _, y in _texts(_by_id(svg, "legend_1"))]
        assert ys and min(ys) > bottom, (stem, ys, bottom)


def test_parallel_colour_bar_is_a_linear_scale_of_values(page: str) -> None:
    svg = _svg(page, "parallel_coordinate")
    bar = _by_id(svg, "axes_2")
    labels = [t for t, _, _ in _texts(bar)]
    assert labels[-1] == "loss (lower is better: darker)" and "rank" not in labels[-1]
    ticks = [(float(t.replace("−", "-")), y) for t, _, y in _texts(bar) if re.fullmatch(r"[−-]?[\d.]+", t)]
    assert len(ticks) >= 3
    (v0, y0), (v1, y1) = ticks[0], ticks[-1]
    for v, y in ticks:  # evenly spaced values at evenly spaced places: a linear scale
        assert y == pytest.approx(y0 + (v - v0) * (y1 - y0) / (v1 - v0), abs=0.05)
    # the best trial (lowest loss, trial 1: 0.5) has the darkest line; a worse one is lighter
    def colour(tid: int) -> tuple[int, ...]:
        c = _style(_trial(svg, tid).find("svg:path", NS), "stroke")
        return tuple(int(c[i:i + 2], 16) for i in (1, 3, 5))
    assert sum(colour(1)) < sum(colour(3)) < sum(colour(6))


def test_importances_over_few_trials_carry_a_caveat_beside_them(page: str) -> None:
    svg = _svg(page, "param_importances")
    caveat = _texts(_by_id(svg, "importance-caveat"))[0][0]
    assert caveat == "Only 6 completed trials (fewer than 20): a rough estimate that may change with more trials"
    assert "Caution: only 6 completed trials (fewer than 20)" in page


def test_failures_table_shows_the_exception_beside_vertex_reason(page: str) -> None:
    failures = page[page.index("<h2>Failures and infeasible trials</h2>"):page.index("<h2>All trials</h2>")]
    row = re.search(r"<tr data-trial='10'>(.*?)</tr>", failures, re.S).group(1)
    cells = re.findall(r"<td>(.*?)</td>", row, re.S)
    assert cells[0] == "10"
    assert cells[1] == ("<b>RuntimeError: loss became NaN at step 4: the learning rate 0.3 is too high, lower it"
                        "</b><pre>  File &quot;train.py&quot;, line 16, in &lt;module&gt;\n"
                        "    raise RuntimeError(...)</pre>")
    assert cells[2] == VERTEX and cells[3] == "workerpool0-0: exit 1"
    row = re.search(r"<tr data-trial='11'>(.*?)</tr>", failures, re.S).group(1)
    assert "The trial finished without reporting the objective metric loss; it reported acc." in row
    # the reasons whole in every table of the page (it wraps them), never cut at 80 characters
    all_trials = page[page.index("<h2>All trials</h2>"):]
    assert ("<td>exit 1: RuntimeError: loss became NaN at step 4: the learning rate 0.3 is too high, lower it</td>"
            in all_trials)
