"""trials/study/database/leases.py on SQLite (no advisory lock): a claim whose answer was lost is handed
out again, never a second trial in its place; a lease on a trial no longer RUNNING is dropped."""

from __future__ import annotations

import pytest
from sqlalchemy import exc as sa_exc

from trials import protocol
from trials.controller.jobs import registry
from trials.spec.load import loads_spec
from trials.study.database.leases import SharedJob

SPEC = """
metrics: {loss: minimize}
parameters:
  x: {type: discrete, values: [1, 2, 3]}
algorithm: grid
max_trial_count: 3
parallel_trial_count: 3
"""


def _shared(tmp_path):
    h = registry.create_job(loads_spec(SPEC), root=str(tmp_path / "jobs"), job_id="j", spec_path=None,
                              storage=f"sqlite:///{tmp_path / 'jobs.db'}", base_output_dir=None,
                              project_number=None, local_command=["python", "t.py"], cwd=str(tmp_path))
    return h, SharedJob(h.store, me="host:1")


def test_a_claim_whose_answer_was_lost_is_handed_out_again(tmp_path, monkeypatch):
    h, shared = _shared(tmp_path)
    monkeypatch.setenv(protocol.ENV_TEST_LOSE_CLAIM_ANSWER, str(tmp_path / "lost"))
    with pytest.raises(sa_exc.OperationalError):
        shared.claim(h.job.study, cap=3)  # committed: trial 1 RUNNING, leased to host:1
    again = shared.claim(h.job.study, cap=3)
    assert again is not None and again.trial_id == "1" and not again.resumed
    assert again.params == {"x": 1}
    nxt = shared.claim(h.job.study, cap=3)
    assert nxt is not None and nxt.trial_id == "2"
    assert len(h.store.running_trials()) == 2  # trials 1 and 2, nothing claimed twice or lost


def test_a_lease_on_a_trial_no_longer_running_is_dropped(tmp_path):
    h, shared = _shared(tmp_path)
    first = shared.claim(h.job.study, cap=3)
    assert first is not None
    h.store.complete(first.number, [0.5])  # finished, but its lease stays: as if the release was lost
    shared = SharedJob(h.store, me="host:1")  # (and this worker's view has forgotten it)
    got = shared.claim(h.job.study, cap=3)
    assert got is not None and got.trial_id == "2"
    assert shared.leases([first.storage_id, got.storage_id], every=True).keys() == {got.storage_id}
