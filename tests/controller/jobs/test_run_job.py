"""Running a job here: a controller that stops on an error never leaves a cancel half done."""

from __future__ import annotations

from pathlib import Path

import pytest
from jobkit import write_meta

from trials.controller.jobs import registry
from trials.controller.jobs import run as job_run
from trials.controller.loop.runner import JobRunner
from trials.spec.load import loads_spec

SPEC = """\
metrics: {loss: minimize}
parameters:
  x: {type: double, min: 0.0, max: 1.0}
command: [python, train.py]
max_trial_count: 2
"""


def test_a_controller_that_stops_on_an_error_ends_a_pending_cancel(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    h = registry.create_job(loads_spec(SPEC, source="t.yaml"), root=str(tmp_path / "jobs"), job_id="j",
                              spec_path=None, storage=None, base_output_dir=None, project_number=None,
                              local_command=None)
    trial = h.store.claim(h.job.study)
    assert trial is not None

    def run(self: JobRunner, **kwargs: object) -> str:
        write_meta(h.store, state="JOB_STATE_CANCELLING")  # `trials cancel` told this controller to stop ...
        raise RuntimeError("... and it died of something else before it ended the job")

    monkeypatch.setattr(JobRunner, "run", run)
    options = job_run.run_options(h, echo=False, grace_period_s=0.1, memory_limit_mb=None, inject_restarts=0.0,
                                  slots=None, seed=1)
    with pytest.raises(RuntimeError):
        job_run.run_job(h, options)
    assert h.store.meta().state == "JOB_STATE_CANCELLED"
    # it ran (never REQUESTED): stopped by the cancel before it reported, INFEASIBLE saying so
    (first, *_) = h.store.frozen_trials()
    assert first.user_attrs["state"] == "INFEASIBLE" and first.state.name == "WAITING"
    assert first.user_attrs["infeasible_reason"].startswith("The trial was stopped because the job was cancelled.")
    assert h.store.running_trials() == []
