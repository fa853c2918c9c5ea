"""The launcher starts with the first trial, on its script's own imports, and takes the rest from the survey."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from tests.controller.warm.test_warm_backend import Bench, lines
from trials.controller.warm import command

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the host sandbox needs Linux")


def test_script_imports_are_the_top_level_absolute_ones():
    source = b"""
import os, numpy.linalg as la
from sklearn.datasets import load_digits
from . import local
from jax import numpy
import trials.controller.warm.child
try:
    import optional
except ImportError:
    pass
def f():
    import lazy
"""
    assert command.script_imports(source) == ["os", "numpy.linalg", "sklearn.datasets",
                                              "sklearn.datasets.load_digits"]
    assert command.script_imports(b"import (") == []


def test_a_trial_started_while_the_survey_runs_is_forked_and_later_ones_have_its_lazy_imports(tmp_path):
    """Before: the launcher started once the first trial (the survey) ended: the trials beside it ran fresh."""
    gate = tmp_path / "job" / "1" / "go"  # (in the first trial's folder: its sandbox sees it change)
    b = Bench(tmp_path, f"""
        import os, sys, time
        import eager
        print("lazy_before=" + str("lazy" in sys.modules))
        print("warm=" + str(WARM))
        def load():
            import lazy
        load()
        if os.environ["CLOUD_ML_TRIAL_ID"] == "1":  # the survey waits until the test has seen trial 2
            while not os.path.exists({str(gate)!r}):
                time.sleep(0.05)
    """)
    (b.site / "eager.py").write_text("VALUE = 1\n")
    (b.site / "lazy.py").write_text("VALUE = 2\n")
    try:
        survey, log = b.start()
        status, text = b.run()
        assert status == 0, text
        assert lines(text) == {"lazy_before": "False", "warm": "True"}, (text, b.said)
        assert survey.poll() is None, Path(log).read_text()
        gate.write_text("")
        deadline = time.monotonic() + 60
        while survey.poll() is None:
            assert time.monotonic() < deadline, Path(log).read_text()
            time.sleep(0.02)
        assert lines(Path(log).read_text())["warm"] == "False"
        status, text = b.run()
        assert status == 0, text
        assert lines(text) == {"lazy_before": "True", "warm": "True"}, (text, b.said)
    finally:
        b.close()


def test_a_warm_trial_imports_what_was_not_preloaded_from_the_first_pythonpath_entry(tmp_path):
    """Before: the child's script folder replaced sys.path[0], which in a launcher is PYTHONPATH's first."""
    b = Bench(tmp_path, """
        import os
        print("warm=" + str(WARM))
        if os.environ["CLOUD_ML_TRIAL_ID"] != "1":
            import later
            print("later=" + str(later.VALUE))
    """)
    (b.site / "later.py").write_text("VALUE = 3\n")
    try:
        assert b.run()[0] == 0
        status, text = b.run()
        assert (status, lines(text)) == (0, {"warm": "True", "later": "3"}), (text, b.said)
    finally:
        b.close()


@pytest.mark.parametrize("entry", ["absolute", "relative"])
def test_a_pythonpath_entry_in_the_launch_folder_is_the_warm_trials_too(tmp_path, entry):
    """The launcher takes the launch folder off its own path (it must not import from there), but a fresh
    trainer has it (PYTHONPATH=src is common): before, a warm trial could not import its own package."""
    b = Bench(tmp_path, """
        import helper
        print("warm=" + str(WARM))
        print("helper=" + helper.VALUE)
    """)
    (b.launch / "src").mkdir()
    (b.launch / "src" / "helper.py").write_text("VALUE = 'mine'\n")
    try:
        src = str(b.launch / "src") if entry == "absolute" else "src"  # (made absolute by each interpreter)
        env = {"PYTHONPATH": f"{src}:{b.site}"}
        assert b.run(**env)[0] == 0
        status, text = b.run(**env)
        assert (status, lines(text)) == (0, {"warm": "True", "helper": "mine"}), (text, b.said)
    finally:
        b.close()


def test_a_trial_waits_for_a_launcher_whose_imports_are_slow_rather_than_start_fresh(tmp_path):
    """A fresh start would import as much itself (the launcher started first); before, a trial waited 5 s, then
    ran fresh: under load torch and sklearn took longer to import than that."""
    b = Bench(tmp_path, """
        import os, time
        import slow
        print("warm=" + str(WARM))
        if os.environ["CLOUD_ML_TRIAL_ID"] == "1":
            time.sleep(3)
    """)
    (b.site / "slow.py").write_text("import time\ntime.sleep(7)\n")
    try:
        survey, log = b.start()
        status, text = b.run()
        assert (status, lines(text)) == (0, {"warm": "True"}), (text, b.said)
        deadline = time.monotonic() + 120
        while survey.poll() is None:
            assert time.monotonic() < deadline, Path(log).read_text()
            time.sleep(0.02)
    finally:
        b.close()


def test_a_launcher_that_never_finishes_importing_is_dropped_and_said(tmp_path, monkeypatch):
    from trials.controller.warm import backend

    monkeypatch.setattr(backend, "IMPORT_CAP_S", 3.0)
    b = Bench(tmp_path, """
        import stuck
        print("warm=" + str(WARM))
    """)
    (b.site / "stuck.py").write_text(
        "import os, time\nif os.environ.get('CLOUD_ML_TRIAL_ID') is None:  # (only in the launcher)\n"
        "    time.sleep(3600)\n")
    try:
        assert lines(b.run()[1]) == {"warm": "False"}  # the survey
        assert lines(b.run()[1]) == {"warm": "False"}
        assert any("did not finish importing in 3 s" in line for line in b.said), b.said
    finally:
        b.close()
