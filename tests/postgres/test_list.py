"""`trials list --storage postgresql://…`: what the list shows, read with three statements for the whole database."""

from __future__ import annotations

from pg_helpers import create_job

from trials.controller.jobs.describe import shown
from trials.controller.jobs.view import list_jobs
from trials.study.storage import open_storage, study_summaries


def test_the_list_from_the_attributes_it_shows_is_the_list_from_every_trial(tmp_path, pg_url, job_id):
    h = create_job(tmp_path, pg_url, job_id, points=3, parallel=1, epochs=1, sleep=0.0)
    study = h.job.study
    claimed = h.store.claim(study)  # one trial running, one back in the queue after it started, one waiting
    assert claimed is not None
    h.store.set_trial_attrs(claimed.storage_id, state="ACTIVE", start_time="2026-12-01T00:00:00Z")
    second = h.store.claim(study)
    assert second is not None
    h.store.set_trial_attrs(second.storage_id, state="REQUESTED", requeued=True, start_time="2026-12-01T00:00:01Z")
    h.store.requeue(second.storage_id)
    storage = open_storage(pg_url)
    expected = [{"job_id": s.study_name, "state": s.user_attrs.get("trials:state", "?"),
                 "trials": sum(map(shown, storage.get_all_trials(s._study_id, deepcopy=False))),
                 "create_time": s.user_attrs.get("trials:create_time", "")} for s in study_summaries(storage)]
    listed = list_jobs(str(tmp_path / "jobs"), pg_url)
    # other tests' jobs come and change meanwhile: the ended ones and this one cannot
    settled = {"JOB_STATE_SUCCEEDED", "JOB_STATE_FAILED", "JOB_STATE_CANCELLED"}
    ids = [{r["job_id"] for r in rows if r["state"] in settled or r["job_id"] == job_id} for rows in (expected, listed)]
    both = ids[0] & ids[1]

    def kept(rows: list[dict]) -> list[dict]:
        return [r for r in rows if r["job_id"] in both]

    assert kept(listed) == kept(expected) and job_id in both
    mine = [row for row in listed if row["job_id"] == job_id]
    assert mine == [{"job_id": job_id, "state": "JOB_STATE_QUEUED", "trials": 2,
                     "create_time": h.store.meta().create_time}]
