"""A journal an earlier trials wrote (tests/data/job_v1: before the job's record had a version) is described and
resumed; a job a newer trials wrote is refused in one line with exit code 2."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

FIXTURE = Path(__file__).resolve().parent.parent / "data" / "job_v1"
MADE_IN = "/tmp/v1fixture"  # where the fixture's job was made: its paths are moved to the test's folder


def _trials(cwd: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "TRIALS_RESUME_FAST"}
    return subprocess.run([sys.executable, "-m", "trials", *argv], cwd=cwd, env={**env, "TRIALS_GCS_EMULATOR": "off"},
                          capture_output=True, text=True, timeout=120)


@pytest.fixture
def old_job(tmp_path: Path) -> Path:
    """Job ``v1`` as the earlier trials left it, under ``tmp_path/jobs``; its trainer and ``python`` beside."""
    text = (FIXTURE / "journal.log").read_text()
    assert '"trials:version"' not in text  # written before the record had a version
    job_dir = tmp_path / "jobs" / "v1"
    job_dir.mkdir(parents=True)
    (job_dir / "journal.log").write_text(text.replace(MADE_IN, str(tmp_path)))
    (tmp_path / "train.py").write_text((FIXTURE / "train.py").read_text())
    (tmp_path / "python").write_text(f"#!/bin/sh\nexec {sys.executable} \"$@\"\n")
    (tmp_path / "python").chmod(0o755)
    return tmp_path


def _meta(root: Path):
    from trials.study.storage import open_storage
    from trials.study.store import JobStore

    return JobStore.open(open_storage(f"journal:{root / 'jobs' / 'v1' / 'journal.log'}"), "v1").meta()


def test_an_earlier_journal_is_described(old_job: Path) -> None:
    run = _trials(old_job, "describe", "v1", "--root", "jobs", "--format", "json")
    assert run.returncode == 0, run.stderr
    rest = json.loads(run.stdout)
    assert rest["state"] == "JOB_STATE_SUCCEEDED" and len(rest["trials"]) == 2
    assert rest["createTime"] == "2026-12-06T18:08:33.969740Z" and "error" not in rest
    run = _trials(old_job, "describe", "v1", "--root", "jobs")
    assert run.returncode == 0 and run.stdout.startswith("job v1  JOB_STATE_SUCCEEDED  2 trials"), run.stderr


def test_an_earlier_journal_is_resumed_with_its_settings(old_job: Path) -> None:
    before = _meta(old_job)
    assert before.version == 1 and before.keep_going and before.pass_env == ("LANG",)
    run = _trials(old_job, "resume", "v1", "--root", "jobs", "--max-trial-count", "3", "--quiet")
    assert run.returncode == 0, run.stderr
    after = _meta(old_job)
    assert after.state == "JOB_STATE_SUCCEEDED" and after.end_time != before.end_time
    assert (after.keep_going, after.pass_env, after.local_command, after.sampler, after.seed) == (
        True, ("LANG",), (str(old_job / "python"), "train.py"), "gp-warped", 1)
    rest = json.loads(_trials(old_job, "describe", "v1", "--root", "jobs", "--format", "json").stdout)
    assert [t["state"] for t in rest["trials"]] == ["SUCCEEDED"] * 3


def test_a_job_a_newer_trials_wrote_is_refused_with_exit_code_2(old_job: Path) -> None:
    from trials.study.storage import open_storage

    open_storage(f"journal:{old_job / 'jobs' / 'v1' / 'journal.log'}").set_study_user_attr(0, "trials:version", 2)
    for argv in (("describe", "v1"), ("resume", "v1"), ("cancel", "v1")):
        run = _trials(old_job, *argv, "--root", "jobs")
        assert run.returncode == 2, (argv, run.stdout, run.stderr)
        assert run.stderr == ("trials: error: job 'v1' was written by a newer trials: its metadata version is 2, "
                              "this trials reads version 1 (upgrade trials to open it)\n"), argv
