"""The run queue of `trials serve`: at most N controllers, the other jobs started in creation order."""

from __future__ import annotations

import pytest

from trials.controller.api.admission import Admission, default_max_running_jobs


def test_jobs_beyond_the_limit_wait_and_start_first_created_first() -> None:
    a = Admission(max_running=2)
    assert [a.submit(j) for j in "12345"] == [True, True, False, False, False]
    assert a.submit("3") is False and list(a.waiting) == ["3", "4", "5"]  # (submitted twice: one place)
    assert a.done("2") == ["3"] and a.running == {"1", "3"}
    assert a.done("4") == [] and list(a.waiting) == ["5"]  # cancelled while it waited: it leaves the queue
    assert a.done("1") == ["5"] and a.done("3") == [] and a.done("5") == []
    assert a.running == set() and not a.waiting


def test_a_new_job_never_overtakes_waiting_ones_and_adopted_jobs_hold_places() -> None:
    a = Admission(max_running=1)
    a.adopt("old")  # running under an earlier server's controller
    assert a.submit("1") is False
    a.running.discard("old")  # (room, but "1" waits first: a newcomer goes behind it)
    assert a.submit("2") is False and a.done("old") == ["1"]


def test_the_limit_is_at_least_one_and_defaults_to_the_cores() -> None:
    with pytest.raises(ValueError, match="max_running must be >= 1, got 0"):
        Admission(max_running=0)
    assert default_max_running_jobs() >= 1
