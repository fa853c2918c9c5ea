"""Early-stopping rules on hand-made curves."""


from trials.controller.policy import stopping
from trials.controller.policy.stopping import Reference
from trials.spec import StoppingKind, StoppingSpec


def curve(values, start=1):
    return [(float(i), float(v)) for i, v in enumerate(values, start)]


GOOD = [curve([0.5, 0.7, 0.8, 0.85, 0.9]), curve([0.4, 0.6, 0.75, 0.8, 0.88]), curve([0.45, 0.65, 0.78, 0.86, 0.9])] * 4
N = 10


RULES = [
    lambda cur, done: stopping.median_rule(cur, done),
    lambda cur, done: stopping.decay_curve_rule(cur, done),
    lambda cur, done: stopping.convex_rule(cur, done, max_step=None, min_step=None, min_measurements=1),
    lambda cur, done: stopping.decide(StoppingSpec(kind=StoppingKind.MEDIAN), cur, done),
]


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


def test_ended_early_only_before_the_horizon():
    done = [curve([0.5] * 10)] * N
    assert stopping.ended_early(curve([0.1] * 5), done)
    assert not stopping.ended_early(curve([0.1] * 10), done)  # ran 10 of 10 steps
    assert not stopping.ended_early([], done) and not stopping.ended_early(curve([0.1]), [])


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
    done = [[(1.0, 0.9), (2.0, 0.9), (3.0, 0.9)], [(1.0, 0.8), (2.0, 0.8), (3.0, 0.8)]] * 3
    by_step = stopping.median_rule([(1.0, 0.1), (2.0, 0.1)], done)
    assert by_step.stop and by_step.reason == (
        "best value 0.1 is below 0.85, the median of the running averages up to step 2 of 6 trials")
    by_time = stopping.median_rule([(1.0, 0.1), (1.5, 0.1)], done, elapsed=True)
    assert by_time.stop and "up to 1.5 s of 6 trials" in by_time.reason
    by_loss = stopping.median_rule([(1.0, -0.95)], [[(x, -v) for x, v in c] for c in done], maximize=False)
    assert by_loss.reason.startswith("best value 0.95 is above 0.85, the median ")


def ref(values, trial_id, completed=True):
    return Reference(curve=curve(values), trial_id=trial_id, completed=completed)


def test_median_is_vertexs_best_value_against_the_median_of_running_averages_strictly():
    done = [ref([v, v + 0.2, v + 0.2], str(i + 1)) for i, v in enumerate((0.1, 0.3, 0.5, 0.7, 0.9))]
    # running averages up to step 1: 0.1 .. 0.9, median 0.5
    assert not stopping.median_rule(curve([0.5]), done).stop  # level: kept (strictly below stops)
    d = stopping.median_rule(curve([0.49]), done)
    assert d.stop and d.reason.endswith("of 5 trials: trials 1, 2, 3, 4 and 5")
    # up to step 2 the running averages are 0.2 .. 1.0: the trial's best value so far is what counts
    assert not stopping.median_rule(curve([0.6, 0.1]), done).stop
    assert stopping.median_rule(curve([0.55, 0.58]), done).stop


def test_median_waits_where_fewer_than_five_trials_give_a_bar():
    assert stopping.MEDIAN_MIN_TRIALS == 5
    four = [ref([v] * 4, str(i + 1)) for i, v in enumerate((0.5, 0.6, 0.7, 0.8))]
    assert not stopping.median_rule(curve([0.0]), four).stop  # 4 trials: no bar from so few
    # a fifth trial, stopped early at step 2, counts up to its stop: a bar at every step
    fifth = ref([0.1, 0.1], "5", completed=False)
    assert stopping.median_rule(curve([0.0]), [*four, fifth]).stop
    d = stopping.median_rule(curve([0.0, 0.0, 0.0]), [*four, fifth])
    assert d.stop and "of 5 trials (1 stopped early, up to their stop): trials 1, 2, 3, 4 and 5" in d.reason
    # a trial whose first report comes later (elapsed seconds) gives no running average before it
    late = [Reference(curve=[(5.0, v), (9.0, v)], trial_id=str(i)) for i, v in enumerate((0.5, 0.6, 0.7, 0.8, 0.9))]
    assert not stopping.median_rule([(1.0, 0.0)], late).stop
    assert stopping.median_rule([(1.0, 0.0), (6.0, 0.0)], late).stop


def test_median_with_every_other_trial_stopped_so_far_waits():
    """No completed trial yet (say, a job resumed after its first trials were all stopped): where trials
    end is unknown, so no stop can be shown to save work; the rule waits for one to complete."""
    stopped = [ref([v, v], str(i + 1), completed=False) for i, v in enumerate((0.5, 0.6, 0.7, 0.8, 0.9, 1.0))]
    for rule in (stopping.median_rule, stopping.decay_curve_rule):
        assert not rule(curve([0.0]), stopped).stop
    one_done = [*stopped, ref([0.9] * 10, "7")]
    assert stopping.median_rule(curve([0.0]), one_done).stop


def test_median_counts_stopped_trials_so_the_bar_moves_down_as_the_job_learns():
    """The bar before issue 48: the completed trials (here 5 good ones); the trials stopped since pull
    the median down, so a middling trial is kept once most trials were seen to be worse."""
    good = [ref([v] * 10, str(i + 1)) for i, v in enumerate((0.80, 0.82, 0.84, 0.86, 0.88))]
    middling = curve([0.75, 0.76])
    assert stopping.median_rule(middling, good).stop
    worse = [ref([0.3, 0.35], str(i + 6), completed=False) for i in range(6)]
    assert not stopping.median_rule(middling, [*good, *worse]).stop


def test_median_with_nan_values():
    nan = float("nan")
    assert not stopping.median_rule(curve([0.1]), [curve([nan, nan])] * 8).stop  # no number to compare with
    d = stopping.median_rule(curve([nan]), [curve([v, v]) for v in (0.5, 0.6, 0.7, 0.8, 0.9, 1.0)])
    assert d.stop and d.reason.startswith("best value NaN (no number reported) is below 0.75, the median")


def test_decay_curve_names_the_completed_trials_whose_gains_it_used_and_waits_for_five():
    assert stopping.MIN_COMPLETED == 5
    done = [ref([0.5, 0.7, 0.8, 0.85, 0.9], str(i + 1)) for i in range(5)]
    d = stopping.decay_curve_rule(curve([0.1, 0.15]), done)
    assert d.stop and "of the 5 completed trials that ran past it (0.2: trials 1, 2, 3, 4 and 5)" in d.reason
    assert d.reason.endswith("worse than the best 0.9 (trial 1)")
    assert not stopping.decay_curve_rule(curve([0.1, 0.15]), done[:4]).stop
    stopped = [ref([0.5, 0.7], str(i + 6), completed=False) for i in range(5)]  # no final value: not used
    assert not stopping.decay_curve_rule(curve([0.1, 0.15]), [*done[:4], *stopped]).stop
