"""The one ranking of trials: best first by the goal, finite values only, ties to the earlier; the Pareto front."""

import math
import random

import optuna
import pytest

from trials.controller.policy.ranking import best_of, dominates, pareto_front, ranked


def value(t):
    return t[1]


def test_the_goal_decides_the_order_and_a_tie_goes_to_the_candidate_given_first():
    trials = [("1", 0.2), ("2", 0.5), ("3", 0.5), ("4", 0.1)]
    assert ranked(trials, value, maximize=True) == [("2", 0.5), ("3", 0.5), ("1", 0.2), ("4", 0.1)]
    assert ranked(trials, value, maximize=False) == [("4", 0.1), ("1", 0.2), ("2", 0.5), ("3", 0.5)]
    assert best_of(trials, value, maximize=True) == ("2", 0.5)
    assert best_of(list(reversed(trials)), value, maximize=True) == ("3", 0.5)  # the first given of a tie


@pytest.mark.parametrize("missing", [None, math.nan, math.inf, -math.inf])
def test_a_value_that_is_not_a_finite_number_never_ranks(missing):
    trials = [("1", missing), ("2", 0.3)]
    assert ranked(trials, value, maximize=True) == [("2", 0.3)]
    assert best_of(trials, value, maximize=False) == ("2", 0.3)
    assert best_of([("1", missing)], value, maximize=True) is None
    assert best_of([], value, maximize=True) is None


def test_the_pareto_front_keeps_the_order_given_and_equal_points_both():
    points = [("a", (1.0, 5.0)), ("b", (2.0, 4.0)), ("c", (1.0, 4.0)), ("d", (2.0, 4.0)), ("e", (0.5, 6.0))]
    # maximize both: c is dominated by a (and b, d); b and d are equal: neither dominates
    assert [p[0] for p in pareto_front(points, value, [True, True])] == ["a", "b", "d", "e"]
    # minimize the first, maximize the second: e is better in both than every other point
    assert [p[0] for p in pareto_front(points, value, [False, True])] == ["e"]
    # maximize the first, minimize the second: b and d (equal; c is as low but smaller)
    assert [p[0] for p in pareto_front(points, value, [True, False])] == ["b", "d"]
    assert dominates([2.0, 4.0], [1.0, 4.0]) and not dominates([2.0, 4.0], [2.0, 4.0])


def test_the_pareto_front_is_optunas_best_trials():
    rng = random.Random(7)
    directions = ["maximize", "minimize", "maximize"]
    study = optuna.create_study(directions=directions)
    for _ in range(60):  # coarse values: ties and equal points happen
        study.add_trial(optuna.trial.create_trial(values=[rng.randint(0, 6) for _ in directions]))
    done = study.get_trials(deepcopy=False)
    ours = pareto_front(done, lambda t: t.values, [d == "maximize" for d in directions])
    assert [t.number for t in ours] == [t.number for t in study.best_trials]
