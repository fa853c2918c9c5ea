"""``jobs.ended.read_ended``: a job that already ended SUCCEEDED with every trial ended, and each
thing that makes it "not this one" (the slow path then answers)."""

from __future__ import annotations

import copy
import os
import sys

import pytest
from jobkit import SINGLE, fake_job, write_members, write_meta

from trials.controller.jobs import registry
from trials.controller.jobs.ended import read_ended
from trials.controller.jobs.lock import ControllerLock
from trials.storage_url import JOURNAL_FILE

DONE = [("ok", [0.5, 0.4], False), ("fail", "The replica workerpool0-0 exited with a non-zero status of 1."),
        ("ok", [0.3], True)]


def _job(tmp_path, outcomes=DONE):
    """A job stored SUCCEEDED with one trial per outcome (None: never run)."""
    return fake_job(tmp_path, SINGLE.replace("max_trial_count: 6", f"max_trial_count: {len(outcomes)}"),
                    outcomes=outcomes)


def _read(tmp_path):
    return read_ended("rep", root=str(tmp_path / "jobs"), storage=None)


def _spec_with(h, **study):
    spec = copy.deepcopy(h.store.meta().spec)
    spec["studySpec"].update(study)
    return spec


def test_a_job_that_ended_succeeded_with_every_trial_ended_is_recognised(tmp_path):
    _job(tmp_path)
    h = _read(tmp_path)
    assert h is not None and h.job_id == "rep" and len(h.store.frozen_trials()) == 3
    storage = "journal:" + str(tmp_path / "jobs" / "rep" / JOURNAL_FILE)
    assert read_ended("rep", root="elsewhere", storage=storage) is not None


@pytest.mark.parametrize("state", ["JOB_STATE_CANCELLED", "JOB_STATE_FAILED", "JOB_STATE_RUNNING",
                                   "JOB_STATE_CANCELLING", "JOB_STATE_QUEUED"])
def test_a_job_in_another_state_is_not(tmp_path, state):
    write_meta(_job(tmp_path).store, state=state)
    assert _read(tmp_path) is None


def test_a_job_with_a_trial_not_run_is_not(tmp_path):
    _job(tmp_path, [*DONE, None])  # stored SUCCEEDED, a WAITING trial left
    assert _read(tmp_path) is None


def test_a_trial_running_or_stopping_is_not_ended(tmp_path):
    h = _job(tmp_path, [*DONE, None])
    claimed = h.store.claim(h.job.study)
    assert claimed is not None
    for state in ("ACTIVE", "STOPPING"):
        h.store.set_trial_attrs(claimed.storage_id, state=state)
        assert _read(tmp_path) is None


@pytest.mark.parametrize("meta", [{"runtime": "docker"}, {"runtime": "slurm"}, {"images": {"local": "x:1"}},
                                  {"slurm": {"partition": "debug", "args": []}},
                                  {"local": {"inject_restarts": 0.5}}, {"local_command": None}])
def test_what_the_slow_paths_start_checks_or_prints_is_not_recognised(tmp_path, meta):
    write_members(_job(tmp_path).store, **meta)
    assert _read(tmp_path) is None


def test_a_study_stopping_config_or_accelerators_are_left_to_the_slow_path(tmp_path):
    h = _job(tmp_path)
    spec = h.store.meta().spec
    write_meta(h.store, spec=_spec_with(h, studyStoppingConfig={"maxNumTrials": 3}))
    assert _read(tmp_path) is None
    gpu = copy.deepcopy(spec)
    gpu["trialJobSpec"]["workerPoolSpecs"][0]["machineSpec"] = {
        "machineType": "n1-standard-4", "acceleratorType": "NVIDIA_TESLA_T4", "acceleratorCount": 1}
    write_meta(h.store, spec=gpu)
    assert _read(tmp_path) is None
    write_meta(h.store, spec=spec)
    assert _read(tmp_path) is not None  # (the same job without them is)


def test_a_held_controller_lock_or_a_journal_in_doubt_is_not(tmp_path):
    _job(tmp_path)
    job_dir = tmp_path / "jobs" / "rep"
    lock = ControllerLock(str(job_dir))
    lock.acquire()
    try:
        assert _read(tmp_path) is None
    finally:
        lock.release()
    assert _read(tmp_path) is not None
    (job_dir / (JOURNAL_FILE + ".lock")).write_text("")
    assert _read(tmp_path) is None
    os.unlink(job_dir / (JOURNAL_FILE + ".lock"))
    with open(job_dir / JOURNAL_FILE, "ab") as f:
        f.write(b'{"op_code": 2, "worker_id": "w", "study_id": 0, "user_att')  # torn: the slow path repairs it
    assert _read(tmp_path) is None


def test_a_snapshot_not_of_the_journal_is_not_replayed_around(tmp_path):
    from trials.study import replay

    _job(tmp_path)
    journal = str(tmp_path / "jobs" / "rep" / JOURNAL_FILE)
    replay.write_snapshot(journal, replay.read_journal(journal, snapshot=False))
    assert _read(tmp_path) is not None  # a current snapshot: read from it
    with open(replay.snapshot_path(journal), "r+b") as f:
        f.truncate(30)
    assert _read(tmp_path) is None
    with open(replay.snapshot_path(journal), "wb") as f:
        f.write(b"not a snapshot")
    assert _read(tmp_path) is None


def test_the_read_writes_nothing_and_an_unreadable_job_is_not(tmp_path):
    _job(tmp_path)
    job_dir = tmp_path / "jobs" / "rep"
    before = sorted(os.listdir(job_dir))
    size = os.path.getsize(job_dir / JOURNAL_FILE)
    assert _read(tmp_path) is not None
    assert sorted(os.listdir(job_dir)) == before and os.path.getsize(job_dir / JOURNAL_FILE) == size
    assert read_ended("nope", root=str(tmp_path / "jobs"), storage=None) is None  # the slow path says why
    h = registry.open_job("rep", root=str(tmp_path / "jobs"), storage=None)
    write_meta(h.store, spec={"studySpec": "not a study"})
    assert _read(tmp_path) is None


def test_the_module_imports_no_optuna():
    import subprocess

    code = "import sys, trials.controller.jobs.ended; print('optuna' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == "False"
