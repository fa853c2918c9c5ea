"""trials/controller/report/scale.py: round axis limits; and where end marks pile up (plots.overlapping)."""

from __future__ import annotations

import pytest

from trials.controller.report.plots import overlapping
from trials.controller.report.scale import integer_limits, nice_limits, tick_step, with_strip


@pytest.mark.parametrize(("low", "high", "expected"), [
    (0.422, 1.0886, (0.4, 1.2, 0.2)),
    (0.0, 1.0, (-0.1, 1.1, 0.2)),  # a value on a round number keeps a margin: its mark is not cut
    (0.96, 0.975, (0.9575, 0.9775, 0.005)),
    (-3.0, 250.0, (-25.0, 275.0, 50.0)),
    (0.0, 0.0, (-0.6, 0.6, 0.2)),  # one value: a span around it
    (5.0, 5.0, (4.7, 5.3, 0.1)),
])
def test_nice_limits_are_round_and_enclose_the_data_with_a_margin(low, high, expected):
    assert nice_limits(low, high) == expected
    lo, hi, _ = expected
    assert lo < low and hi > high


def test_tick_steps_are_one_two_two_and_a_half_or_five_times_a_power_of_ten():
    assert [tick_step(s) for s in (6.0, 10.0, 13.0, 0.6, 28.0)] == [1.0, 2.0, 2.5, 0.1, 5.0]


def test_with_strip_leaves_the_bottom_free_and_integer_limits_pad_the_ends():
    lo, hi, step = with_strip(0.5, 0.9, strip=0.15)
    assert (lo, hi, step) == (0.4, 0.95, 0.1) and (0.5 - lo) >= 0.15 * (hi - lo)
    assert integer_limits(1, 16) == (0.5, 16.5)
    assert integer_limits(1, 1000) == (-19, 1020)


def test_overlapping_end_marks_are_counted_per_step_and_pile():
    ends = [(1, 0.5), (1, 0.501), (1, 0.502), (1, 0.9), (2, 0.5), (2, 0.7), (3, 0.1), (3, 0.1)]
    assert overlapping(ends, 0.01) == [(1, 0.502, 3), (3, 0.1, 2)]
