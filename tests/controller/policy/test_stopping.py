"""Early-stopping rules on hand-made curves."""

import pytest

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
        "value 0.1 at step 2 is below 0.9, the worst there of the 2 leaders (the top fifth of 6 trials)")
    by_time = stopping.median_rule([(1.0, 0.1), (1.5, 0.1)], done, elapsed=True)
    assert by_time.stop and "at 1.5 s is below 0.9" in by_time.reason
    by_loss = stopping.median_rule([(1.0, -0.95)], [[(x, -v) for x, v in c] for c in done], maximize=False)
    assert by_loss.reason.startswith("value 0.95 at step 1 is above 0.8, the worst there of the 2 leaders")


def ref(values, trial_id, completed=True):
    return Reference(curve=curve(values), trial_id=trial_id, completed=completed)


def test_median_stops_a_trial_behind_every_leader_at_the_step_though_above_the_median():
    """Vertex's wording (best value so far against the median of the others' running averages) kept this
    trial: its best (0.8) is above that median (0.6). Behind the top fifth's worst value at step 3 (0.9),
    it is off every leader's path: stopped (benchmarks/README.md part 12: the wording saved 13-18 %)."""
    done = [ref([v - 0.1, v - 0.05, v, v, v], str(i + 1)) for i, v in enumerate((0.4, 0.5, 0.6, 0.7, 0.9, 0.95))]
    rising_then_falling = curve([0.8, 0.75, 0.7])
    d = stopping.median_rule(rising_then_falling, done)
    assert d.stop and d.reason == ("value 0.7 at step 3 is below 0.9, the worst there of the 2 leaders (the top "
                                   "fifth of 6 trials): trials 5 and 6")
    assert not stopping.median_rule(curve([0.8, 0.75, 0.9]), done).stop  # level with a leader there: kept


def test_median_keeps_a_slow_starter_on_a_leaders_path():
    """The best trial started slowly: a trial on its path is kept though behind the median of the others'
    running averages at step 1 (Vertex's wording stopped it); a trial behind it too is stopped."""
    fast = [ref([0.7, 0.75, 0.78, 0.8, 0.8], str(i + 1)) for i in range(5)]
    slow = ref([0.3, 0.6, 0.85, 0.9, 0.95], "6")
    assert not stopping.median_rule(curve([0.35]), [*fast, slow]).stop
    assert stopping.median_rule(curve([0.25]), [*fast, slow]).stop


def test_median_waits_where_fewer_than_five_trials_give_a_bar():
    assert stopping.MEDIAN_MIN_TRIALS == 5
    four = [ref([v] * 4, str(i + 1)) for i, v in enumerate((0.5, 0.6, 0.7, 0.8))]
    assert not stopping.median_rule(curve([0.0]), four).stop  # 4 trials: no bar from so few
    # a fifth trial, stopped early at step 2, counts up to its stop: a bar at every step
    fifth = ref([0.1, 0.1], "5", completed=False)
    assert stopping.median_rule(curve([0.0]), [*four, fifth]).stop
    d = stopping.median_rule(curve([0.0, 0.0, 0.0]), [*four, fifth])
    assert d.stop and d.reason.endswith("below 0.8, the leader's value there (the top fifth of 5 trials): trial 4")
    # a trial whose first report comes later (elapsed seconds) gives no value before it
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
    """With 4 completed trials the top fifth is the best one alone; the 8 trials stopped since rank
    below every completed one, so the top fifth of 12 takes in three completed trials and a middling
    trial on the third one's path is kept. Counting the completed trials alone (issue 16's leaders), the bar
    never moved once nothing completed; Vertex's wording kept the middling trial from the start."""
    good = [ref([v] * 10, str(i + 1)) for i, v in enumerate((0.9, 0.8, 0.7, 0.6))]
    worse = [ref([0.3, 0.35], str(i + 5), completed=False) for i in range(8)]
    middling = curve([0.75, 0.76])
    d = stopping.median_rule(middling, [*good, worse[0]])
    assert d.stop and d.reason.endswith("below 0.9, the leader's value there (the top fifth of 5 trials): trial 1")
    assert not stopping.median_rule(middling, [*good, *worse]).stop


def test_median_ranks_stopped_trials_by_how_far_they_got_and_uses_them_up_to_their_stop():
    """One completed trial and seven stopped: the top fifth of 8 is the completed trial and the stopped
    trial that got furthest (step 4), whose value at its stop stands for it beyond it."""
    done = ref([0.9] * 10, "1")
    stopped = [ref([0.5] * (1 + i % 3), str(i + 2), completed=False) for i in range(6)]
    furthest = ref([0.4, 0.5, 0.6, 0.7], "8", completed=False)
    others = [done, *stopped, furthest]
    d = stopping.median_rule(curve([0.65] * 6), others)
    assert d.stop and d.reason == ("value 0.65 at step 6 is below 0.7, the worst there of the 2 leaders (the top "
                                   "fifth of 8 trials, 1 of them stopped early (at their stop)): trials 1 and 8")
    assert not stopping.median_rule(curve([0.65] * 5 + [0.7]), others).stop


def test_median_with_nan_values():
    nan = float("nan")
    assert not stopping.median_rule(curve([0.1]), [curve([nan, nan])] * 8).stop  # no number to compare with
    d = stopping.median_rule(curve([nan]), [curve([v, v]) for v in (0.5, 0.6, 0.7, 0.8, 0.9, 1.0)])
    assert d.stop and d.reason.startswith("value NaN (no number reported) at step 1 is below 0.9, the worst there")


def test_decay_curve_names_the_completed_trials_whose_gains_it_used_and_waits_for_five():
    assert stopping.MIN_COMPLETED == 5
    done = [ref([0.5, 0.7, 0.8, 0.85, 0.9], str(i + 1)) for i in range(5)]
    d = stopping.decay_curve_rule(curve([0.1, 0.15]), done)
    assert d.stop and "of the 5 completed trials that ran past it (0.2: trials 1, 2, 3, 4 and 5)" in d.reason
    assert d.reason.endswith("worse than the best 0.9 (trial 1)")
    assert not stopping.decay_curve_rule(curve([0.1, 0.15]), done[:4]).stop
    stopped = [ref([0.5, 0.7], str(i + 6), completed=False) for i in range(5)]  # no final value: not used
    assert not stopping.decay_curve_rule(curve([0.1, 0.15]), [*done[:4], *stopped]).stop


def test_median_counts_running_trials_toward_the_wait_and_ranks_them_as_stopped_at_their_last_report():
    """Four finished trials and a fifth still running: without the running one, 4 trials reach step 2 (the
    rule waits); with it, 5 do and there is a bar. The running trial ranks below the completed ones, as a
    trial stopped at its last report would (issue 48: Vizier uses every measurement of every trial)."""
    assert stopping.MEDIAN_TOP == 0.2
    four = [ref([v] * 10, str(i + 1)) for i, v in enumerate((0.5, 0.6, 0.7, 0.8))]
    beside = Reference(curve=curve([0.95, 0.95]), trial_id="6", completed=False, running=True)
    bad = curve([0.1, 0.1])
    assert not stopping.median_rule(bad, four).stop
    d = stopping.median_rule(bad, [*four, beside])
    assert d.stop and d.reason.endswith("below 0.8, the leader's value there (the top fifth of 5 trials): trial 4")
    # ten trials: the top fifth takes in the running one, and the reason says it was running
    six = [ref([v] * 10, str(i + 1)) for i, v in enumerate((0.3, 0.35, 0.4, 0.45, 0.5, 0.55))]
    early = [Reference(curve=curve([0.9] * 3), trial_id=str(i + 7), completed=False) for i in range(3)]
    d = stopping.median_rule(curve([0.2, 0.2]), [*six, *early, beside])
    assert d.stop and d.reason == ("value 0.2 at step 2 is below 0.5, the worst there of the 2 leaders (the top "
                                   "fifth of 10 trials): trials 5 and 6")
    furthest = Reference(curve=curve([0.9] * 4), trial_id="6", completed=False, running=True)
    low = [ref([0.05, 0.05], str(i + 10), completed=False) for i in range(6)]
    d = stopping.median_rule(curve([0.2, 0.2]), [*six[:1], *early, furthest, *low])
    assert d.stop and d.reason.endswith("the worst there of the 3 leaders (the top fifth of 11 trials, 1 of them "
                                        "stopped early (at their stop), 1 of them running (at their last report)): "
                                        "trials 1, 6 and 7")


def test_the_median_spec_also_stops_a_trial_on_a_leaders_path_that_cannot_reach_the_best_final():
    """An overfitting trial leads early and falls late: it is on the leaders' path at step 3, but the
    largest gain any of 3 completed trials made from step 3 to its end would not bring it to the best final
    value: the median spec stops it (``decide``); the leaders alone (``median_rule``) keep it; with 1
    completed trial past step 3 it waits."""
    assert stopping.MEDIAN_HOPELESS_COMPLETED == 2
    done = [ref([0.2, 0.3, 0.5, 0.6, 0.7, 0.75, 0.8], "1"), ref([0.2, 0.3, 0.4, 0.45, 0.5, 0.55, 0.6], "2"),
            ref([0.1, 0.2, 0.3, 0.35, 0.4, 0.45, 0.5], "3")]
    stopped = [ref([0.05, 0.05], str(i + 4), completed=False) for i in range(3)]
    falling = curve([0.5, 0.45, 0.42])  # above the leaders' worst at step 3 (0.5 and 0.4)
    spec = StoppingSpec(kind=StoppingKind.MEDIAN)
    assert not stopping.median_rule(falling, [*done, *stopped]).stop
    d = stopping.decide(spec, falling, [*done, *stopped])
    # the gains of the completed curves no better than it at step 3 (2 and 3, at 0.4 and 0.3; not 1, at 0.5)
    assert d.stop and d.reason == ("even the largest gain from here of the 2 completed trials no better than it at "
                                   "step 3 that ran past it (0.2: trials 2 and 3) would end at 0.62, worse than the "
                                   "best 0.8 (trial 1)")
    assert not stopping.decide(spec, falling, [*done[:1], ref([0.05], "7", False)]).stop  # 1: it waits
    # at 0.52 trial 1 (0.5 there) is behind it too: its gain, 0.3, would end at 0.82 > 0.8: kept
    assert not stopping.decide(spec, curve([0.5, 0.45, 0.52]), [*done, *stopped]).stop
    # behind every completed curve at step 3 (too few trials for the leaders' bar): no completed curve was where it
    # is, so none says how far a curve from there gets: it waits (the gains of curves ahead of it would stop it)
    behind = curve([0.05, 0.1, 0.15])
    assert not stopping.decide(spec, behind, done).stop
    assert stopping.decay_curve_rule(behind, done, min_completed=2).stop


def test_no_rule_stops_a_trial_in_the_last_tenth_of_the_horizon():
    """A trial far behind every other is stopped at step 8 of 10 by each rule, and let finish from step 9 on:
    a stop there saves a tenth of a trial and loses its final value (the sampler's data, the user's pick)."""
    assert stopping.MAX_FRACTION == 0.9
    done = [ref([0.1 * s + 0.05 * i for s in range(1, 11)], str(i + 1)) for i in range(6)]
    spec = {kind: StoppingSpec(kind=kind) for kind in StoppingKind}
    for step, stops in ((8, True), (9, False), (10, False)):
        behind = curve([0.01] * step)
        assert stopping.guard(behind, done) is stops
        for kind in (StoppingKind.MEDIAN, StoppingKind.DECAY_CURVE):
            assert stopping.decide(spec[kind], behind, done).stop is stops, (kind, step)
    # elapsed seconds: the same tenth of the longest completed trial's time
    timed = [Reference(curve=[(10.0 * s, 0.5) for s in range(1, 11)])]
    assert stopping.guard([(89.0, 0.1)], timed, min_completed=1)
    assert not stopping.guard([(90.0, 0.1)], timed, min_completed=1)


def test_the_leaders_bar_is_lowered_by_the_curves_noise():
    """Accuracy on a validation set moves in steps of one example: completed curves that wobble by ~0.01 from
    epoch to epoch make a trial 0.003 behind the leaders at step 4 no reason to stop (the README's job once
    stopped, at step 1, a trial one example behind that would have ended the best); 0.05 behind, it stops
    and the reason gives the noise."""
    wobbly = [0.5 + 0.05 * i + (0.01 if i % 2 else 0.0) for i in range(8)]  # each 0.01 off its neighbours' mean
    done = [ref([v - 0.1 * i for v in wobbly], str(i + 1)) for i in range(5)]
    assert stopping.noise([r.curve for r in done]) == pytest.approx(0.01)
    assert stopping.noise([curve([0.5] * 8)]) == 0.0 and stopping.noise([curve([0.5, 0.6])]) == 0.0
    assert stopping.noise([curve([0.5, float("nan"), 0.7, 0.8, 0.9])]) == pytest.approx(0.0)
    leader_at_4 = 0.66  # trial 1, the top fifth of 5
    assert not stopping.median_rule(curve([0.6, 0.6, 0.6, leader_at_4 - 0.003]), done).stop
    d = stopping.median_rule(curve([0.6, 0.6, 0.6, leader_at_4 - 0.05]), done)
    assert d.stop and d.reason == ("value 0.61 at step 4 is below 0.66 by more than the curves' noise (0.01), the "
                                   "leader's value there (the top fifth of 5 trials): trial 1")


def test_the_median_spec_stops_a_trial_past_its_best_whose_best_never_reached_the_best_final():
    """An overfitting curve (a validation loss that has turned up): its last MEDIAN_PATIENCE values are all below
    its own best by more than the curves' noise, and that best is worse than the best final value: stopped,
    saying so. One report fewer, a best at or above the best final, or a dip within the noise: kept. Measured on
    part 12's gbdt curves, such trials ran to an end of 0.16-0.24 against a best final near 0.137."""
    assert stopping.MEDIAN_PATIENCE == 4
    done = [ref([0.1 * s for s in range(1, 11)], "1"), ref([0.08 * s for s in range(1, 11)], "2")]  # best final 1.0
    spec = StoppingSpec(kind=StoppingKind.MEDIAN)
    turned = [0.3, 0.5, 0.6, 0.55, 0.5, 0.45, 0.4]  # best 0.6 at step 3, then 4 reports below it
    d = stopping.decide(spec, curve(turned), done)
    assert d.stop and d.reason == ("past its best: its last 4 values are below its own best 0.6 (at step 3), and that "
                                   "best is worse than the best final value 1 (trial 1)")
    assert not stopping.past_best_rule(curve(turned[:-1]), done).stop  # 3 reports past it: not yet
    assert not stopping.past_best_rule(curve([0.3, 0.5, 1.05, 0.9, 0.85, 0.8, 0.75]), done).stop  # it led once
    noisy = [ref([0.1 * s + (0.05 if s % 2 else 0.0) for s in range(1, 11)], "1"), done[1]]  # noise 0.05
    assert not stopping.past_best_rule(curve([0.3, 0.5, 0.6, 0.58, 0.57, 0.56, 0.58]), noisy).stop  # within it
    assert stopping.past_best_rule(curve(turned), noisy).stop
    # a minimized metric (the curves come oriented, larger is better): the reason's values back in its own sign
    d = stopping.decide(spec, curve(turned), done, maximize=False)
    assert d.stop and d.reason == ("past its best: its last 4 values are above its own best -0.6 (at step 3), and that "
                                   "best is worse than the best final value -1 (trial 1)")
