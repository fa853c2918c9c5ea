"""Early stopping replayed through the job loop: the median spec's bar is the worst value at the step of the
leaders, the top fifth of every trial before (the stopped ones ranked below the completed ones, each with its
curve up to its stop; the running ones at their last report); it moves as the job learns, it survives a resume,
and parallel trials finishing out of order change nothing of that (issue 48). Fake replicas on a fake clock, a
real journal storage.

The curves here are parallel (offsets), so every trial worse than the best can never reach it: the median
spec's second part (a trial that cannot reach the best final value, judged from the gains of
``MEDIAN_HOPELESS_COMPLETED`` completed curves no better than it at the step) would stop such a trial once 2
completed trials were behind it. The tests of the leaders turn it off (``leaders_only``); its own test keeps it.

A trial's loss at step s is ``offset + (x - 0.3)**2 + 1 / (s + 1)`` (``backendkit.s_value``): offsets 2 apart
order the trials whatever their random x (which moves a value by less than 0.5).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.controller.loop.backendkit import FakeBackend, FakeClock, FakeSignals, Script
from tests.controller.loop.test_runner import replay
from trials.controller.loop.runner import JobRunner
from trials.controller.policy import stopping
from trials.records import JobState

MEDIAN = "stopping: {type: median}"


@pytest.fixture
def leaders_only(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(stopping, "MEDIAN_HOPELESS_COMPLETED", None)


def reasons(run_trials: list) -> dict[str, str]:
    return {str(t.number + 1): t.user_attrs.get("stop_reason", "") for t in run_trials
            if t.user_attrs.get("stopped_early")}


def test_the_leaders_take_in_more_trials_as_trials_are_stopped_so_a_middling_trial_is_kept(
        tmp_path: Path, leaders_only: None) -> None:
    """Trials 1-5 complete (offsets 0-8). Trial 7 (offset 3.5) is behind both leaders of 6 trials (1 and 2):
    stopped at its first step (Vertex's wording kept it: ahead of the median of the others' running averages).
    Trials 6 and 8-13 are worse than all and are stopped; 13 trials before it, trial 14 (offset 3.5 too) has 3
    leaders, trial 3 (offset 4) among them: on its path, kept."""
    offsets = {str(i + 1): 2.0 * i for i in range(5)} | {str(i): 30.0 + i for i in (6, *range(8, 14))}
    offsets |= {"7": 3.5, "14": 3.5}
    run = replay(tmp_path, lambda trial, attempt: Script(steps=10, offset=offsets[trial]), n=14, extra=MEDIAN)
    assert run.state == JobState.SUCCEEDED
    states = [t.state.name for t in run.trials]
    assert states == ["COMPLETE"] * 5 + ["PRUNED"] * 8 + ["COMPLETE"]
    assert all(len(run.steps(n)) == 1 for n in range(5, 13))  # each stopped at its first step
    why = reasons(run.trials)
    assert why["7"].startswith("value ") and why["7"].endswith(
        "the worst there of the 2 leaders (the top fifth of 6 trials): trials 1 and 2")
    assert why["13"].endswith("the worst there of the 3 leaders (the top fifth of 12 trials): trials 1, 2 and 3")


def test_at_a_step_too_few_trials_reached_the_rule_waits(tmp_path: Path, leaders_only: None) -> None:
    """The rule waits for 5 trials with a report at the step: trial 5, the worst so far, runs to its end
    (4 trials before it); trial 6, as bad, is stopped at its first step against the leader of 5 trials,
    trial 7 against the two of 6."""
    offsets = {"1": 0.0, "2": 2.0, "3": 4.0, "4": 6.0, "5": 8.0, "6": 30.0, "7": 40.0}
    run = replay(tmp_path, lambda trial, attempt: Script(steps=10, offset=offsets[trial]), n=7, extra=MEDIAN)
    assert [t.state.name for t in run.trials[:5]] == ["COMPLETE"] * 5
    assert run.trials[5].state.name == "PRUNED" and len(run.steps(5)) == 1
    assert reasons(run.trials)["6"].endswith("the leader's value there (the top fifth of 5 trials): trial 1")
    assert reasons(run.trials)["7"].endswith("(the top fifth of 6 trials): trials 1 and 2")


def test_parallel_trials_finishing_out_of_order_give_the_same_bar(tmp_path: Path, leaders_only: None) -> None:
    """Three slots; trials of different lengths finish out of order (a short trial started late ends first).
    The stopped trials' curves count up to their stop and the running ones' up to their last report,
    whatever the order their records come in: every stop names the leaders that formed its bar, none of them
    the trial itself; the best trials (1, 5 and 6) run to their end, trial 4, the worst of the first six, may
    be stopped once 5 trials reached its step (the running ones count)."""
    lengths = {"1": 12, "2": 4, "3": 8, "4": 12, "5": 4, "6": 8}
    offsets = {"1": 0.0, "2": 2.0, "3": 4.0, "4": 6.0, "5": 1.0, "6": -1.0}
    run = replay(tmp_path, lambda trial, attempt: Script(steps=lengths.get(trial, 12),
                                                           offset=offsets.get(trial, 50.0)),
                 n=12, parallel=3, extra=MEDIAN)
    assert run.state == JobState.SUCCEEDED
    ended = [t.number + 1 for t in sorted(run.trials, key=lambda t: t.datetime_complete)]
    assert ended != sorted(ended)  # (they did finish out of order)
    why = reasons(run.trials)
    assert {str(i) for i in range(7, 13)} <= set(why) <= {"4"} | {str(i) for i in range(7, 13)}
    for trial_id, reason in why.items():
        named = reason.rsplit("): trial", 1)[-1].lstrip("s ").replace(" and ", ", ").split(", ")
        assert ("the worst there of the" in reason or "the leader's value there" in reason) and named
        assert trial_id not in named
    completed = [t for t in run.trials if t.state.name == "COMPLETE"]
    assert {str(t.number + 1) for t in completed} >= {"1", "2", "3", "5", "6"}


def test_a_resumed_job_counts_the_trials_stopped_before_it(tmp_path: Path, leaders_only: None) -> None:
    """A job of 10 trials: 5 complete, 5 stopped. Resumed with 2 more, the new controller reads the stopped
    trials' curves from the storage: they are part of its ranking, so trial 12 (offset 3) has 3 leaders of 11
    trials, trial 3 (offset 4) among them, and is kept; with the 5 completed trials alone it had 1 leader,
    trial 1, and was stopped."""
    offsets = {str(i + 1): 2.0 * i for i in range(5)} | {str(i): 30.0 + 2 * i for i in range(6, 12)}
    offsets["12"] = 3.0
    first = replay(tmp_path, lambda trial, attempt: Script(steps=10, offset=offsets[trial]), n=10, extra=MEDIAN)
    assert [t.state.name for t in first.trials] == ["COMPLETE"] * 5 + ["PRUNED"] * 5
    store, job = first.runner.store, first.runner.job
    store.add_trials(2, job)
    clock = FakeClock()
    factory = FakeBackend(clock, lambda trial, attempt: Script(steps=10, offset=offsets[trial]))
    again = JobRunner(store, job, first.runner.opt, clock=clock, backend=factory, signals=FakeSignals(clock, None))
    assert again.run() == JobState.SUCCEEDED
    trials = sorted(store.frozen_trials(), key=lambda t: t.number)
    why = reasons(trials)
    assert why["11"].endswith("the worst there of the 2 leaders (the top fifth of 10 trials): trials 1 and 2")
    assert trials[11].state.name == "COMPLETE"


def test_running_trials_count_toward_the_wait_so_the_trials_after_the_first_ones_are_judged(
        tmp_path: Path, leaders_only: None) -> None:
    """Two slots: trials 5 and 6 start together once 1-4 completed. Counting the finished trials alone, 4
    reach each step and the rule waits: both ran their 10 steps. The trial beside each one counts (its
    curve so far): 5 trials give a bar, and both bad trials are stopped within their first two steps."""
    offsets = {"1": 0.0, "2": 2.0, "3": 4.0, "4": 6.0, "5": 30.0, "6": 32.0}
    run = replay(tmp_path, lambda trial, attempt: Script(steps=10, offset=offsets[trial]), n=6, parallel=2,
                 extra=MEDIAN)
    assert run.state == JobState.SUCCEEDED
    assert [t.state.name for t in run.trials] == ["COMPLETE"] * 4 + ["PRUNED"] * 2
    assert all(len(run.steps(n)) <= 2 for n in (4, 5))
    assert any("(the top fifth of 5 trials" in r for r in reasons(run.trials).values())


def test_the_median_spec_stops_a_trial_that_cannot_reach_the_best_final_before_five_trials_give_a_bar(
        tmp_path: Path) -> None:
    """One trial at a time. Trials 1-3 complete (offsets 0, 6, 8): too few trials for the leaders' bar (the rule
    waits for 5), and trials 2 and 3 are each behind every completed curve at every step, so no completed curve
    says how far a curve from there gets: they run their 10 steps. Trial 4 (offset 4) is ahead of trials 2 and 3
    at its first step, and neither of them gained enough from there to bring it to trial 1's final value:
    stopped at step 1, the 2 trials named."""
    offsets = {"1": 0.0, "2": 6.0, "3": 8.0, "4": 4.0}
    run = replay(tmp_path, lambda trial, attempt: Script(steps=10, offset=offsets[trial]), n=4, extra=MEDIAN)
    assert [t.state.name for t in run.trials] == ["COMPLETE"] * 3 + ["PRUNED"]
    assert [len(run.steps(n)) for n in range(4)] == [10, 10, 10, 1]
    why = reasons(run.trials)["4"]
    assert why.startswith("even the largest gain from here of the 2 completed trials no better than it at step 1 "
                          "that ran past it (")
    assert ": trials 2 and 3) would end at " in why and why.endswith("(trial 1)")
