"""Changing a job from outside its controller: counts, extensions and cancels under the job's state lock."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from jobkit import write_meta

from trials.controller.jobs import admin as job_admin
from trials.controller.jobs import registry
from trials.controller.jobs.lock import ControllerLock
from trials.controller.jobs.registry import JobHandle
from trials.errors import ConfigError
from trials.spec.load import loads_spec

SPEC = """\
metrics: {loss: minimize}
parameters:
  x: {type: double, min: 0.0, max: 1.0}
command: [python, train.py]
max_trial_count: 3
"""


def make_job(tmp_path: Path) -> JobHandle:
    return registry.create_job(loads_spec(SPEC, source="t.yaml"), root=str(tmp_path / "jobs"), job_id="j",
                                 spec_path=None, storage=None, base_output_dir=None, project_number=None,
                                 local_command=None)


def test_counts_are_recorded_in_the_spec_and_an_extension_says_who_runs_it(tmp_path: Path) -> None:
    h = make_job(tmp_path)
    assert job_admin.change(h, counts={"max_failed_trial_count": 2, "parallel_trial_count": 2}) == (0, None)
    spec = h.store.meta().spec
    assert (spec["maxFailedTrialCount"], spec["parallelTrialCount"]) == (2, 2)
    assert (h.job.max_failed_trial_count, h.job.parallel_trial_count) == (2, 2)
    lock = ControllerLock(h.job_dir)
    lock.acquire()  # a controller runs the job: it takes the new trials, its counts stay as they are
    try:
        assert job_admin.change(h, max_trial_count=5) == (2, os.getpid())
        with pytest.raises(ConfigError, match="being run by a controller .*--max-failed-trial-count"):
            job_admin.change(h, counts={"max_failed_trial_count": 3})
    finally:
        lock.release()
    assert h.store.meta().spec["maxFailedTrialCount"] == 2 and h.store.meta().spec["maxTrialCount"] == 5


def test_a_job_its_failures_would_end_at_once_is_refused_with_the_flag_to_pass(tmp_path: Path) -> None:
    h = make_job(tmp_path)
    first = h.store.frozen_trials()[0]
    h.store.set_trial_attrs(first._trial_id, state="INFEASIBLE", failed=True)
    with pytest.raises(ConfigError, match=r"would fail again at once: 1 of its trials failed .* \(N > 1\)"):
        job_admin.check_failure_budget(h)
    job_admin.check_failure_budget(h, max_failed=2)  # a higher budget lets it on


def test_a_cancel_of_an_ended_job_says_so_and_changes_nothing(tmp_path: Path) -> None:
    h = make_job(tmp_path)
    write_meta(h.store, state="JOB_STATE_SUCCEEDED")
    assert job_admin.cancel(h) == ("JOB_STATE_SUCCEEDED", True)
    assert h.store.meta().state == "JOB_STATE_SUCCEEDED"
