"""`trials worker JOB --storage PG --runtime slurm`: a PostgreSQL job's worker submits its trials to Slurm
(the same backend as `trials sweep --runtime slurm`), on the real two-node cluster."""

from __future__ import annotations

import uuid

import pytest
from slurmjobs import spec, squeue_ids, trials_cli

pytestmark = pytest.mark.integration


def test_a_postgresql_jobs_worker_runs_each_trial_as_a_slurm_job(tmp_path, slurm_env, pg_url):
    from trials.controller.jobs import registry
    from trials.spec.load import load_spec

    path = spec(tmp_path, trials=3, parallel=2, grid=[0.2, 0.4, 0.6], args=("--steps=2",))
    job_id = "w" + uuid.uuid4().hex[:12]
    root = tmp_path / "jobs"
    registry.create_job(load_spec(str(path)), root=str(root), job_id=job_id, spec_path=str(path), storage=pg_url,
                        base_output_dir=str(tmp_path / "outputs"), project_number=None, local_command=None,
                        cwd=str(tmp_path))
    run = trials_cli("worker", job_id, "--storage", pg_url, "--root", str(root), "--runtime", "slurm",
                     cwd=tmp_path, env=slurm_env)
    assert run.returncode == 0, run.stdout + run.stderr

    h = registry.open_job(job_id, root=str(root), storage=pg_url)
    assert h.store.meta().state == "JOB_STATE_SUCCEEDED"
    trials = sorted(h.store.frozen_trials(), key=lambda t: t.number)
    assert [t.user_attrs["state"] for t in trials] == ["SUCCEEDED"] * 3
    assert sorted(round(t.params["x"], 6) for t in trials) == [0.2, 0.4, 0.6]  # each grid point once
    slurm_jobs = set()
    for t in trials:
        (attempt,) = t.user_attrs["attempts"]  # one start each: nothing ran twice
        assert attempt["node"] in ("n1", "n2"), attempt
        slurm_jobs.add(attempt["slurmJobId"])
        # Slurm ran it and says so: the job the attempt names completed
        assert squeue_ids(slurm_env, attempt["slurmJobId"]) == [f"{attempt['slurmJobId']}|COMPLETED"], attempt
    assert len(slurm_jobs) == 3  # a Slurm job per trial attempt
