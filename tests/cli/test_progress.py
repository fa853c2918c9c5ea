"""trials/progress.py and `trials sweep` output: live on a terminal, plain lines otherwise, --quiet, --json-logs."""

from __future__ import annotations

import dataclasses
import io
import json
import os
import pty
import subprocess
import sys
from pathlib import Path

import pytest
from jobkit import fake_job

from trials.cli import main
from trials.cli.progress import Progress
from trials.controller.loop import events as ev
from trials.records import JobState, StopReason, TrialState

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "examples" / "argparse_hypertune" / "config.yaml"
TRAIN = ROOT / "examples" / "argparse_hypertune" / "train.py"
ESCAPES = ("\r", "\033")


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True



def event(name: str, data: dict) -> ev.Event:
    """A typed event from its JSON name and fields (the defaults of TrialDone filled in)."""
    cls = {c.name: c for c in ev.ALL_EVENTS}[name]
    known = {f.name for f in dataclasses.fields(cls)}
    kwargs = {k: v for k, v in data.items() if k in known}
    if cls is ev.TrialDone:
        kwargs = {"reason": None, "values": (), "stopped_early": False, **kwargs}
        kwargs["state"] = TrialState(kwargs["state"])
        kwargs["values"] = tuple(kwargs["values"])
        kwargs["reported_tags"] = tuple(kwargs.get("reported_tags", ()))
    if cls is ev.JobDone:
        kwargs["state"] = JobState(kwargs["state"])
    if cls is ev.TrialStopping:
        kwargs["reason"] = StopReason(kwargs["reason"])
    return cls(**kwargs)


def _events(p: Progress) -> None:
    p(event("trial_started", {"trial_id": "1", "params": {"lr": 0.027599337346012304, "units": 64}}))
    p(event("warning", {"trial_id": "1", "message": "trial 1 reports tags not in the spec: loss"}))
    p(event("trial_stopping", {"trial_id": "1", "reason": "early", "detail": "below the median"}))
    p(event("trial_done", {"trial_id": "1", "state": "SUCCEEDED", "values": [0.25], "stopped_early": True,
                     "steps": 3, "last_step": 3, "seconds": 1.25, "params": {"lr": 0.1}}))
    p(event("trial_done", {"trial_id": "2", "state": "INFEASIBLE", "values": [], "reason": "exit 1",
                     "steps": 0, "seconds": 0.5, "params": {}}))
    p(event("job_done", {"state": "JOB_STATE_SUCCEEDED", "error": None}))


def _progress(out, mode=None) -> Progress:
    p = Progress(total=2, metric_ids=("loss",), maximize=False, out=out, mode=mode)
    p.running = 1  # trial 2 was started before (not replayed here)
    return p


def test_plain_lines_when_stdout_is_not_a_terminal():
    out = io.StringIO()
    p = _progress(out)
    assert p.mode == "plain"
    _events(p)
    lines = out.getvalue().splitlines()
    assert not any(c in out.getvalue() for c in ESCAPES)
    assert [ln[11:] for ln in lines] == [
        "trial 1 started: lr=0.0276 units=64",  # rounded for reading only
        "warning: trial 1 reports tags not in the spec: loss",
        "trial 1 stopping (early): below the median",
        "trial 1 SUCCEEDED (stopped early) at step 3, 1.2s: loss=0.25",
        "trial 2 INFEASIBLE after 0 steps, 0.5s: exit 1",
    ]
    assert all(ln.startswith("[") and ln[9:11] == "] " for ln in lines)  # [HH:MM:SS]


def screen(text: str) -> list[str]:
    """What a terminal shows after ``text``: \\r, \\n, ESC[K (erase to the line's end), ESC[1A (up)."""
    rows: list[list[str]] = [[]]
    row = col = 0
    i = 0
    while i < len(text):
        if text.startswith("\033[K", i):
            del rows[row][col:]
            i += 3
            continue
        if text.startswith("\033[1A", i):
            row = max(0, row - 1)
            i += 4
            continue
        ch = text[i]
        i += 1
        if ch == "\r":
            col = 0
        elif ch == "\n":
            row, col = row + 1, 0
            if row == len(rows):
                rows.append([])
        else:
            line = rows[row]
            line.extend(" " * (col - len(line)))
            line[col:col + 1] = [ch]
            col += 1
    shown = ["".join(r) for r in rows]
    while len(shown) > row + 1 and not shown[-1]:  # blank rows below the cursor: the next output's
        shown.pop()
    return shown


def stamped(lines: list[str]) -> list[str]:
    """The lines without their [HH:MM:SS] stamp."""
    return [ln[11:] if ln.startswith("[") and ln[9:11] == "] " else ln for ln in lines]


def test_live_view_is_cleared_before_the_summary():
    out = Terminal()
    p = _progress(out)
    assert p.mode == "live"
    _events(p)
    text = out.getvalue()
    assert "\r\033[K2/2 done, 0 running, 1 failed, ETA" in text  # a stopped trial is never the best
    assert stamped(screen(text)) == [
        "trial 1 started: lr=0.0276 units=64",
        "warning: trial 1 reports tags not in the spec: loss",
        "trial 1 stopping (early): below the median",
        "trial 1 SUCCEEDED (stopped early) at step 3, 1.2s: loss=0.25",
        "trial 2 INFEASIBLE after 0 steps, 0.5s: exit 1",
        "",  # the summary printed next starts here, on a clean line: no stale status above it
    ]


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def _started(p: Progress, *ids: str) -> None:
    for trial_id in ids:
        p(event("trial_started", {"trial_id": trial_id, "params": {"lr": 0.1}}))


def test_live_view_shows_each_running_trials_last_step_and_metric(monkeypatch):
    monkeypatch.setenv("COLUMNS", "100")
    out, clock = Terminal(), Clock()
    p = Progress(total=4, metric_ids=("accuracy",), maximize=True, out=out, clock=clock)
    _started(p, "2", "10")
    clock.t += 12
    p(ev.TrialProgress(trial_id="2", step=4, metrics={"accuracy": 0.9123}, seconds=12.2))
    clock.t += 3  # no new step of trial 2 for 3 s: its time goes on
    p(ev.TrialProgress(trial_id="10", step=None, metrics={}, seconds=15.0))
    assert stamped(screen(out.getvalue())) == [
        "trial 2 started: lr=0.1",
        "trial 10 started: lr=0.1",
        "0/4 done, 2 running, 0 failed",
        "  trial 2  step 4  accuracy=0.9123  15s",  # no total step count: nothing tells it
        "  trial 10  no step yet  15s",
    ]
    p(event("trial_done", {"trial_id": "2", "state": "SUCCEEDED", "values": [0.95], "steps": 5, "seconds": 16.0,
                           "params": {}}))
    assert stamped(screen(out.getvalue()))[2:] == [
        "trial 2 SUCCEEDED after 5 steps, 16.0s: accuracy=0.95",
        # 2 not started at 16 s each and trial 10's last second of it, over the 2 slots seen
        "1/4 done, 1 running, 0 failed, best accuracy=0.95 (trial 2), ETA 16s",
        "  trial 10  no step yet  15s",
    ]
    p(event("job_cancelling", {}))
    p(event("trial_requeued", {"trial_id": "10"}))
    p(event("job_done", {"state": "JOB_STATE_CANCELLED", "error": None}))
    assert stamped(screen(out.getvalue()))[3:] == [
        "cancelling the job: stopping every replica",
        "trial 10 interrupted; it runs again on resume",
        "",  # nothing stale above the summary
    ]


def test_live_view_caps_its_trial_lines_and_fits_the_terminal(monkeypatch):
    monkeypatch.setenv("COLUMNS", "41")
    out, clock = Terminal(), Clock()
    p = Progress(total=9, metric_ids=("a_rather_long_metric_name",), maximize=True, out=out, clock=clock,
                 trial_lines=3)
    _started(p, "1", "2", "3", "4", "5")
    clock.t += 1  # (the view is redrawn at most every REDRAW_S for progress alone)
    p(ev.TrialProgress(trial_id="1", step=7, metrics={"a_rather_long_metric_name": 0.5}, seconds=0.0))
    assert screen(out.getvalue())[5:] == [
        "0/9 done, 5 running, 0 failed",
        "  trial 1  step 7  a_rather_long_metric…",  # a wrapped line could not be erased in place
        "  trial 2  no step yet  1s",
        "  +3 more running",
    ]


def test_a_stopped_loop_leaves_no_view_behind():
    out = Terminal()
    p = Progress(total=2, metric_ids=("a",), maximize=True, out=out, clock=Clock())
    _started(p, "1")
    p.close()  # the loop raised (a full disk): the CLI prints the error next
    assert stamped(screen(out.getvalue())) == ["trial 1 started: lr=0.1", ""]


def test_the_live_view_escapes_what_it_shows():
    out = Terminal()
    clock = Clock()
    p = Progress(total=1, metric_ids=("acc",), maximize=True, out=out, clock=clock)
    _started(p, "1")
    clock.t += 1
    p(ev.TrialProgress(trial_id="1", step=1, metrics={"acc\x1b]0;pwned\x07": 1.0}, seconds=1.0))
    assert screen(out.getvalue())[-1] == "  trial 1  step 1  acc\\x1b]0;pwned\\x07=1  1s"


def test_a_pipe_gets_a_heartbeat_per_running_trial_at_most_every_30_s():
    out, clock = io.StringIO(), Clock()
    p = Progress(total=2, metric_ids=("accuracy", "loss"), maximize=True, out=out, clock=clock)
    _started(p, "1", "2")
    for t, trial_id, step in [(10, "1", 1), (31, "1", 2), (31, "2", None), (45, "1", 3), (62, "1", 4),
                              (62, "2", None)]:
        clock.t = 100 + t
        metrics = {"accuracy": 0.5 + step / 10, "loss": 1.0 / step} if step else {}
        p(ev.TrialProgress(trial_id=trial_id, step=step, metrics=metrics, seconds=float(t)))
    assert not any(c in out.getvalue() for c in ESCAPES)
    assert stamped(out.getvalue().splitlines()) == [
        "trial 1 started: lr=0.1",
        "trial 2 started: lr=0.1",
        "trial 1 running, 31s: step 2, accuracy=0.7, loss=0.5",
        "trial 2 running, 31s: no step reported yet",
        "trial 1 running, 62s: step 4, accuracy=0.9, loss=0.25",
        "trial 2 running, 62s: no step reported yet",
    ]


def test_quiet_has_no_heartbeat_and_json_logs_rate_limit_it():
    for mode in ("quiet", "json"):
        out, clock = io.StringIO(), Clock()
        p = Progress(total=1, metric_ids=("a",), maximize=True, out=out, clock=clock, mode=mode)
        _started(p, "1")
        for t in (5, 31, 40):
            clock.t = 100 + t
            p(ev.TrialProgress(trial_id="1", step=t, metrics={"a": 0.5}, seconds=float(t)))
        records = [json.loads(ln) for ln in out.getvalue().splitlines()]
        if mode == "quiet":
            assert records == []
        else:
            assert [(r["event"], r.get("step")) for r in records] == [("trial_started", None), ("trial_progress", 31)]
            assert records[1]["message"] == "trial 1 running, 31s: step 31, a=0.5"


def test_a_trial_told_to_stop_that_ran_to_its_end_says_why_it_is_not_stopped():
    out = io.StringIO()
    p = Progress(total=1, metric_ids=("accuracy",), maximize=True, out=out)
    _started(p, "7")
    p(event("trial_stopping", {"trial_id": "7", "reason": "early", "detail": ""}))
    p(event("trial_done", {"trial_id": "7", "state": "SUCCEEDED", "values": [0.9], "steps": 10, "last_step": 10,
                           "seconds": 3.25, "params": {}, "ran_to_end": True}))
    assert stamped(out.getvalue().splitlines())[1:] == [
        "trial 7 stopping (early)",
        "trial 7 SUCCEEDED after 10 steps, 3.2s: accuracy=0.9 (not marked stopped early: it reached where the "
        "completed trials ended before it stopped)",
    ]


def test_quiet_prints_only_warnings():
    out = io.StringIO()
    _events(_progress(out, "quiet"))
    assert [ln[11:] for ln in out.getvalue().splitlines()] == [
        "warning: trial 1 reports tags not in the spec: loss"]


def test_json_logs_are_one_cloud_logging_object_per_line():
    out = io.StringIO()
    _events(_progress(out, "json"))
    records = [json.loads(ln) for ln in out.getvalue().splitlines()]
    assert [r["event"] for r in records] == ["trial_started", "warning", "trial_stopping", "trial_done",
                                             "trial_done", "job_done"]
    assert [r["severity"] for r in records][:2] == ["INFO", "WARNING"]
    assert records[0]["message"] == "trial 1 started: lr=0.0276 units=64"
    assert records[0]["params"]["lr"] == 0.027599337346012304  # the record keeps the exact value
    assert records[3]["values"] == [0.25] and records[3]["stopped_early"] is True
    assert all(isinstance(r["timestampSeconds"], int) for r in records)
    assert {r["schema"] for r in records} == {1}  # the events' JSON form's version (loop/events.py)


def _sweep(tmp_path, *flags, tty=False):
    argv = [sys.executable, "-m", "trials", "sweep", str(CONFIG), "--root", str(tmp_path), "--job-id", "p",
            "--max-trial-count", "2", *flags, "--", sys.executable, str(TRAIN), "--epochs=2"]
    if not tty:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
        return done.returncode, done.stdout
    leader, follower = pty.openpty()
    proc = subprocess.Popen(argv, stdout=follower, stderr=follower)
    os.close(follower)
    chunks = []
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(leader)
    return proc.wait(timeout=60), b"".join(chunks).decode()


@pytest.mark.integration
def test_sweep_output_plain_live_quiet_and_json(tmp_path):
    code, out = _sweep(tmp_path / "plain")
    assert code == 0 and not any(c in out for c in ESCAPES)
    assert out.splitlines()[0].startswith("job p: 2 trials")
    assert "job p JOB_STATE_SUCCEEDED: 2 succeeded" in out

    code, out = _sweep(tmp_path / "live", tty=True)
    assert code == 0 and "\r\033[K" in out
    shown = screen(out)
    summary = next(ln for ln in shown if "JOB_STATE_SUCCEEDED" in ln)
    assert summary.startswith("job p JOB_STATE_SUCCEEDED")  # not glued to the status line
    assert not any(" done, " in ln or ln.startswith("  trial ") for ln in shown)  # the view was cleared

    code, out = _sweep(tmp_path / "quiet", "--quiet")
    assert code == 0 and out == ""

    code, out = _sweep(tmp_path / "json", "--json-logs")
    records = [json.loads(ln) for ln in out.splitlines()]
    assert code == 0 and records[-1]["event"] == "job_summary"
    assert records[-1]["state"] == "JOB_STATE_SUCCEEDED" and records[-1]["succeeded"] == 2
    assert records[-1]["best"][0]["parameters"].keys() == {"learning_rate", "l2", "batch_size"}
    assert sum(r["event"] == "trial_done" for r in records) == 2


def test_a_closed_output_does_not_stop_the_job():
    from trials.cli.progress import Progress

    class Closed:
        def write(self, text):
            raise BrokenPipeError(32, "Broken pipe")

        def flush(self):
            raise BrokenPipeError(32, "Broken pipe")

        def isatty(self):
            return False

    progress = Progress(total=2, metric_ids=("a",), maximize=True, out=Closed(), mode="plain")
    progress(event("trial_started", {"trial_id": "1", "params": {"x": 1}}))  # must not raise
    progress(event("trial_done", {"trial_id": "1", "state": "SUCCEEDED", "values": [0.5], "steps": 3,
                                  "seconds": 0.1, "params": {}}))
    assert progress.mode == "quiet" and progress.done == 1


def test_one_step_is_singular_and_a_stopped_trial_is_not_the_best():
    out = io.StringIO()
    p = _progress(out)
    p(event("trial_started", {"trial_id": "1", "params": {}}))
    p(event("trial_done", {"trial_id": "1", "state": "SUCCEEDED", "values": [0.1], "stopped_early": True,
                     "steps": 1, "last_step": 1, "seconds": 0.5, "params": {}}))
    p(event("trial_done", {"trial_id": "2", "state": "SUCCEEDED", "values": [0.3], "steps": 1, "seconds": 0.5,
                     "params": {}}))
    lines = [ln[11:] for ln in out.getvalue().splitlines()]
    assert lines[1] == "trial 1 SUCCEEDED (stopped early) at step 1, 0.5s: loss=0.1"
    assert lines[2] == "trial 2 SUCCEEDED after 1 step, 0.5s: loss=0.3"
    assert (p.best, p.best_trial) == (0.3, "2")  # 0.1 (lower is better) is where trial 1 stopped


def test_resuming_a_finished_job_does_not_claim_zero_parallel_trials(tmp_path, capsys):
    fake_job(tmp_path, outcomes=[("ok", [0.5], False)] * 6)
    assert main(["resume", "rep", "--root", str(tmp_path / "jobs")]) == 0
    out = capsys.readouterr().out
    assert "at most 0 in parallel" not in out
    assert "6 succeeded (0 stopped early), 0 infeasible, 0 not run; no trial ran this time" in out


def test_the_first_trial_without_the_metric_is_said_loudly_once():
    out = io.StringIO()
    p = Progress(total=3, metric_ids=("accuracy",), maximize=True, out=out, mode="quiet")
    for trial_id in ("1", "2"):
        p(event("trial_started", {"trial_id": trial_id, "params": {}}))
        p(event("trial_done", {"trial_id": trial_id, "state": "INFEASIBLE", "values": [], "reason": "no accuracy",
                         "steps": 0, "seconds": 0.5, "params": {}, "missing_metric": True,
                         "reported_tags": ["val_acc"], "metrics_source": "hypertune"}))
    (line,) = out.getvalue().splitlines()  # even --quiet says it, and only once
    assert line[11:] == (
        "warning: trial 1 ended without the spec's metric accuracy (it reported val_acc), so it counts "
        "as infeasible, and so will every trial that does the same: report it with hypertune.HyperTune()."
        "report_hyperparameter_tuning_metric(hyperparameter_metric_tag='accuracy', metric_value=value, "
        "global_step=step), or make the spec's metric 'val_acc' if that is the one you meant.")


@pytest.mark.parametrize("source, how", [
    ("metrics.jsonl", "report it with ctx.report(step, accuracy=value)."),
    (None, "report it with ctx.report(step, accuracy=value) in a trials.main trainer, or hypertune.HyperTune()"
           ".report_hyperparameter_tuning_metric(hyperparameter_metric_tag='accuracy', metric_value=value, "
           "global_step=step) in a plain one."),
])
def test_the_advice_fits_the_trainer(source, how):
    from trials.controller.policy.exits import missing_metric_advice

    advice = missing_metric_advice("4", ["accuracy"], [], source=source)
    assert advice.startswith("trial 4 ended without the spec's metric accuracy (it reported no metric at all)")
    assert advice.endswith(how)


def test_the_heartbeat_of_a_trial_reporting_other_tags_says_what_it_reported():
    out, clock = io.StringIO(), Clock()
    p = Progress(total=1, metric_ids=("val_accuracy",), maximize=True, out=out, clock=clock)
    _started(p, "1")
    clock.t = 131
    p(ev.TrialProgress(trial_id="1", step=None, metrics={}, seconds=31.0,
                       other={"accuracy": (12, 0.69), "loss\x1b[2J": (12, 0.4)}))
    assert stamped(out.getvalue().splitlines())[-1] == (
        "trial 1 running, 31s: no step of the spec's metric yet; reported accuracy=0.69 at step 12, "
        "loss\\x1b[2J=0.4 at step 12")


def test_the_eta_goes_down_while_trials_run_and_no_new_one_finishes():
    """Two slots, trials of 10 s: the estimate counts the running trials' progress, so it falls as they run (the
    job's elapsed time over the trials done rose until the next one finished: 36 s then 54 s here)."""
    out, clock = Terminal(), Clock()
    p = Progress(total=8, metric_ids=("accuracy",), maximize=True, out=out, clock=clock)
    _started(p, "1", "2")
    clock.t += 10
    for trial_id in ("1", "2"):
        p(event("trial_done", {"trial_id": trial_id, "state": "SUCCEEDED", "values": [0.9], "steps": 5,
                               "seconds": 10.0, "params": {}}))
    _started(p, "3", "4")
    etas = []
    for t in (2.0, 5.0, 8.0):
        clock.t = 110 + t  # (the Clock starts at 100)
        for trial_id in ("3", "4"):
            p(ev.TrialProgress(trial_id=trial_id, step=1, metrics={"accuracy": 0.5}, seconds=t))
        etas.append(p._eta(clock()))
    assert etas == [28.0, 25.0, 22.0]  # 4 not started x 10 s + the running trials' rest, over 2 slots


def test_the_end_line_says_when_its_value_is_the_best_steps_not_the_last():
    """The live view shows each step's value; with BEST_MEASUREMENT the end line's value is another step's: labelled."""
    out, clock = Terminal(), Clock()
    p = Progress(total=2, metric_ids=("accuracy",), maximize=True, out=out, clock=clock)
    _started(p, "1", "2")
    p(event("trial_done", {"trial_id": "1", "state": "SUCCEEDED", "values": [0.711], "steps": 12, "seconds": 9.0,
                           "params": {}, "last_step": 12, "final_step": 9}))
    p(event("trial_done", {"trial_id": "2", "state": "SUCCEEDED", "values": [0.69], "steps": 12, "seconds": 9.0,
                           "params": {}, "last_step": 12, "final_step": 12}))
    lines = stamped(screen(out.getvalue()))
    assert "trial 1 SUCCEEDED after 12 steps, 9.0s: accuracy=0.711 (the best, at step 9 of 12)" in lines
    assert "trial 2 SUCCEEDED after 12 steps, 9.0s: accuracy=0.69" in lines
