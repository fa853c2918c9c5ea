"""Early-stopping rules on hand-made curves."""

import statistics

from trials.controller.policy import stopping
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
    m = stopping.MEDIAN_MIN_COMPLETED
    assert not stopping.median_rule(curve([0.1, 0.1]), GOOD[:m - 1]).stop  # too few completed trials
    assert not stopping.median_rule([], GOOD).stop
    assert stopping.median_rule(curve([0.1]), GOOD[:m]).stop
    assert not stopping.median_rule(curve([0.1]), GOOD, min_points=2).stop


def test_the_defaults_wait_for_six_completed_trials_for_the_median_and_ten_for_decay_curve():
    """An 8-trial job had 6 trials stopped at step 1 after 2 completed: too little evidence. The median
    rule acts after 6 (it also needs early ranks to be predictive), the decay-curve rule after 10."""
    assert stopping.MEDIAN_MIN_COMPLETED == 6 and stopping.MIN_COMPLETED == 10
    assert not stopping.median_rule(curve([0.1]), GOOD[:2]).stop
    assert not stopping.median_rule(curve([0.1]), GOOD[:5]).stop
    assert stopping.median_rule(curve([0.1]), GOOD[:6]).stop
    assert not stopping.decay_curve_rule(curve([0.1, 0.15]), GOOD[:9]).stop


def test_no_rule_stops_a_trial_at_its_only_report():
    """AI Platform's pattern: one report at global_step=1000, at the end of every trial."""
    done = [[(1000.0, v)] for v in (0.9, 0.8, 0.85, 0.95, 0.7, 0.88, 0.91, 0.6, 0.93, 0.75, 0.8)]
    for rule in RULES:
        assert not rule([(1000.0, 0.1)], done).stop
        assert not rule([(500.0, 0.1)], done).stop  # completed trials report once: nothing to compare


def test_no_rule_stops_a_trial_at_or_beyond_the_last_step_completed_trials_reached():
    done = [curve([v - k / 100 for v in (0.5, 0.7, 0.8, 0.85, 0.9, 0.91, 0.92, 0.93, 0.94, 0.95)]) for k in range(N)]
    hopeless = curve([0.01] * 10)
    for rule in RULES:
        assert rule(hopeless[:8], done).stop  # a stop before the end saves work
        assert not rule(hopeless, done).stop  # at step 10 of 10: saves nothing
        assert not rule(hopeless + [(11.0, 0.01)], done).stop  # beyond it


def test_no_stop_before_the_minimum_fraction_of_the_horizon():
    done = [curve([0.5 + k / 100] * 40) for k in range(N)]
    assert not stopping.median_rule(curve([0.1, 0.1, 0.1]), done, min_fraction=0.1).stop  # step 3 of 40
    assert stopping.median_rule(curve([0.1] * 4), done, min_fraction=0.1).stop


def test_median_keeps_a_trial_a_hair_below_a_noisy_median():
    """A noisy Keras regression: 14.4511 against a median of 14.44 (minimized) was stopped at epoch 0.
    Noise reorders the trials by the end, so one of the leaders (the completed trials that ended in the
    top quarter) was no better than 14.47 at epochs 0-1: a trial ahead of it is not stopped."""
    starts = (14.40, 14.47, 14.44, 14.52, 14.42, 14.43, 14.50, 14.38)
    ends = (14.36, 14.30, 14.39, 14.33, 14.31, 14.38, 14.32, 14.37)  # leaders: 14.30 and 14.31 at the end
    done = [[(0.0, -a), (1.0, -a + 0.01), (2.0, -b), (3.0, -b)] for a, b in zip(starts, ends, strict=True)]
    assert statistics.median(starts) < 14.4511
    assert not stopping.median_rule([(0.0, -14.4511)], done, maximize=False).stop
    assert not stopping.median_rule([(0.0, -14.4511), (1.0, -14.47)], done, maximize=False).stop
    stop = stopping.median_rule([(0.0, -15.0), (1.0, -14.9)], done, maximize=False)
    assert stop.stop and stop.reason.startswith("best value 14.9 is above 14.46: at step 1, each of the 2 completed ")


def test_ended_early_only_before_the_horizon():
    done = [curve([0.5] * 10)] * N
    assert stopping.ended_early(curve([0.1] * 5), done)
    assert not stopping.ended_early(curve([0.1] * 10), done)  # ran 10 of 10 steps
    assert not stopping.ended_early([], done) and not stopping.ended_early(curve([0.1]), [])


def test_median_stops_a_trial_behind_the_leaders():
    d = stopping.median_rule(curve([0.1, 0.2]), GOOD)
    assert d.stop and "that ended in the top quarter" in d.reason
    assert not stopping.median_rule(curve([0.5, 0.7]), GOOD).stop


def test_median_is_strict():
    # level with the worst leader (0.8 and 0.9 lead: they end in the top quarter) -> keep
    done = [curve([v, v + 0.1, v + 0.2]) for v in (0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)]
    assert not stopping.median_rule(curve([0.8]), done).stop
    assert stopping.median_rule(curve([0.79]), done).stop


def sigmoid(quality, takeoff, steps=30):
    import math

    return curve([(0.6 + 0.35 * quality) / (1 + math.exp(-(t - takeoff) / 2)) for t in range(1, steps + 1)])


# A slow start: the better a trial ends, the later it takes off (steps 3-9), so until about step 10 the
# ranking is upside down; after it, it is the final ranking.
SLOW = [sigmoid(q, 3 + 6 * q) for q in (0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)]


def test_median_never_stops_a_slow_starter_during_the_warm_up():
    """The best trial of a slow-start job looks like the worst one for its first steps. The old rule
    (median of running averages, 10 completed trials, a quarter-IQR margin) stopped such a trial; the
    rule keeps it while it is on the path of one of the leaders."""
    for q in (0.75, 0.8, 0.85, 0.9):
        best = sigmoid(q, 3 + 6 * q)
        assert not any(stopping.median_rule(best[:step], SLOW).stop for step in range(1, 31)), q
        assert not stopping.decide(StoppingSpec(kind=StoppingKind.MEDIAN), best[:5], SLOW).stop
    # the limit of any rule that learns from completed curves: a trial that takes off later than every
    # leader did looks, until then, like a trial that never will (benchmarks/README.md: late_bloomer)
    assert any(stopping.median_rule(sigmoid(1.0, 10.0)[:step], SLOW).stop for step in range(1, 31))


def test_median_stops_a_trial_behind_every_leader_early():
    loser = sigmoid(0.3, 4.8)  # ends below every leader, and is behind them from step 10
    stopped_at = next(step for step in range(1, 31) if stopping.median_rule(loser[:step], SLOW).stop)
    assert stopped_at <= 12  # well before the end (30)
    reason = stopping.median_rule(loser[:stopped_at], SLOW).reason
    assert f": at step {stopped_at}, each of the 3 completed trials (of 10) that ended in the top quarter" in reason
    flat = curve([0.01] * 30)  # behind everyone from the start
    assert stopping.median_rule(flat[:1], SLOW).stop


def test_median_with_nan_values():
    nan = float("nan")
    assert not stopping.median_rule(curve([0.1]), [curve([nan, nan])] * 8).stop  # completed: no number to compare
    d = stopping.median_rule(curve([nan]), [curve([v, v]) for v in (0.5, 0.6, 0.7, 0.8, 0.9, 1.0)])
    assert d.stop and d.reason.startswith("best value NaN (no number reported) is below 0.9: at step 1")


def test_the_leaders_are_the_top_quarter_of_the_completed_trials():
    done = [curve([v, v + 0.1]) for v in (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8)]
    assert stopping.median_rule(curve([0.69]), done).stop  # behind the leaders (0.7, 0.8 at step 1)
    assert not stopping.median_rule(curve([0.7]), done).stop  # level with one: strict
    assert not stopping.median_rule(curve([0.69]), done, top=0.5).stop  # top half: 0.5 at step 1 leads


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
    assert by_step.stop and by_step.reason == (
        "best value 0.1 is below 0.9: at step 2, each of the 5 completed trials (of 10) that ended in the top "
        "quarter had reached 0.9 or better")
    by_time = stopping.median_rule([(1.0, 0.1), (1.5, 0.1)], done, elapsed=True)
    assert by_time.stop and by_time.reason.startswith("best value 0.1 is below 0.9: at 1.5 s, each of the 5 ")
    by_loss = stopping.median_rule([(1.0, -0.95)], [[(x, -v) for x, v in c] for c in done], maximize=False)
    assert by_loss.reason.startswith("best value 0.95 is above 0.8: at step 1, each of the 5 completed trials ")
