"""What a SIGKILLed controller can leave in a job folder: a stale journal lock, a torn record, a half-made job."""

from __future__ import annotations

import time

import pytest

pytestmark = [pytest.mark.faults]


def test_resume_breaks_a_stale_journal_lock_and_drops_a_torn_record(jobs) -> None:
    job_id = jobs.job_id("torn")
    out = jobs.sweep(jobs.spec(n=2), job_id, "--epochs=1", opts=["--max-trial-count", "1"])
    assert out.returncode == 0, out.stderr
    journal = jobs.job_dir(job_id) / "journal.log"
    (jobs.job_dir(job_id) / "journal.log.lock").touch()  # Optuna would wait 30 s for it
    with open(journal, "ab") as f:
        f.write(b'{"op_code": 5, "worker_id": "dead", "trial_id": 0, "user_attr": {"x"')  # cut by SIGKILL
    start = time.monotonic()
    out = jobs.cli("resume", job_id, "--max-trial-count", "2", "--grace-period", "0.5")
    assert out.returncode == 0, out.stdout + out.stderr
    assert time.monotonic() - start < 20
    assert journal.read_bytes().endswith(b"\n")
    study = jobs.optuna_study(job_id)  # plain Optuna reads every record
    assert [t.state.name for t in study.trials] == ["COMPLETE", "COMPLETE"]

def test_a_sweep_killed_while_creating_its_job_can_simply_run_again(jobs) -> None:
    job_id = jobs.job_id("creating")
    spec = jobs.spec(n=2)
    folder = jobs.job_dir(job_id)
    folder.mkdir(parents=True)
    leftover = folder / "journal.log.999999999.creating"  # a dead pid's half-written job
    leftover.write_bytes(b'{"op_code": 0, "worker_id": "w", "study_name": "x"')
    assert jobs.cli("resume", job_id).returncode == 2  # there is no job to resume
    out = jobs.sweep(spec, job_id, "--epochs=1")
    assert out.returncode == 0, out.stderr
    assert not leftover.exists()
    assert sorted(p.name for p in folder.glob("journal*")) == ["journal.log"]
    assert [t.state.name for t in jobs.optuna_study(job_id).trials] == ["COMPLETE", "COMPLETE"]
