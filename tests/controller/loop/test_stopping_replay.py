"""Early stopping replayed through the job loop: the median spec's bar is the worst value at the step of the
leaders, the top quarter of every trial before (the stopped ones ranked below the completed ones, each with its
curve up to its stop); it moves as the job learns, it survives a resume, and parallel trials finishing out of
order change nothing of that (issue 48). Fake replicas on a fake clock, a real journal storage.

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


def test_the_leaders_take_in_more_trials_as_trials_are_stopped_so_a_middling_trial_is_kept(tmp_path: Path) -> None:
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
        "the worst there of the 2 leaders (the top quarter of 6 trials): trials 1 and 2")
    assert why["13"].endswith("the worst there of the 3 leaders (the top quarter of 12 trials): trials 1, 2 and 3")


def test_at_a_step_too_few_trials_reached_the_rule_waits(tmp_path: Path) -> None:
    """The rule waits for 5 trials with a report at the step: trial 5, the worst so far, runs to its end
    (4 trials before it); trial 6, as bad, is stopped at its first step against the leaders of 5 trials,
    trial 7 against those of 6, one of them stopped."""
    offsets = {"1": 0.0, "2": 2.0, "3": 4.0, "4": 6.0, "5": 8.0, "6": 30.0, "7": 40.0}
    run = replay(tmp_path, lambda trial, attempt: Script(steps=10, offset=offsets[trial]), n=7, extra=MEDIAN)
    assert [t.state.name for t in run.trials[:5]] == ["COMPLETE"] * 5
    assert run.trials[5].state.name == "PRUNED" and len(run.steps(5)) == 1
    assert reasons(run.trials)["6"].endswith("(the top quarter of 5 trials): trials 1 and 2")
    assert reasons(run.trials)["7"].endswith("(the top quarter of 6 trials): trials 1 and 2")


def test_parallel_trials_finishing_out_of_order_give_the_same_bar(tmp_path: Path) -> None:
    """Three slots; trials of different lengths finish out of order (a short trial started late ends first).
    The stopped trials' curves count up to their stop whatever the order their records come in: every
    stop names the leaders that formed its bar, none of them the trial itself."""
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
        named = reason.rsplit("): trial", 1)[-1].lstrip("s ").replace(" and ", ", ").split(", ")
        assert "the worst there of the" in reason and named and trial_id not in named
    completed = [t for t in run.trials if t.state.name == "COMPLETE"]
    assert {str(t.number + 1) for t in completed} >= {"1", "2", "3", "4", "5", "6"}


def test_a_resumed_job_counts_the_trials_stopped_before_it(tmp_path: Path) -> None:
    """A job of 8 trials: 5 complete, 3 stopped. Resumed with 2 more, the new controller reads the stopped
    trials' curves from the storage: they are part of its ranking, so trial 10 (offset 3) has 3 leaders of 9
    trials, trial 3 (offset 4) among them, and is kept; with the 5 completed trials alone it had 2 leaders,
    trials 1 and 2, and was stopped."""
    offsets = {str(i + 1): 2.0 * i for i in range(5)} | {"6": 40.0, "7": 42.0, "8": 44.0, "9": 46.0, "10": 3.0}
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
    assert why["9"].endswith("the worst there of the 2 leaders (the top quarter of 8 trials): trials 1 and 2")
    assert trials[9].state.name == "COMPLETE"
