"""Pure decisions of the job loop: exit classification, messages, final measurement, job failure."""

import math

import pytest

from trials.controller.policy import exits
from trials.controller.policy.exits import ExitKind, classify_exit
from trials.records import Measurement
from trials.spec import Goal, JobSpec, MetricSpec, ParameterSpec, ParameterType, StudySpec


def decide(status, **kw):
    args = dict(replica="workerpool0-0", oom_killed=False, restarts_so_far=0)
    args.update(kw)
    return classify_exit(status, **args)


@pytest.mark.parametrize("status,kind", [
    (0, ExitKind.SUCCEEDED),
    (1, ExitKind.PERMANENT),  # an exception in user code
    (2, ExitKind.PERMANENT),  # bad flags
    (3, ExitKind.RESTARTABLE),
    (134, ExitKind.RETRY_JOB),  # SIGABRT in a custom container: transient, the CustomJob again
    (139, ExitKind.RETRY_JOB),  # SIGSEGV: transient
    (137, ExitKind.RESTARTABLE),  # SIGKILL not by the memory watchdog (e.g. VM maintenance)
    (75, ExitKind.RESTARTABLE),  # stopped on request, but nobody asked: restart
])
def test_exit_classification(status, kind):
    assert decide(status).kind is kind


def test_oom_wins_over_every_budget():
    d = decide(137, oom_killed=True, restarts_so_far=0)
    assert d.kind is ExitKind.OOM
    assert d.message == "The replica workerpool0-0 ran out of memory and exited with a non-zero status of 137."
    assert decide(139, oom_killed=True).kind is ExitKind.OOM  # not a transient retry either


def test_restart_budget_is_five_then_the_job_three_times_then_permanent():
    assert decide(3, restarts_so_far=4).kind is ExitKind.RESTARTABLE
    d = decide(3, restarts_so_far=5)
    assert (d.kind, d.budget) == (ExitKind.RETRY_JOB, "job retry 1 of 3, after 5 worker restarts")
    d = decide(3, restarts_so_far=5, job_retries_so_far=3)
    assert d.kind is ExitKind.PERMANENT
    assert d.message.startswith(
        "The replica workerpool0-0 exited with a non-zero status of 3. Termination reason: Error.")
    assert "restarted 5 times" in d.detail[-1]


def test_transient_exits_retry_the_whole_custom_job_three_times_then_fail():
    for status in (6, 134, 11, 139):
        d = decide(status, restarts_so_far=0)
        assert d.kind is ExitKind.RETRY_JOB and d.budget == "job retry 1 of 3"
    assert decide(139, job_retries_so_far=2).budget == "job retry 3 of 3"
    d = decide(139, job_retries_so_far=3)
    assert d.kind is ExitKind.PERMANENT and "retried 3 times" in d.detail[-1]
    assert decide(3, restarts_so_far=1).budget == "worker restart 2 of 5"  # the other budget


def test_exit_message_is_vertex_text_and_the_exception_goes_to_the_detail():
    tail = ["Traceback (most recent call last):", '  File "t.py", line 1', "ValueError: bad lr", ""]
    d = exits.classify_exit(1, replica="workerpool1-0", oom_killed=False,
                             restarts_so_far=0, stderr_tail=tail)
    assert d.message == ("The replica workerpool1-0 exited with a non-zero status of 1. "
                         "Termination reason: Error.")
    assert d.detail == ("ValueError: bad lr", '  File "t.py", line 1')
    assert exits.exit_message("workerpool0-0", 139) == (
        "The replica workerpool0-0 exited with a non-zero status of 139. Termination reason: Error.")


def test_a_job_ended_by_failures_names_the_flag():
    from trials.spec import JobSpec, StudySpec
    from trials.spec.model import MetricSpec as Metric
    from trials.spec.model import ParameterSpec, ParameterType

    study = StudySpec(metrics=(Metric(metric_id="m"),), parameters=(
        ParameterSpec(parameter_id="x", type=ParameterType.INTEGER, min_value=1, max_value=2),))
    for limit, failed in ((0, 1), (2, 2)):
        msg = exits.job_failure(JobSpec(study=study, max_trial_count=5, max_failed_trial_count=limit),
                                 n_failed=failed, n_succeeded=0, first_failure="Trial 1: x")
        assert "--max-failed-trial-count N" in msg


def m(step, **metrics):
    return Measurement(step=step, metrics=metrics)


def test_select_final_last_and_best_by_goal():
    ms = [m(1, acc=0.5), m(2, acc=0.9), m(3, acc=0.7)]
    maximize = [MetricSpec(metric_id="acc", goal=Goal.GOAL_TYPE_UNSPECIFIED)]
    minimize = [MetricSpec(metric_id="acc", goal=Goal.MINIMIZE)]
    assert exits.select_final(ms, maximize, best=False).step == 3
    assert exits.select_final(ms, maximize, best=True).step == 2  # unset goal = maximize
    assert exits.select_final(ms, minimize, best=True).step == 1


def test_select_final_needs_every_objective_metric():
    metrics = [MetricSpec(metric_id="a"), MetricSpec(metric_id="b")]
    ms = [m(1, a=1.0, b=2.0), m(2, a=3.0)]
    assert exits.select_final(ms, metrics, best=False).step == 1
    assert exits.select_final([m(1, c=1.0)], metrics, best=False) is None


def test_select_best_ignores_nan():
    ms = [m(1, acc=0.5), m(2, acc=math.nan)]
    assert exits.select_final(ms, [MetricSpec(metric_id="acc")], best=True).step == 1


def _job(max_failed):
    x = ParameterSpec(parameter_id="x", type=ParameterType.DOUBLE, min_value=0, max_value=1)
    study = StudySpec(metrics=(MetricSpec(metric_id="a"),), parameters=(x,))
    return JobSpec(study=study, max_trial_count=10, max_failed_trial_count=max_failed)


def test_job_failure_rules():
    assert exits.job_failure(_job(0), n_failed=1, n_succeeded=0, first_failure="x") is not None
    assert exits.job_failure(_job(0), n_failed=1, n_succeeded=1, first_failure="x") is None
    assert exits.job_failure(_job(0), n_failed=3, n_succeeded=2, first_failure="x") is not None
    assert exits.job_failure(_job(2), n_failed=1, n_succeeded=0, first_failure="x") is None
    msg = exits.job_failure(_job(2), n_failed=2, n_succeeded=0, first_failure="Trial 1: boom")
    assert "maxFailedTrialCount=2" in msg and "Trial 1: boom" in msg


def test_missing_metric_message_names_reported_tags():
    msg = exits.missing_metric_message(["accuracy"], {"acc", "loss"})
    assert "accuracy" in msg and "acc, loss" in msg


@pytest.mark.parametrize("steps,lost", [
    ([1, 2, 3, 4], 0), ([1, 2, 3, 5], 1), ([1, 2, 6, 7, 8], 3), ([10, 20, 30, 35], 0),
    ([10, 20, 40, 50, 60], 1), ([], 0), ([3], 0), ([1, 1, 2], 0),
])
def test_missing_steps_by_usual_stride(steps, lost):
    assert exits.missing_steps(steps) == lost
