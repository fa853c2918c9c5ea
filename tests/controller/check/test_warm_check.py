"""`trials check --warm-start`: one line saying whether a trainer is safe to fork from a warm launcher."""

from __future__ import annotations

import json
import sys
import textwrap

import pytest

from trials.cli import main
from trials.controller.check import warm
from trials.controller.check.scorecard import SeenReport, Verdict

SPEC = """
metrics: {accuracy: maximize}
parameters:
  learning_rate: {type: double, min: 0.01, max: 0.1}
"""

REPORT = """
import sys
import hypertune
ht = hypertune.HyperTune()
for step in (1, 2, 3):
    ht.report_hyperparameter_tuning_metric(hyperparameter_metric_tag="accuracy", metric_value=value(step),
                                           global_step=step)
"""

TRAINERS = {
    # seeded: every run reports the same values
    "seeded": ("import random\nrandom.seed(0)\ndef value(step):\n    return random.random()\n", {}),
    # not seeded: each process draws its own (a warm child too: the launcher's generator is reseeded)
    "unseeded": ("import random\ndef value(step):\n    return random.random()\n", {}),
    # a value drawn at import, in a module the launcher imports: every warm child has the launcher's
    "frozen": ("import stamp\ndef value(step):\n    return stamp.VALUE + step\n",
               {"stamp.py": "import os\nVALUE = int.from_bytes(os.urandom(4), 'big') / 2 ** 32\n"}),
    # a module that starts a thread when imported: the launcher never forks then
    "thread": ("import ticker\ndef value(step):\n    return 0.5\n",
               {"ticker.py": "import threading, time\n"
                             "threading.Thread(target=lambda: time.sleep(3600), daemon=True).start()\n"}),
}


def warm_line(tmp_path, capsys, monkeypatch, trainer: str) -> dict[str, str]:
    source, site_files = TRAINERS[trainer]
    site = tmp_path / "site"
    site.mkdir()
    for name, text in site_files.items():
        (site / name).write_text(text)
    launch = tmp_path / "launch"
    launch.mkdir()
    (launch / "spec.yaml").write_text(SPEC)
    (launch / "train.py").write_text(source + textwrap.dedent(REPORT))
    monkeypatch.chdir(launch)
    monkeypatch.setenv("PYTHONPATH", str(site))
    main(["check", "spec.yaml", "--format", "json", "--grace-period", "3", "--warm-start", "--",
          sys.executable, "train.py"])
    card = json.loads(capsys.readouterr().out)
    lines = [c for c in card["checks"] if c["check"] == warm.CHECK]
    assert len(lines) == 1, card
    return lines[0]


pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="warm trials need Linux")


def test_a_seeded_trainer_reports_the_same_values_warm_and_fresh(tmp_path, capsys, monkeypatch):
    line = warm_line(tmp_path, capsys, monkeypatch, "seeded")
    assert line["verdict"] == "pass", line
    assert "the same 3 values fresh (2 runs) and warm (2 runs)" in line["seen"]


def test_an_unseeded_trainers_warm_runs_draw_their_own_numbers(tmp_path, capsys, monkeypatch):
    line = warm_line(tmp_path, capsys, monkeypatch, "unseeded")
    assert line["verdict"] == "info", line
    assert "each warm run drew its own random numbers" in line["seen"]


def test_a_value_drawn_at_import_is_shared_by_the_warm_runs_and_fails(tmp_path, capsys, monkeypatch):
    line = warm_line(tmp_path, capsys, monkeypatch, "frozen")
    assert line["verdict"] == "fail", line
    assert "the two warm runs reported the same values: the children share a random state" in line["seen"]


def test_a_thread_started_by_an_import_says_the_trainer_cannot_start_warm(tmp_path, capsys, monkeypatch):
    line = warm_line(tmp_path, capsys, monkeypatch, "thread")
    assert line["verdict"] == "fail", line
    assert "run 2 could not start warm: " in line["seen"] and "threads" in line["seen"], line


def test_without_the_flag_there_is_no_warm_line(tmp_path, capsys, monkeypatch):
    (tmp_path / "spec.yaml").write_text(SPEC)
    (tmp_path / "train.py").write_text(TRAINERS["seeded"][0] + textwrap.dedent(REPORT))
    monkeypatch.chdir(tmp_path)
    main(["check", "spec.yaml", "--format", "json", "--grace-period", "3", "--", sys.executable, "train.py"])
    card = json.loads(capsys.readouterr().out)
    assert warm.CHECK not in {c["check"] for c in card["checks"]}


def reports(*values: float) -> list[SeenReport]:
    return [SeenReport(tag="accuracy", step=i, value=v) for i, v in enumerate(values, start=1)]


def test_a_seeded_trainer_whose_warm_run_differs_fails_at_the_first_difference():
    seen = warm.WarmSeen(runs=[warm.WarmRun(warm=False, exit_code=0, reports=reports(0.5, 0.6)),
                               warm.WarmRun(warm=True, exit_code=0, reports=reports(0.5, 0.7)),
                               warm.WarmRun(warm=True, exit_code=0, reports=reports(0.5, 0.6))])
    line = warm.judge(seen, reports(0.5, 0.6))
    assert line.verdict is Verdict.FAIL
    assert "accuracy at step 2: 0.7 warm, 0.6 fresh" in line.seen


def test_a_warm_run_that_fails_where_the_fresh_one_passed_fails():
    seen = warm.WarmSeen(runs=[warm.WarmRun(warm=False, exit_code=0, reports=reports(0.5)),
                               warm.WarmRun(warm=True, exit_code=1),
                               warm.WarmRun(warm=True, exit_code=0, reports=reports(0.5))])
    line = warm.judge(seen, None)
    assert line.verdict is Verdict.FAIL and "warm run 2 exited 1 where the fresh run exited 0" in line.seen
