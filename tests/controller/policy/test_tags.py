"""A job whose trials report only other tags than the spec's metric fails at once (policy/tags.py, pure)."""

from __future__ import annotations

from dataclasses import replace

from trials.controller.policy.tags import WRONG_TAG_STEPS, wrong_tag_failure
from trials.spec.load import loads_spec

JOB = loads_spec("metrics: {val_accuracy: maximize}\nparameters:\n  lr: {type: double, min: 0.1, max: 1}\n",
                 source="s.yaml")


def decide(job=JOB, **kw):
    args = dict(trial_id="1", reported={"accuracy"}, n_other_steps=WRONG_TAG_STEPS, spec_metric_seen=False,
                keep_going=False, source="hypertune")
    args.update(kw)
    return wrong_tag_failure(job, **args)


def test_the_first_trials_wrong_tag_fails_the_job_with_the_fix():
    error = decide()
    assert error is not None and error.startswith(
        "Trial 1 reported 3 steps, all under tags that are not the spec's metric (accuracy; the spec's: "
        "val_accuracy), so every trial would end INFEASIBLE and the job stopped (maxFailedTrialCount unset; "
        "--keep-going runs every trial): report it with hypertune.HyperTune().report_hyperparameter_tuning_metric(")
    assert error.endswith("or make the spec's metric 'accuracy' if that is the one you meant.")


def test_not_yet_or_not_at_all():
    assert decide(n_other_steps=WRONG_TAG_STEPS - 1) is None  # too early to tell
    assert decide(reported={"accuracy", "val_accuracy"}) is None  # extra tags beside the metric: deliberate
    assert decide(spec_metric_seen=True) is None  # another trial reports it: this trainer branches
    assert decide(keep_going=True) is None
    assert decide(job=replace(JOB, max_failed_trial_count=3)) is None  # Vertex's rule alone
    assert decide(reported=set()) is None
