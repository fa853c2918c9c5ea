"""Early-stopping rules on hand-made curves."""

from trials.controller import stopping
from trials.spec import StoppingKind, StoppingSpec


def curve(values, start=1):
    return [(float(i), float(v)) for i, v in enumerate(values, start)]


GOOD = [curve([0.5, 0.7, 0.8, 0.85, 0.9]), curve([0.4, 0.6, 0.75, 0.8, 0.88]), curve([0.45, 0.65, 0.78, 0.86, 0.9])]


def test_median_needs_completed_trials_and_points():
    assert not stopping.median_rule(curve([0.1, 0.1]), GOOD[:1]).stop  # one completed trial: too few
    assert not stopping.median_rule([], GOOD).stop
    assert stopping.median_rule(curve([0.1]), GOOD[:2]).stop  # 2 completed, 1 point: enough


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
    done = [[(1.0, 0.9), (2.0, 0.9)], [(1.0, 0.8), (2.0, 0.8)]]
    by_step = stopping.median_rule([(1.0, 0.1)], done)
    assert by_step.stop and by_step.reason.endswith("of 2 completed trials at step 1")
    by_time = stopping.median_rule([(1.5, 0.1)], done, elapsed=True)
    assert by_time.stop and by_time.reason.endswith("of 2 completed trials at 1.5 s")
