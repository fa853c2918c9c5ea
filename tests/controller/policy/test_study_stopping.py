"""The study stopping rules of ``studyStoppingConfig``, one field at a time, and their order."""

from __future__ import annotations

from trials.controller.policy.study_stopping import Finished, StudyStopping, TimeConstraint, decide

T0 = 1_800_000_000.0


def ask(config: StudyStopping, *, now: float = T0 + 100, n_trials: int = 3, finished=(), single: bool = True):
    return decide(config, began=T0, now=now, n_trials=n_trials, finished=list(finished), single_objective=single)


def done(*values: float | None, every_s: float = 10.0) -> list[Finished]:
    return [Finished(end_time=T0 + every_s * (i + 1), value=v) for i, v in enumerate(values)]


def test_no_rule_never_stops():
    assert not ask(StudyStopping(), finished=done(1, 2, 3)).stop


def test_maximum_runtime_stops_once_its_duration_or_end_time_has_passed():
    by_duration = StudyStopping(maximum_runtime=TimeConstraint(max_duration_s=60))
    assert not ask(by_duration, now=T0 + 59).stop
    d = ask(by_duration, now=T0 + 60)
    assert d.stop and "maximumRuntimeConstraint" in d.reason and "(60s since the job began" in d.reason
    by_end = StudyStopping(maximum_runtime=TimeConstraint(end_time=T0 + 30))
    assert not ask(by_end, now=T0 + 29).stop and ask(by_end, now=T0 + 31).stop


def test_max_num_trials_stops_with_more_trials_than_it_says():
    config = StudyStopping(max_num_trials=5)
    assert not ask(config, n_trials=5).stop  # "If there are more than this many trials, stop"
    d = ask(config, n_trials=6)
    assert d.stop and "would make 6, more than studyStoppingConfig.maxNumTrials (5)" in d.reason


def test_no_progress_for_n_consecutive_trials_stops_single_objective_studies():
    config = StudyStopping(max_num_trials_no_progress=3)
    assert not ask(config, finished=done(0.5, 0.6, 0.4, 0.3)).stop  # 2 since the best (0.6)
    d = ask(config, finished=done(0.5, 0.6, 0.4, 0.3, None))  # an infeasible trial made no progress
    assert d.stop and "3 consecutive trials" in d.reason
    assert not ask(config, finished=done(0.5, 0.6, 0.4, 0.3, None), single=False).stop
    assert not ask(config, finished=done(0.1, 0.2, 0.3, 0.4, 0.5)).stop  # always improving


def test_no_progress_for_a_duration_counts_from_the_best_trials_end():
    config = StudyStopping(max_duration_no_progress_s=25)
    finished = done(0.5, 0.9, 0.1)  # the best ended at T0 + 20
    assert not ask(config, now=T0 + 44, finished=finished).stop
    d = ask(config, now=T0 + 45, finished=finished)
    assert d.stop and "maxDurationNoProgress" in d.reason
    assert not ask(config, now=T0 + 999, finished=done(None, None)).stop  # nothing completed yet


def test_minimum_runtime_and_min_num_trials_hold_the_other_rules_back():
    # the reference's example: min_num_trials 5 and a one-hour maximum: it stops ONLY after 5 COMPLETED
    config = StudyStopping(min_num_trials=5, maximum_runtime=TimeConstraint(max_duration_s=3600))
    late = T0 + 7200
    assert not ask(config, now=late, finished=done(1, 2, 3, None, 4)).stop  # 4 completed
    assert ask(config, now=late, finished=done(1, 2, 3, 4, 5)).stop
    held = StudyStopping(minimum_runtime=TimeConstraint(max_duration_s=600), max_num_trials=1)
    assert not ask(held, now=T0 + 599, n_trials=10).stop
    assert ask(held, now=T0 + 600, n_trials=10).stop
