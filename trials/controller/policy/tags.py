"""A job whose trials report only tags that are not the spec's metric: seen at once, the job stops (ours).

A trainer that reports ``accuracy`` to a spec whose metric is ``val_accuracy`` makes every trial INFEASIBLE, and
without this rule the job learns it three whole trials later (with hour-long trials: hours). Once a running trial has
reported :data:`WRONG_TAG_STEPS` steps, all of them under other tags, and no trial of the job ever reported the spec's
metric, the job fails with the same advice a finished trial's missing metric gets (pure; ``--keep-going`` and a
``maxFailedTrialCount`` turn it off, as they do the same-reason rule).
"""

from __future__ import annotations

from collections.abc import Iterable

from trials.controller.policy.exits import KEEP_GOING, missing_metric_advice
from trials.spec import JobSpec

WRONG_TAG_STEPS = 3  # reports of the first trial, all under other tags: the spec's metric is not coming


def wrong_tag_failure(job: JobSpec, *, trial_id: str, reported: Iterable[str], n_other_steps: int,
                      spec_metric_seen: bool, keep_going: bool, source: str | None) -> str | None:
    """The job's error when trial ``trial_id`` reported :data:`WRONG_TAG_STEPS` steps, only under tags that are not
    the spec's metrics, and no trial of the job ever reported one of them; else None.

    ``spec_metric_seen``: a trial of the job (finished, or running now) reported a spec metric; ``source``: where
    the trial's metrics come from (the advice fits its trainer, :func:`missing_metric_advice`).
    """
    tags = set(reported)
    ids = job.study.metric_ids
    if keep_going or job.max_failed_trial_count > 0 or spec_metric_seen or n_other_steps < WRONG_TAG_STEPS:
        return None
    if not tags or any(m in tags for m in ids):
        return None
    advice = missing_metric_advice(trial_id, ids, tags, source=source)
    fix = advice[advice.index(": ") + 2:] if ": " in advice else advice
    return (f"Trial {trial_id} reported {n_other_steps} steps, all under tags that are not the spec's metric "
            f"({', '.join(sorted(tags))}; the spec's: {', '.join(ids)}), so every trial would end INFEASIBLE and "
            f"the job stopped (maxFailedTrialCount unset; {KEEP_GOING}): {fix}")
