"""The report's plots as a person reads them, checked in the rendered page (the SVG's own text and
marks): a 20-trial conditional job with stopped trials and a two-metric job."""

from __future__ import annotations

import re

import pytest
from jobkit import fake_job

from trials.cli import main

CONDITIONAL = """
metrics: {accuracy: maximize}
parameters:
  learning_rate: {type: double, min: 0.0001, max: 0.3, scale: log}
  optimizer:
    type: categorical
    values: [adam, sgd]
    when:
      - values: [sgd]
        parameters:
          momentum: {type: discrete, values: [0.0, 0.9]}
max_trial_count: 20
"""
TWO = """
metrics: {accuracy: maximize, size: minimize}
parameters:
  learning_rate: {type: double, min: 0.0001, max: 0.3, scale: log}
max_trial_count: 6
"""


def _plot(page: str, stem: str) -> str:
    return re.search(rf"<div class='plot' id='{stem}'>(.*?)</div>", page, re.S).group(1)


def _texts(svg: str) -> list[str]:
    return re.findall(r">([^<>]+)</text>", svg)


def _legend(svg: str) -> list[str]:
    start = svg.index('id="legend_1"')
    end = svg.find('id="axes_2"', start)  # a colour bar's axes come after the plot's legend
    return _texts(svg[start:end if end > 0 else None])


def _axis_texts(svg: str, axis: int) -> list[str]:
    start = svg.index(f'id="matplotlib.axis_{axis}"')
    end = svg.find(f'id="matplotlib.axis_{axis + 1}"', start)
    return _texts(svg[start:end if end > 0 else None])


@pytest.fixture(scope="module")
def page(tmp_path_factory: pytest.TempPathFactory) -> str:
    pytest.importorskip("matplotlib")
    tmp_path = tmp_path_factory.mktemp("plots")
    outcomes = [("ok", [0.5 + 0.02 * i + 0.01 * s for s in range(5)], False) if i % 4 else
                ("ok", [0.2], True) for i in range(19)] + [("fail", "boom")]
    fake_job(tmp_path, CONDITIONAL, outcomes=outcomes)
    assert main(["report", "rep", "--root", str(tmp_path / "jobs")]) == 0
    return (tmp_path / "jobs" / "rep" / "report" / "index.html").read_text()


def test_history_has_whole_trial_ids_and_marks_stopped_and_failed_trials(page: str) -> None:
    svg = _plot(page, "optimization_history")
    *ticks, label = _axis_texts(svg, 1)
    assert label == "trial id" and ticks and all(t.isdigit() for t in ticks), ticks  # no 2.5, 7.5
    legend = _legend(svg)
    assert legend == ["completed trial", "stopped early (value when stopped, not a result)", "best so far",
                      "failed or infeasible (no value)"]
    assert "best: trial 19" in _texts(svg)  # the best result, never a stopped trial's value


def test_learning_curves_of_20_trials_have_a_colour_bar_not_a_crowded_legend(page: str) -> None:
    svg = _plot(page, "intermediate_values")
    legend = _legend(svg)
    assert legend == ["ran to its end", "stopped early (○: where)"]
    assert "trial id" in _texts(svg)  # the colour bar's label
    colours = [re.search(r"stroke: (#[0-9a-f]{6})", g).group(1)
               for g in re.findall(r'data-trial="\d+">\s*<path[^>]*', svg)]
    assert len(colours) == 19 and len(set(colours)) == 19  # one colour per trial, none repeated


def test_parallel_coordinates_label_inactive_params_and_put_the_best_on_top(page: str) -> None:
    svg = _plot(page, "parallel_coordinate")
    texts = _texts(svg)
    assert "None" not in texts and "inactive" in texts and "stopped early" in texts
    assert {"0.0001", "0.001", "0.01", "0.1", "0.3"} <= set(texts)  # the log axis, by decade
    widths = [(tid, float(w)) for tid, w in
              re.findall(r'data-trial="(\d+)">\s*<path[^>]*stroke-width: ([\d.]+)', svg)]
    assert widths[-1] == ("19", max(w for _, w in widths))  # the best: drawn last, thickest


def test_two_metrics_get_a_pareto_front(tmp_path) -> None:
    pytest.importorskip("matplotlib")
    fake_job(tmp_path, TWO, outcomes=[("ok", [0.5, 0.9], False), ("ok", [0.6], False), ("ok", [0.3], True),
                                      None, None, None])
    assert main(["report", "rep", "--root", str(tmp_path / "jobs")]) == 0
    page = (tmp_path / "jobs" / "rep" / "report" / "index.html").read_text()
    svg = _plot(page, "pareto_front")
    assert "Pareto-optimal trial" in _texts(svg) and "stopped early (not a result)" in _texts(svg)
    assert "accuracy (higher is better)" in _texts(svg) and "size (lower is better)" in _texts(svg)


def _as_one_thread(monkeypatch) -> None:
    """The report forks its drawing child only in a process of one thread (a fork copies no other thread); a
    test worker may hold threads of its own (its runner's, another test's library threads), so these tests, which
    are about the fork's output, see one."""
    import threading

    monkeypatch.setattr(threading, "active_count", lambda: 1)


def test_plots_drawn_in_two_processes_are_the_ones_drawn_in_one(tmp_path, monkeypatch) -> None:
    """The learning curves and the importances are drawn in a forked child while the rest are drawn
    here: the page and every PNG are byte for byte those of drawing all in one process; a child that
    dies leaves its plots to this process."""
    pytest.importorskip("matplotlib")
    from trials.controller.report import plots

    monkeypatch.setattr(plots, "_cpus", lambda: 2)
    _as_one_thread(monkeypatch)
    outcomes = [("ok", [0.5 + 0.02 * i + 0.01 * s for s in range(5)], False) for i in range(12)]
    fake_job(tmp_path, CONDITIONAL, outcomes=outcomes)
    out = {}
    forks = []
    real_fork = plots._fork_drawing
    monkeypatch.setattr(plots, "_fork_drawing", lambda *a: forks.append(a) or real_fork(*a))
    for name, parallel in (("two", True), ("one", False)):
        monkeypatch.setattr(plots, "PARALLEL", parallel)
        report = tmp_path / name
        assert main(["report", "rep", "--root", str(tmp_path / "jobs"), "--out", str(report)]) == 0
        out[name] = {p.name: p.read_bytes() for p in report.iterdir() if p.suffix in (".png", ".html")}
    assert len(forks) == 1 and [stem for stem, _, _ in forks[0][0]] == list(plots.IN_CHILD)
    assert "intermediate_values.png" in out["two"] and "param_importances.png" in out["two"]
    assert out["two"] == out["one"]

    monkeypatch.setattr(plots, "PARALLEL", True)
    monkeypatch.setattr(plots, "_draw_one", _dies_in_child(plots._draw_one))
    assert main(["report", "rep", "--root", str(tmp_path / "jobs"), "--out", str(tmp_path / "died")]) == 0
    assert {p.name: p.read_bytes() for p in (tmp_path / "died").iterdir() if p.suffix in (".png", ".html")} \
        == out["one"]


def _dies_in_child(draw_one):
    import os

    parent = os.getpid()

    def draw(*args, **kwargs):
        if os.getpid() != parent:
            os._exit(3)  # (the child, killed mid-plot)
        return draw_one(*args, **kwargs)

    return draw


def test_a_plot_that_fails_here_ends_the_drawing_child(tmp_path, monkeypatch) -> None:
    pytest.importorskip("matplotlib")
    import os

    from trials.controller.report import plots

    monkeypatch.setattr(plots, "_cpus", lambda: 2)
    _as_one_thread(monkeypatch)
    fake_job(tmp_path, CONDITIONAL, outcomes=[("ok", [0.5 + 0.02 * i], False) for i in range(6)])
    children: list[int] = []
    real_fork, real_draw = plots._fork_drawing, plots._draw_one
    parent = os.getpid()

    def fork(*args):
        child = real_fork(*args)
        children.append(child[0])
        return child

    def draw(stem, *args):
        if os.getpid() == parent and stem == "optimization_history":
            raise RuntimeError("a plot broke")
        return real_draw(stem, *args)

    monkeypatch.setattr(plots, "_fork_drawing", fork)
    monkeypatch.setattr(plots, "_draw_one", draw)
    with pytest.raises(RuntimeError, match="a plot broke"):
        plots.draw_plots(_plot_trials(tmp_path), metric_ids=["accuracy"], maximize=[True], axes=[],
                         importances=lambda: ({}, ""), out_dir=str(tmp_path))
    assert len(children) == 1
    with pytest.raises(ProcessLookupError):
        os.kill(children[0], 0)  # killed and reaped, not left drawing


def _plot_trials(tmp_path):
    from trials.controller.jobs import view
    from trials.controller.report.data import plot_trials

    h = view.read_job("rep", root=str(tmp_path / "jobs"), storage=None)
    return plot_trials(view.describe(h), view.describe_local(h)["trials"], list(h.job.study.metric_ids))


@pytest.mark.parametrize("database", [False, True], ids=["journal", "sqlite"])
def test_the_drawing_child_never_touches_the_jobs_storage(tmp_path, monkeypatch, database) -> None:
    """A fork shares the parent's storage connection (a database's socket or file handle): the trials the
    importances need are read before the fork, and the child draws from them alone."""
    pytest.importorskip("matplotlib")
    import os

    from trials.controller.jobs import view
    from trials.controller.report import plots

    monkeypatch.setattr(plots, "_cpus", lambda: 2)
    url = f"sqlite:///{tmp_path}/jobs.db" if database else None
    fake_job(tmp_path, CONDITIONAL, outcomes=[("ok", [0.5 + 0.02 * i], False) for i in range(8)], storage=url)
    readers = tmp_path / "readers"
    real_read = view.read_job

    def read_job(*args, **kwargs):
        h = real_read(*args, **kwargs)
        frozen = h.store.frozen_trials

        def recorded(*a, **k):
            with open(readers, "a") as f:
                f.write(f"{os.getpid()}\n")
            return frozen(*a, **k)

        monkeypatch.setattr(h.store, "frozen_trials", recorded)
        return h

    monkeypatch.setattr(view, "read_job", read_job)
    argv = ["report", "rep", "--root", str(tmp_path / "jobs"), "--out", str(tmp_path / "out")]
    assert main(argv + (["--storage", url] if url else [])) == 0
    assert set(readers.read_text().split()) == {str(os.getpid())}
    assert (tmp_path / "out" / "param_importances.png").exists()  # (drawn: the child computed them)
