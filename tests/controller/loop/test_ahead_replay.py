"""Suggestions made ahead of time, replayed: a scripted sampler on the fake clock (``trials.study.ahead``).

The loop must never wait for a suggestion: trials end and are recorded, metrics are read and signals
are heard while one is being made; a free slot waits for it; a failed one makes the trial random
with a warning; one that comes after a cancel starts nothing.
"""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

from tests.controller.loop.backendkit import FakeClock, Script
from tests.controller.loop.test_runner import replay
from trials.records import JobState
from trials.study.ahead import Suggestion
from trials.timefmt import parse_rfc3339, rfc3339


class ScriptedSuggestions:
    """Each prefetch is answered ``delays[k]`` fake seconds later with ``answers[k]`` (default x=0.5+k/100)."""

    def __init__(self, clock: FakeClock, store: Any, delays: list[float],
                 answers: dict[int, Suggestion] | None = None):
        self.clock, self.store = clock, store
        self.delays, self.answers = delays, answers or {}
        self.asked: list[tuple[float, list[int]]] = []  # (when, the RUNNING trials' numbers then)
        self.pending: tuple[float, Suggestion] | None = None
        self.ready: Suggestion | None = None
        self.closed_at: float | None = None

    def prefetch(self, *, needed: bool = False) -> None:
        if self.pending is not None or self.ready is not None:
            return
        k = len(self.asked)
        running = sorted(t.number for t in self.store.running_trials())
        self.asked.append((self.clock.t - 1000.0, running))
        answer = self.answers.get(k, Suggestion({"x": 0.5 + k / 100}))
        self.pending = (self.clock.t + (self.delays[k] if k < len(self.delays) else 0.0), answer)

    def take(self) -> Suggestion | None:
        if self.ready is None and self.pending is not None and self.clock.t >= self.pending[0]:
            self.ready, self.pending = self.pending[1], None
        ready, self.ready = self.ready, None
        return ready

    def give_back(self, suggestion: Suggestion) -> None:
        self.ready = self.ready or suggestion

    def pump(self) -> None:
        pass

    def fileno(self) -> int | None:
        return None

    def close(self) -> None:
        self.closed_at = self.clock.t - 1000.0

    def stats(self) -> dict[str, float]:
        return {"suggestions": float(len(self.asked)), "suggest_cpu_s": 0.25}


def test_the_suggested_parameters_are_the_trials_and_each_is_asked_after_the_previous_launch(tmp_path: Path) -> None:
    box: dict[str, ScriptedSuggestions] = {}

    def make(clock: FakeClock, store: Any) -> ScriptedSuggestions:
        box["s"] = ScriptedSuggestions(clock, store, delays=[0.0, 0.0, 1.0])
        return box["s"]

    run = replay(tmp_path, lambda trial, attempt: Script(steps=3), n=3, parallel=2, suggestions=make)
    assert run.state == JobState.SUCCEEDED
    assert [t.params["x"] for t in run.trials] == [0.5, 0.51, 0.52]
    started = [d for e, d in run.events if e == "trial_started"]
    assert [d["params"]["x"] for d in started] == [0.5, 0.51, 0.52]
    # the first at the job's start, each later one right after a launch: the running trials are pending
    asked = box["s"].asked
    assert asked[:3] == [(0.0, []), (0.0, [0]), (0.0, [0, 1])], asked
    meta = run.runner.store  # the worker's counts, recorded with the job's end
    assert (meta.meta().suggestions, meta.meta().suggest_cpu_s) == (len(asked), 0.25)


def test_a_20_second_suggestion_holds_only_the_free_slot(tmp_path: Path) -> None:
    # Trial 3's parameters take 20 s (OSS Vizier can): trial 1 ends at 3 s and is recorded then,
    # trial 2 goes on reporting its steps, SIGTERM-free; trial 3 starts when its answer comes.
    box: dict[str, ScriptedSuggestions] = {}

    def make(clock: FakeClock, store: Any) -> ScriptedSuggestions:
        box["s"] = ScriptedSuggestions(clock, store, delays=[0.0, 0.0, 20.0])
        return box["s"]

    run = replay(tmp_path, lambda trial, attempt: Script(steps={"1": 3, "2": 25}.get(trial, 2)), n=3, parallel=2,
                 suggestions=make)
    assert run.state == JobState.SUCCEEDED
    base = 1_800_000_000.0 + 1000.0
    ends = {t.number + 1: t.user_attrs["end_time"] for t in run.trials}
    assert ends[1] == rfc3339(base + 3.0), ends  # recorded at its exit, not after the suggestion
    assert run.steps(1) == list(range(1, 26))
    started = parse_rfc3339(run.trials[2].user_attrs["start_time"]) - base
    assert 20.0 <= started <= 20.0 + 0.06, started  # when its answer came (the next pass: one poll)
    assert parse_rfc3339(ends[3]) - base == started + 2.0, ends


def test_a_failed_suggestion_makes_that_trial_random_and_says_so(tmp_path: Path) -> None:
    failed = Suggestion(None, warning="the sampler failed (RuntimeError: no GP); its parameters were sampled at random")

    def make(clock: FakeClock, store: Any) -> ScriptedSuggestions:
        return ScriptedSuggestions(clock, store, delays=[0.0, 0.5], answers={1: failed})

    run = replay(tmp_path, lambda trial, attempt: Script(steps=2), n=3, suggestions=make)
    assert run.state == JobState.SUCCEEDED
    assert run.trials[0].params["x"] == 0.5 and run.trials[2].params["x"] == 0.52
    assert 0.0 <= run.trials[1].params["x"] <= 1.0 and run.trials[1].params["x"] not in (0.5, 0.51)
    warnings = [d for e, d in run.events if e == "warning"]
    assert warnings == [{"message": "trial 2: the sampler failed (RuntimeError: no GP); its parameters were "
                                    "sampled at random", "trial_id": "2"}], warnings


def test_a_suggestion_that_comes_after_a_cancel_starts_nothing(tmp_path: Path) -> None:
    box: dict[str, ScriptedSuggestions] = {}

    def make(clock: FakeClock, store: Any) -> ScriptedSuggestions:
        box["s"] = ScriptedSuggestions(clock, store, delays=[0.0, 0.0, 20.0])
        return box["s"]

    run = replay(tmp_path, lambda trial, attempt: Script(steps={"1": 3}.get(trial, 30)), n=4, parallel=2,
                 suggestions=make, at=[(6.0, signal.SIGTERM)])
    assert run.state == JobState.CANCELLED
    assert len(run.factory.started) == 2  # trial 3's answer (due at 20 s) never started a trial
    assert [t.user_attrs.get("state") for t in run.trials[2:]] == [None, None]  # never claimed
    assert box["s"].closed_at is not None and box["s"].closed_at < 20.0  # dropped, not waited for
