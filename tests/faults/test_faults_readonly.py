"""A read-only job root: commands that must write say so in one line, exit 2; reading still works."""

from __future__ import annotations

import subprocess
import sys

import pytest

pytestmark = [pytest.mark.faults]


@pytest.fixture
def readonly_job(jobs):
    job_id = jobs.job_id("ro")
    out = jobs.sweep(jobs.spec(n=1), job_id, "--epochs=1", opts=["--quiet"])
    assert out.returncode == 0, out.stderr
    root = jobs.root / "trials-jobs"
    mounted = subprocess.run(["mount", "--bind", str(root), str(root)], capture_output=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot bind-mount (needs root): {mounted.stderr.decode().strip()}")
    try:
        remount = subprocess.run(["mount", "-o", "remount,ro,bind", str(root)], capture_output=True)
        if remount.returncode != 0:
            pytest.skip(f"cannot remount read-only: {remount.stderr.decode().strip()}")
        yield job_id
    finally:
        subprocess.run(["umount", str(root)], check=True)


@pytest.mark.parametrize("argv", [["resume"], ["resume", "--max-trial-count", "3"], ["report"]],
                         ids=["resume-slow-path", "resume-extend", "report"])
def test_a_read_only_job_root_is_one_line_and_exit_2(jobs, readonly_job, argv: list[str]) -> None:
    env = {**jobs.env(), "TRIALS_RESUME_FAST": "0"}  # a resume that writes (the fast path writes nothing)
    out = subprocess.run([sys.executable, "-m", "trials", argv[0], readonly_job, *argv[1:]], cwd=jobs.root,
                         env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 2, out.stdout + out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "Read-only file system" in lines[0] and "internal error" not in lines[0], out.stderr
    assert "cannot write" in lines[0]
    assert jobs.describe(readonly_job)["state"] == "JOB_STATE_SUCCEEDED"  # reading still works


def test_a_resume_with_nothing_to_run_answers_from_a_read_only_job_root_and_writes_nothing(jobs, readonly_job):
    out = jobs.cli("resume", readonly_job)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "JOB_STATE_SUCCEEDED" in out.stdout and "no trial ran this time" in out.stdout and out.stderr == ""
