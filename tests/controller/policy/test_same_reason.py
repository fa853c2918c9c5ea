"""The same-reason rule (ours): the first trials infeasible for one reason, none succeeded, stop the job."""

from __future__ import annotations

from trials.controller.policy import exits
from trials.spec.load import loads_spec

SPEC = """
metrics: {{loss: minimize}}
parameters:
  x: {{type: double, min: 0.0, max: 1.0}}
max_trial_count: 10
max_failed_trial_count: {max_failed}
"""


def _job(max_failed: int = 0):
    return loads_spec(SPEC.format(max_failed=max_failed), source="t.yaml")


def test_a_non_finite_value_gets_its_fix():
    reason = exits.nonfinite_message("loss", float("nan"))
    error = exits.same_reason_failure(_job(), infeasible=[("1", reason), ("2", reason), ("4", reason)],
                                      n_succeeded=0, n_left=5, keep_going=False)
    assert error == (
        "The first 3 trials were infeasible for the same reason and none succeeded, so the job stopped "
        "(maxFailedTrialCount unset; --keep-going runs every trial). Trials 1, 2, 4: The objective metric loss "
        "has the non-finite final value nan. Make the trainer report a finite value (a run that diverges: narrow "
        "the search space, or report a finite penalty).")


def test_the_rule_holds_only_for_the_first_3_with_none_succeeded_trials_left_and_no_limit_set():
    same = [("1", "r"), ("2", "r"), ("3", "r")]
    assert exits.same_reason_failure(_job(), infeasible=same[:2], n_succeeded=0, n_left=5, keep_going=False) is None
    assert exits.same_reason_failure(_job(), infeasible=same, n_succeeded=1, n_left=5, keep_going=False) is None
    assert exits.same_reason_failure(_job(), infeasible=same, n_succeeded=0, n_left=0, keep_going=False) is None
    assert exits.same_reason_failure(_job(), infeasible=same, n_succeeded=0, n_left=5, keep_going=True) is None
    assert exits.same_reason_failure(_job(2), infeasible=same, n_succeeded=0, n_left=5, keep_going=False) is None
    other = [("1", "r"), ("2", "s"), ("3", "r"), ("4", "r")]  # the first 3 differ: later ones never count
    assert exits.same_reason_failure(_job(), infeasible=other, n_succeeded=0, n_left=5, keep_going=False) is None


def test_infeasible_trials_in_the_order_they_ended():
    attrs = {
        0: {"state": "INFEASIBLE", "infeasible_reason": "a", "end_time": "2026-01-01T00:00:03.000000Z"},
        1: {"state": "INFEASIBLE", "infeasible_reason": "b", "end_time": "2026-01-01T00:00:01.000000Z"},
        2: {"state": "INFEASIBLE", "infeasible_reason": "c", "failed": True, "end_time": "2026-01-01T00:00:00Z"},
        3: {"state": "INFEASIBLE", "infeasible_reason": "d", "stopped_by_job": True},
        4: {"state": "SUCCEEDED"},
    }
    assert exits.infeasible_by_end(attrs) == [("2", "b"), ("1", "a")]
