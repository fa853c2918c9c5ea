"""Early stopping replayed through the job loop: the bar is every trial that reached the step (the stopped ones
up to their stop), it moves as the job learns, it survives a resume, and parallel trials finishing out of order
change nothing of that (issue 48). Fake replicas on a fake clock, a real journal storage.

A trial's loss at step s is ``offset + (x - 0.3)**2 + 1 / (s + 1)`` (``backendkit.s_value``): offsets 2 apart
order the trials whatever their random x (which moves a value by less than 0.5).
"""

from __future__ import annotations

from pathlib import Path

from tests.controller.loop.backendkit import FakeBackend, FakeClock, FakeSignals, Script
from tests.controller.loop.test_runner import replay
from trials.controller.loop.runner import JobRunner
from trials.records import JobState

MEDIAN = "stopping: {type: median}"


def reasons(run_trials: list) -> dict[str, str]:
    return {str(t.number + 1): t.user_attrs.get("stop_reason", "") for t in run_trials
            if t.user_attrs.get("stopped_early")}


def test_the_bar_counts_stopped_trials_so_it_moves_and_a_middling_trial_is_kept(tmp_path: Path) -> None:
    """Trials 1-5 complete (offsets 0-8); 6-11 are worse than all of them and are stopped at their first
    step. Trial 12 (offset 9) is behind every completed trial, but ahead of the median of the 11 trials
    before it: before issue 48 the bar was the completed trials' alone, never moved once no trial completed,
    and trial 12 was stopped too."""
    offsets = {str(i + 1): 2.0 * i for i in range(11)}
    offsets["12"] = 9.0
    run = replay(tmp_path, lambda trial, attempt: Script(steps=10, offset=offsets[trial]), n=12,
                 extra=MEDIAN)
    assert run.state == JobState.SUCCEEDED
    states = [t.state.name for t in run.trials]
    assert states == ["COMPLETE"] * 5 + ["PRUNED"] * 6 + ["COMPLETE"]
    assert all(len(run.steps(n)) == 1 for n in range(5, 11))  # each stopped at its first step
    why = reasons(run.trials)
    assert why["6"].startswith("best value ") and why["6"].endswith(
        "the median of the running averages up to step 1 of 5 trials: trials 1, 2, 3, 4 and 5")
    # the bar of trial 11 was formed by the 5 completed trials and the 5 stopped before it, named
    assert why["11"].endswith("of 10 trials (5 stopped early, up to their stop): trials 1, 2, 3, 4, 5, 6, 7, 8 "
                              "and 2 more")


def test_at_a_step_too_few_trials_reached_the_rule_waits(tmp_path: Path) -> None:
    """The rule waits for 5 trials with a report at the step: trial 5, the worst so far, runs to its end
    (4 trials before it); trial 6, as bad, is stopped at its first step against 5 trials, trial 7 against 6,
    one of them stopped. Before issue 48 the rule waited for 6 completed trials: nothing stopped here."""
    offsets = {"1": 0.0, "2": 2.0, "3": 4.0, "4": 6.0, "5": 8.0, "6": 30.0, "7": 40.0}
    run = replay(tmp_path, lambda trial, attempt: Script(steps=10, offset=offsets[trial]), n=7, extra=MEDIAN)
    assert [t.state.name for t in run.trials[:5]] == ["COMPLETE"] * 5
    assert run.trials[5].state.name == "PRUNED" and len(run.steps(5)) == 1
    assert reasons(run.trials)["6"].endswith("of 5 trials: trials 1, 2, 3, 4 and 5")
    assert reasons(run.trials)["7"].endswith("of 6 trials (1 stopped early, up to their stop): trials 1, 2, 3, 4, "
                                             "5 and 6")


def test_parallel_trials_finishing_out_of_order_give_the_same_bar(tmp_path: Path) -> None:
    """Three slots; trials of different lengths finish out of order (a short trial started late ends first).
    The stopped trials' curves count up to their stop whatever the order their records come in: every
    stop names the trials whose running averages formed its bar, none of them the trial itself."""
    lengths = {"1": 12, "2": 4, "3": 8, "4": 12, "5": 4, "6": 8}
    offsets = {"1": 0.0, "2": 2.0, "3": 4.0, "4": 6.0, "5": 1.0, "6": 0.5}
    run = replay(tmp_path, lambda trial, attempt: Script(steps=lengths.get(trial, 12),
                                                           offset=offsets.get(trial, 50.0)),
                 n=12, parallel=3, extra=MEDIAN)
    assert run.state == JobState.SUCCEEDED
    ended = [t.number + 1 for t in sorted(run.trials, key=lambda t: t.datetime_complete)]
    assert ended != sorted(ended)  # (they did finish out of order)
    why = reasons(run.trials)
    assert set(why) <= {str(i) for i in range(7, 13)} and len(why) >= 4  # the bad late trials, not 1-6
    for trial_id, reason in why.items():
        named = reason.rsplit(": trials ", 1)[-1].replace(" and ", ", ").split(", ")
        assert "running averages up to step" in reason and trial_id not in named
    completed = [t for t in run.trials if t.state.name == "COMPLETE"]
    assert {str(t.number + 1) for t in completed} >= {"1", "2", "3", "4", "5", "6"}


def test_a_resumed_job_counts_the_trials_stopped_before_it(tmp_path: Path) -> None:
    """A job of 8 trials: 5 complete, 3 stopped. Resumed with 2 more, the new controller reads the stopped
    trials' curves from the storage: they are part of its bar (before issue 48 only completed trials were)."""
    offsets = {str(i + 1): 2.0 * i for i in range(5)} | {"6": 40.0, "7": 42.0, "8": 44.0, "9": 46.0, "10": 7.0}
    first = replay(tmp_path, lambda trial, attempt: Script(steps=10, offset=offsets[trial]), n=8, extra=MEDIAN)
    assert [t.state.name for t in first.trials] == ["COMPLETE"] * 5 + ["PRUNED"] * 3
    store, job = first.runner.store, first.runner.job
    store.add_trials(2, job)
    clock = FakeClock()
    factory = FakeBackend(clock, lambda trial, attempt: Script(steps=10, offset=offsets[trial]))
    again = JobRunner(store, job, first.runner.opt, clock=clock, backend=factory, signals=FakeSignals(clock, None))
    assert again.run() == JobState.SUCCEEDED
    trials = sorted(store.frozen_trials(), key=lambda t: t.number)
    why = reasons(trials)
    assert why["9"].endswith("of 8 trials (3 stopped early, up to their stop): trials 1, 2, 3, 4, 5, 6, 7 and 8")
    # trial 10 (offset 7): behind trials 1-4, ahead of the median of the 9 before it (offset 8)
    assert trials[9].state.name == "COMPLETE"
