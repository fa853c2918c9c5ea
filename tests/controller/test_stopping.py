"""Early-stopping rules on hand-made curves."""

from trials.controller import stopping
from trials.spec import StoppingKind, StoppingSpec


def curve(values, start=1):
    return [(float(i), float(v)) for i, v in enumerate(values, start)]


GOOD = [curve([0.5, 0.7, 0.8, 0.85, 0.9]), curve([0.4, 0.6, 0.75, 0.8, 0.88]), curve([0.45, 0.65, 0.78, 0.86, 0.9])] * 4
N = stopping.MIN_COMPLETED


RULES = [
    lambda cur, done: stopping.median_rule(cur, done),
    lambda cur, done: stopping.decay_curve_rule(cur, done),
    lambda cur, done: stopping.convex_rule(cur, done, max_step=None, min_step=None, min_measurements=1),
    lambda cur, done: stopping.decide(StoppingSpec(kind=StoppingKind.MEDIAN), cur, done),
]


def test_median_needs_completed_trials_and_points():
    assert not stopping.median_rule(curve([0.1, 0.1]), GOOD[:N - 1]).stop  # too few completed trials
    assert not stopping.median_rule([], GOOD).stop
    assert stopping.median_rule(curve([0.1]), GOOD[:N]).stop
    assert not stopping.median_rule(curve([0.1]), GOOD, min_points=2).stop


def test_the_defaults_wait_for_ten_completed_trials():
    """An 8-trial job had 6 trials stopped at step 1 after 2 completed: too little evidence."""
    assert stopping.MIN_COMPLETED == 10
    assert not stopping.median_rule(curve([0.1]), GOOD[:2]).stop


def test_no_rule_stops_a_trial_at_its_only_report():
    """AI Platform's pattern: one report at global_step=1000, at the end of every trial."""
    done = [[(1000.0, v)] for v in (0.9, 0.8, 0.85, 0.95, 0.7, 0.88, 0.91, 0.6, 0.93, 0.75, 0.8)]
    for rule in RULES:
        assert not rule([(1000.0, 0.1)], done).stop
        assert not rule([(500.0, 0.1)], done).stop  # completed trials report once: nothing to compare


def test_no_rule_stops_a_trial_at_or_beyond_the_last_step_completed_trials_reached():
    done = [curve([0.5, 0.7, 0.8, 0.85, 0.9, 0.91, 0.92, 0.93, 0.94, 0.95])] * N
    hopeless = curve([0.01] * 10)
    for rule in RULES:
        assert rule(hopeless[:8], done).stop  # a stop before the end saves work
        assert not rule(hopeless, done).stop  # at step 10 of 10: saves nothing
        assert not rule(hopeless + [(11.0, 0.01)], done).stop  # beyond it


def test_no_stop_before_the_minimum_fraction_of_the_horizon():
    done = [curve([0.5] * 40)] * N
    assert not stopping.median_rule(curve([0.1, 0.1, 0.1]), done, min_fraction=0.1).stop  # step 3 of 40
    assert stopping.median_rule(curve([0.1] * 4), done, min_fraction=0.1).stop


def test_median_keeps_a_trial_a_hair_below_a_noisy_median():
    """A noisy Keras regression: 14.4511 against a median of 14.44 (minimized) is noise, not a loser."""
    done = [[(0.0, -v), (1.0, -v + 0.02), (2.0, -v + 0.03)] for v in (14.40, 14.44, 14.48, 14.52)] * 3
    keep = stopping.median_rule([(0.0, -14.4511), (1.0, -14.46)], done, maximize=False)
    assert not keep.stop
    assert stopping.median_rule([(0.0, -15.0), (1.0, -14.9)], done, maximize=False).stop


def test_ended_early_only_before_the_horizon():
    done = [curve([0.5] * 10)] * N
    assert stopping.ended_early(curve([0.1] * 5), done)
    assert not stopping.ended_early(curve([0.1] * 10), done)  # ran 10 of 10 steps
    assert not stopping.ended_early([], done) and not stopping.ended_early(curve([0.1]), [])


def test_median_stops_a_trial_below_the_median_running_average():
    d = stopping.median_rule(curve([0.1, 0.2]), GOOD)
    assert d.stop and "median" in d.reason
    assert not stopping.median_rule(curve([0.5, 0.7]), GOOD).stop


def test_median_is_strict():
    # best == median of running averages -> keep
    same = [curve([0.5, 0.5])] * 3
    assert not stopping.median_rule(curve([0.5, 0.5]), same).stop


def test_orient_makes_minimized_metrics_larger_is_better():
    assert stopping.orient(0.3, maximize=False) == -0.3


def test_decay_curve_stops_hopeless_and_keeps_promising():
    assert stopping.decay_curve_rule(curve([0.1, 0.15]), GOOD).stop
    assert not stopping.decay_curve_rule(curve([0.5, 0.68]), GOOD).stop


def test_convex_extrapolates_and_predicts_final():
    completed = [curve([0.5, 0.7, 0.8, 0.85, 0.88, 0.9, 0.91, 0.92, 0.93, 0.94])] * 6
    slow = curve([0.1, 0.15, 0.18, 0.2, 0.21])
    d = stopping.convex_rule(slow, completed, max_step=10, min_step=None, min_measurements=5)
    assert d.stop and d.predicted_x == 10 and d.predicted_final < 0.94
    fast = curve([0.5, 0.7, 0.8, 0.85, 0.88])
    assert not stopping.convex_rule(fast, completed, max_step=10, min_step=None, min_measurements=5).stop


def test_decide_dispatches_by_kind():
    spec = StoppingSpec(kind=StoppingKind.MEDIAN)
    assert stopping.decide(spec, curve([0.1, 0.2]), GOOD).stop


def test_median_reason_says_at_which_step_or_second():
    done = [[(1.0, 0.9), (2.0, 0.9), (3.0, 0.9)], [(1.0, 0.8), (2.0, 0.8), (3.0, 0.8)]] * 5
    by_step = stopping.median_rule([(1.0, 0.1), (2.0, 0.1)], done)
    assert by_step.stop and by_step.reason.endswith("of 10 completed trials at step 2")
    by_time = stopping.median_rule([(1.0, 0.1), (1.5, 0.1)], done, elapsed=True)
    assert by_time.stop and by_time.reason.endswith("of 10 completed trials at 1.5 s")
