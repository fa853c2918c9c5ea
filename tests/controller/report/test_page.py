"""trials/report.py: top-trials ranking, tables, the HTML page, plots and the `trials report` command."""

from __future__ import annotations

import itertools
import json
import os
import re
import sys

import pytest
from jobkit import fake_job

from trials.cli import main
from trials.controller.report import data as report_data
from trials.controller.report import page as report
from trials.controller.report import parallel as report_parallel
from trials.controller.report import plots as report_plots
from trials.spec.load import loads_spec

MULTI = """
metrics: {acc: maximize, size: minimize}
parameters:
  lr: {type: double, min: 0.001, max: 1.0, scale: log}
  width: {type: discrete, values: [8, 16, 32]}
max_trial_count: 5
"""


def _rest_trial(tid, state, metrics=None, reason=None):
    t = {"id": str(tid), "state": state, "parameters": [{"parameterId": "lr", "value": 0.1 * tid}]}
    if metrics:
        t["finalMeasurement"] = {"stepCount": "3", "metrics": [{"metricId": k, "value": v}
                                                               for k, v in metrics.items()]}
    if reason:
        t["infeasibleReason"] = reason
    return t


def test_top_trials_single_metric_sorts_by_goal_and_skips_unfinished():
    rest = {"trials": [_rest_trial(1, "SUCCEEDED", {"loss": 0.5}), _rest_trial(2, "INFEASIBLE", reason="x"),
                       _rest_trial(3, "SUCCEEDED", {"loss": 0.2}), _rest_trial(4, "ACTIVE")]}
    title, top = report.top_trials(rest, ["loss"], [False])
    assert [t["id"] for t in top] == ["3", "1"]
    assert title == "Top 2 trials by loss"
    _, top = report.top_trials(rest, ["loss"], [True])
    assert [t["id"] for t in top] == ["1", "3"]
    _, top = report.top_trials(rest, ["loss"], [False], n=1)
    assert [t["id"] for t in top] == ["3"]


def test_top_trials_several_metrics_is_the_pareto_front():
    rest = {"trials": [_rest_trial(1, "SUCCEEDED", {"acc": 0.9, "size": 100}),
                       _rest_trial(2, "SUCCEEDED", {"acc": 0.8, "size": 10}),
                       _rest_trial(3, "SUCCEEDED", {"acc": 0.7, "size": 50}),  # dominated by 2
                       _rest_trial(4, "SUCCEEDED", {"acc": 0.9, "size": 100})]}  # ties 1: kept
    title, top = report.top_trials(rest, ["acc", "size"], [True, False])
    assert [t["id"] for t in top] == ["1", "4", "2"]
    assert title.startswith("Pareto-optimal")


def test_table_shows_stopped_trials_and_drops_empty_columns():
    rest = {"trials": [_rest_trial(1, "SUCCEEDED", {"loss": 0.5}), _rest_trial(2, "SUCCEEDED", {"loss": 0.4})],
            "trialsLocal": {"2": {"stopped_early": True, "stop_reason": "below the median"}}}
    header, body = report.top_table(rest, rest["trials"], ["loss"])
    assert header == ["trial", "state", "loss", "lr", "steps", "stopped early", "reason"]
    assert body[1][1:] == ["SUCCEEDED", "0.4", "0.2", "0", "yes", "below the median"]
    assert body[0][-2:] == ["", ""]
    header, body = report.top_table(rest, rest["trials"][:1], ["loss"])
    assert header == ["trial", "state", "loss", "lr", "steps"]
    bad = {"trials": [_rest_trial(1, "INFEASIBLE", reason="boom")]}
    header, body = report.top_table(bad, bad["trials"], ["loss"])
    assert header[-1] == "reason" and body[0][-1] == "boom"


def test_counts_and_attempts_text():
    rest = {"maxTrialCount": 5, "trials": [_rest_trial(1, "SUCCEEDED", {"loss": 1}), _rest_trial(2, "INFEASIBLE"),
                                           _rest_trial(3, "ACTIVE")],
            "trialsLocal": {"1": {"stopped_early": True}}}
    assert report.counts(rest) == {"succeeded": 1, "stopped early": 1, "infeasible": 1, "active": 1, "not run": 2}
    text = report.attempts_text([{"replica": "workerpool0-0", "exitStatus": 1},
                                 {"replica": "workerpool0-0", "exitStatus": 137, "oomKilled": True}])
    assert text == "workerpool0-0: exit 1; workerpool0-0: exit 137 (out of memory)"


def test_render_html_escapes_inlines_plots_and_says_when_nothing_completed():
    rest = {"state": "JOB_STATE_FAILED", "maxTrialCount": 2, "error": {"message": "2 trials failed <b>"},
            "trials": [_rest_trial(1, "INFEASIBLE", reason="exit <1> & died")]}
    svg = ("<?xml version='1.0'?>\n<svg xmlns='http://www.w3.org/2000/svg'>"
           "<a xlink:href=\"#trial-1\" target=\"_blank\"><path/></a></svg>")
    fig = report_plots.Figure(stem="optimization_history", title="History", png_path="/x.png", svg=svg,
                              caption="what <it> shows")
    page = report.render_html(job_id="j<1>", rest=rest, metric_ids=["loss"], maximize=[False], figures=[fig],
                              tips={"1": "trial 1 </script><script>alert(1)"}, skipped=[("Importances", "needs 2")],
                              plots_note=None, job_dir="/x", sampler="tpe")
    assert "j&lt;1&gt;" in page and "<b>" not in page.replace("<b>Importances</b>", "")
    assert "exit &lt;1&gt; &amp; died" in page and "what &lt;it&gt; shows" in page
    assert "No completed trial" in page
    assert "<?xml" not in page and '<g class="trial" data-trial="1"><path/></g>' in page  # the SVG, inline
    assert "</script><script>alert" not in page  # a tip cannot end its script element
    assert "Importances</b>: skipped, needs 2." in page
    assert not re.search(r"""(src|href)=['"]?(http|//)""", page)  # nothing fetched from outside


def test_report_of_a_job_with_no_completed_trial(tmp_path, capsys):
    h = fake_job(tmp_path, outcomes=[("fail", "The replica workerpool0-0 exited with a non-zero status of 1.")])
    r = report.write_report(h)
    assert r.images == () and r.top_rows == ()
    assert r.skipped == (("all plots", "no trial has succeeded yet: there is nothing to plot"),)
    with open(r.index_html, encoding="utf-8") as f:
        page = f.read()
    assert "No completed trial" in page and "non-zero status of 1" in page
    assert main(["report", "rep", "--root", str(tmp_path / "jobs")]) == 0
    out = capsys.readouterr().out
    assert "no trial has succeeded yet" in out and r.index_html in out


def test_report_without_matplotlib_names_the_extra_or_is_tables_only_when_asked(tmp_path, monkeypatch, capsys):
    h = fake_job(tmp_path, outcomes=[("ok", [0.5, 0.4], False), ("ok", [0.6, 0.3], False)])
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib -> ImportError
    assert main(["report", "rep", "--root", str(tmp_path / "jobs")]) == 2
    captured = capsys.readouterr()
    assert captured.err.splitlines() == ["trials: error: trials report: its plots need matplotlib, which is not "
                                         "installed: pip install 'trials[report]' (or --no-plots for a report of "
                                         "tables only)"]
    assert not (tmp_path / "jobs" / "rep" / "report").exists()
    # the library call (and --no-plots) still make the tables-only page, which says why
    r = report.write_report(h, plots=True)
    assert r.note == "matplotlib is not installed, so this report has tables only: pip install 'trials[report]'"
    folder = tmp_path / "jobs" / "rep" / "report"
    assert os.listdir(folder) == ["index.html"]
    page = (folder / "index.html").read_text(encoding="utf-8")
    assert "matplotlib is not installed" in page and "pip install" in page
    assert "Top 2 trials by loss" in page


def test_report_page_is_written_whole_and_never_through_a_planted_link(tmp_path, monkeypatch):
    fake_job(tmp_path, outcomes=[("ok", [0.5, 0.4], False)])
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    folder = tmp_path / "jobs" / "rep" / "report"
    folder.mkdir(parents=True)
    victim = tmp_path / "victim"
    victim.write_text("keep")
    (folder / "index.html.tmp").symlink_to(victim)  # where a plain temp-and-rename writer would write
    (folder / "index.html").symlink_to(victim)
    assert main(["report", "rep", "--root", str(tmp_path / "jobs"), "--no-plots"]) == 0
    assert victim.read_text() == "keep"
    assert not (folder / "index.html").is_symlink() and "Top" in (folder / "index.html").read_text()


def test_plot_trials_read_stopped_flags_curves_and_results_from_the_rest_view():
    rest = {"trials": [_rest_trial(1, "SUCCEEDED", {"loss": 0.5}), _rest_trial(2, "SUCCEEDED", {"loss": 0.1}),
                       _rest_trial(3, "INFEASIBLE", reason="x"), _rest_trial(4, "SUCCEEDED", {"loss": 0.3})]}
    rest["trials"][1]["measurements"] = [{"stepCount": "1", "metrics": [{"metricId": "loss", "value": 0.1}]}]
    trials = report_data.plot_trials(rest, {"2": {"stopped_early": True}}, ["loss"])
    assert [(t.trial_id, t.stopped, t.result) for t in trials] == [
        (1, False, True), (2, True, False), (3, False, False), (4, False, True)]
    assert trials[1].curve == ((1, 0.1),)
    # a stopped trial's value (0.1, the lowest) is where it stopped, never the best so far
    assert report_data.best_so_far(trials, maximize=False) == [(1, 0.5), (4, 0.3)]
    assert report_data.best_trial(trials, maximize=False).trial_id == 4


def test_parallel_axes_follow_the_spec_scale_and_labels_never_crowd():
    job = loads_spec(MULTI, source="t.yaml")
    axes = report_parallel.param_axes(job.study.all_parameters(), [])
    lr, width = axes
    assert (lr.kind, lr.low, lr.high) == ("log", 0.001, 1.0)
    assert lr.position(0.001) == 0.0 and lr.position(1.0) == 1.0 and abs(lr.position(0.01) - 1 / 3) < 1e-9
    assert [label for _, label in lr.ticks()] == ["0.001", "0.01", "0.1", "1"]
    assert width.categories == ("8", "16", "32") and width.position(None) is None  # inactive: no place
    dense = report_parallel.Axis(name="x", kind="log", low=1e-9, high=1.0)
    ys = [y for y, _ in dense.ticks()]
    assert min(b - a for a, b in itertools.pairwise(ys)) >= report_parallel.MIN_LABEL_GAP
    many = report_parallel.Axis(name="c", kind="category", categories=tuple(str(i) for i in range(40)))
    ys = [y for y, _ in many.ticks()]
    assert min(b - a for a, b in itertools.pairwise(ys)) >= report_parallel.MIN_LABEL_GAP - 1e-9


def test_report_with_plots_single_metric(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    fake_job(tmp_path, outcomes=[("ok", [0.9, 0.5, 0.3], False), ("ok", [0.8, 0.7], True),
                                      ("ok", [0.7, 0.4, 0.2], False), ("fail", "boom"), None, None])
    assert main(["report", "rep", "--root", str(tmp_path / "jobs")]) == 0
    out = capsys.readouterr().out
    folder = tmp_path / "jobs" / "rep" / "report"
    names = sorted(os.listdir(folder))
    assert names == ["index.html", "intermediate_values.png", "optimization_history.png",
                     "parallel_coordinate.png", "param_importances.png"]
    for name in names:
        assert (folder / name).stat().st_size > 1000
    assert (folder / "optimization_history.png").read_bytes().startswith(b"\x89PNG")
    page = (folder / "index.html").read_text()
    assert page.count("<svg") == 4 and "<img" not in page
    assert "Stopped early" in page and "below the median" in page and "boom" in page
    # every plot names each trial's marks; the stopped trial's tip says where and why it stopped
    history = re.search(r"id='optimization_history'>(.*?)</div>", page, re.S).group(1)
    assert sorted(set(re.findall(r'data-trial="(\d+)"', history))) == ["1", "2", "3", "4"]
    tips = json.loads(re.search(r"id='trial-tips'>(.*?)</script>", page).group(1))
    assert tips["2"].startswith("trial 2 · SUCCEEDED, stopped early at step 2 (below the median) · loss=0.7")
    assert "Hollow markers: the 1 trial stopped early" in page
    # the terminal table: best first, Vertex trial ids
    table_lines = out.splitlines()[2:5]
    assert [ln.split()[0] for ln in table_lines] == ["3", "1", "2"]
    assert table_lines[2].split()[1:2] == ["SUCCEEDED"] and "yes" in table_lines[2].split()
    assert "stopped early" in out.splitlines()[1]  # the column header
    assert out.strip().endswith(f"report: {folder / 'index.html'}")


def test_report_with_plots_several_metrics_has_a_pareto_front_and_skips_importances(tmp_path):
    pytest.importorskip("matplotlib")
    one_param = MULTI.replace("  width: {type: discrete, values: [8, 16, 32]}\n", "")
    h = fake_job(tmp_path, one_param, outcomes=[("ok", [0.5, 0.6], False), ("ok", [0.7, 0.8], False)])
    r = report.write_report(h)
    assert sorted(os.path.basename(p) for p in r.images) == [
        "intermediate_values.png", "optimization_history.png", "parallel_coordinate.png", "pareto_front.png"]
    assert r.skipped == (("Parameter importances", "needs at least 2 completed trials and more than 1 "
                          "parameter; this job has 2 completed trials (not stopped early) and 1 parameter"),)
    assert r.top_title == "Pareto-optimal trials (acc, size)"


def test_importances_of_identical_results_are_skipped_with_optuna_s_reason(tmp_path):
    pytest.importorskip("matplotlib")
    h = fake_job(tmp_path, outcomes=[("ok", [0.5], False)] * 3)
    r = report.write_report(h)
    assert r.skipped == (("Parameter importances", "Optuna could not compute them: Encountered zero total "
                          "variance in all trees."),)
    assert len(r.images) == 3
