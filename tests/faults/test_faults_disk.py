"""The job's own storage cannot grow (a full disk, a file-size limit): the job pauses, nothing is lost."""

from __future__ import annotations

import contextlib
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import pytest
from faultkit import TRAINER, wait_no_processes

pytestmark = [pytest.mark.faults]


def test_a_journal_that_cannot_grow_pauses_the_job_and_resume_finishes_it(jobs) -> None:
    # Issue 12 item 12: the controller died of `OSError: No space left on device` in append_logs
    # and left the job RUNNING. Here, once trial 1 is recorded, the controller may not grow any
    # file by more than 2 kB (RLIMIT_FSIZE: EFBIG, as a full disk gives ENOSPC).
    job_id = jobs.job_id("full")
    proc = jobs.start("sweep", jobs.spec(n=3, parallel=1), "--job-id", job_id, "--grace-period", "2",
                      "--", "python", TRAINER, "--epochs=60", "--sleep=0.05")
    journal = jobs.job_dir(job_id) / "journal.log"

    def trial_one_done() -> bool:
        return journal.exists() and any(
            t.user_attrs.get("state") == "SUCCEEDED" for t in jobs.optuna_study(job_id).trials)

    deadline = time.monotonic() + 60
    while not trial_one_done():
        assert time.monotonic() < deadline and proc.poll() is None, "trial 1 never finished"
        time.sleep(0.1)
    before = {t.number: (t.user_attrs, t.values) for t in jobs.optuna_study(job_id).trials
              if t.user_attrs.get("state") == "SUCCEEDED"}
    limit = journal.stat().st_size + 2048
    resource.prlimit(proc.pid, resource.RLIMIT_FSIZE, (limit, limit))
    assert_paused_with_one_line(proc, job_id)
    assert_resume_finishes_and_keeps(jobs, job_id, before)


def assert_paused_with_one_line(proc, job_id: str, *, says: str = "") -> None:
    """The controller exited 1 with one 'disk is full' line naming `trials resume`, and no replica left."""
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 1, out[-2000:] + err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert "disk is full" in lines[0] and says in lines[0] and f"trials resume {job_id}" in lines[0], err
    assert "internal error" not in err and "Traceback" not in err
    assert wait_no_processes(job_id) == [], "a replica outlived the paused controller"


def assert_resume_finishes_and_keeps(jobs, job_id: str, before: dict) -> None:
    """`trials resume` ends the 3-trial job SUCCEEDED, with what was recorded before the pause unchanged."""
    resumed = jobs.cli("resume", job_id, "--grace-period", "2", timeout=120)
    assert resumed.returncode == 0, resumed.stdout[-2000:] + resumed.stderr
    study = jobs.optuna_study(job_id)
    assert study.user_attrs["trials:state"] == "JOB_STATE_SUCCEEDED"
    assert [t.user_attrs["state"] for t in study.trials] == ["SUCCEEDED"] * 3
    for number, (attrs, values) in before.items():
        assert study.trials[number].user_attrs == attrs and study.trials[number].values == values


def _mount(*argv: str) -> bool:
    return subprocess.run(["mount", *argv], capture_output=True).returncode == 0


def test_a_job_root_on_a_full_tmpfs_pauses_the_job_and_resume_finishes_it(jobs, tmp_path: Path) -> None:
    # The same promise as above with a real ENOSPC: the job root is a 256 kB tmpfs that a filler
    # file fills once trial 1 is recorded. The trial folders are bind mounts of an ordinary folder,
    # so what runs out of space is the job's own storage (journal.log), not a trainer's writes.
    if sys.platform != "linux" or os.geteuid() != 0:
        pytest.skip("needs root to mount a tiny tmpfs (the file-size-limit test above covers the rest)")
    root = jobs.root / "trials-jobs"
    root.mkdir()
    if not _mount("-t", "tmpfs", "-o", "size=256k", "tmpfs", str(root)):
        pytest.skip("mounting a tmpfs is not permitted here")
    job_id = jobs.job_id("tmpfs")
    mounted = [root]
    proc = None
    try:
        for trial in ("1", "2", "3"):
            (tmp_path / "elsewhere" / trial).mkdir(parents=True)
            (jobs.job_dir(job_id) / trial).mkdir(parents=True)
            assert _mount("--bind", str(tmp_path / "elsewhere" / trial), str(jobs.job_dir(job_id) / trial))
            mounted.insert(0, jobs.job_dir(job_id) / trial)
        proc = jobs.start("sweep", jobs.spec(n=3, parallel=1), "--job-id", job_id, "--grace-period", "2",
                          "--", "python", TRAINER, "--epochs=60", "--sleep=0.05")
        journal = jobs.job_dir(job_id) / "journal.log"
        deadline = time.monotonic() + 60
        while not (journal.exists() and any(t.user_attrs.get("state") == "SUCCEEDED"
                                            for t in jobs.optuna_study(job_id).trials)):
            assert time.monotonic() < deadline and proc.poll() is None, "trial 1 never finished"
            time.sleep(0.1)
        before = {t.number: (t.user_attrs, t.values) for t in jobs.optuna_study(job_id).trials
                  if t.user_attrs.get("state") == "SUCCEEDED"}
        filler = root / "filler"
        with open(filler, "wb", buffering=0) as f, contextlib.suppress(OSError):
            while True:
                f.write(b"\0" * 4096)
        assert_paused_with_one_line(proc, job_id, says="No space left on device")
        filler.unlink()  # space again
        assert_resume_finishes_and_keeps(jobs, job_id, before)
    finally:
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait()
        for path in mounted:
            subprocess.run(["umount", "-l", str(path)], capture_output=True)
