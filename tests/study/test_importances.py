"""The report's parameter importances: kept beside the job, named by everything they are computed from."""

from __future__ import annotations

import json
import os

import pytest

from benchmarks.read_scale import build_job
from trials.study import importances, replay


@pytest.fixture
def trials(tmp_path) -> list:
    build_job(str(tmp_path), "job", 30, n_running=0, n_waiting=0)
    return replay.read_journal(os.path.join(str(tmp_path), "job", "journal.log")).trials


def test_the_same_trials_give_the_cached_importances_without_computing_them(tmp_path, trials, monkeypatch):
    cache = str(tmp_path / "importances.cache.json")
    first = importances.param_importances(trials, directions=[True], cache_path=cache)
    assert first == importances.param_importances(trials, directions=[True])  # what it computes, cached or not
    assert os.path.exists(cache)
    monkeypatch.setattr(importances, "_fanova", lambda *a: pytest.fail("computed again"))
    assert importances.param_importances(trials, directions=[True], cache_path=cache) == first


@pytest.mark.parametrize("change", ["a value", "the direction", "a trial left out", "foreign file", "garbage",
                                    "a value not a float"])
def test_other_inputs_or_a_damaged_cache_compute_them_anew(tmp_path, trials, change, monkeypatch):
    cache = str(tmp_path / "importances.cache.json")
    importances.param_importances(trials, directions=[True], cache_path=cache)
    directions, leave_out = [True], ()
    done = [t for t in trials if t.state.name == "COMPLETE"]
    if change == "a value":
        done[3].values = [done[3].values[0] + 1e-12]
    elif change == "the direction":
        directions = [False]
    elif change == "a trial left out":
        leave_out = (done[0].number,)
    else:
        with open(cache) as f:
            stored = json.load(f)
        text = {"foreign file": json.dumps({"key": "x" * 64, "values": {"layers": 1.0}}), "garbage": "\x00{",
                "a value not a float": json.dumps({**stored, "values": {"layers": "1"}})}[change]
        with open(cache, "w") as f:
            f.write(text)
    calls = []
    real = importances._fanova
    monkeypatch.setattr(importances, "_fanova", lambda *a: calls.append(1) or real(*a))
    got = importances.param_importances(trials, directions=directions, leave_out=leave_out, cache_path=cache)
    monkeypatch.undo()
    assert calls == [1]
    assert got == importances.param_importances(trials, directions=directions, leave_out=leave_out)


def test_a_cache_that_cannot_be_written_only_costs_the_computation(tmp_path, trials):
    cache = str(tmp_path / "missing folder" / "importances.cache.json")
    assert importances.param_importances(trials, directions=[True], cache_path=cache)[0]
    assert not os.path.exists(cache)
