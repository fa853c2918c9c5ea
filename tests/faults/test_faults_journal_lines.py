"""One bad line inside journal.log: describe and resume name the file and line (exit 2); repair keeps the rest."""

from __future__ import annotations

import json
import os

import pytest

pytestmark = [pytest.mark.faults]

DAMAGE = {
    "torn-then-more": lambda lines: lines[:3] + [lines[3][: len(lines[3]) // 2]] + lines[3:],
    "nul-bytes": lambda lines: lines[:3] + [b"\0" * 40 + b"\n"] + lines[3:],
    "garbage": lambda lines: lines[:3] + [b"\xff\xfe not json at all \x80\n"] + lines[3:],
    "wrong-shape": lambda lines: lines[:3] + [b'{"op_code": 4, "worker_id": "x", "trial_id": 99999}\n',
                                              b'[1, 2, 3]\n'] + lines[3:],
}


@pytest.fixture
def finished_job(jobs):
    job_id = jobs.job_id("badline")
    out = jobs.sweep(jobs.spec(n=3), job_id, "--epochs=2", opts=["--quiet"])
    assert out.returncode == 0, out.stderr
    return job_id


@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_a_bad_journal_line_is_named_and_repair_keeps_every_readable_record(jobs, finished_job, damage) -> None:
    journal = jobs.job_dir(finished_job) / "journal.log"
    before = jobs.describe(finished_job)
    lines = journal.read_bytes().splitlines(keepends=True)
    journal.write_bytes(b"".join(DAMAGE[damage](lines)))
    for argv in (["describe", finished_job], ["resume", finished_job], ["best", finished_job]):
        out = jobs.cli(*argv)
        assert out.returncode == 2, out.stdout + out.stderr
        err = out.stderr.strip().splitlines()
        assert len(err) == 1 and "internal error" not in err[0], out.stderr
        assert str(journal) in err[0] and "line 4:" in err[0] and f"trials repair {finished_job}" in err[0]
    out = jobs.cli("repair", finished_job)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "dropped line 4:" in out.stdout and "kept" in out.stdout
    backups = [n for n in os.listdir(journal.parent) if n.startswith("journal.log.corrupt-")]
    assert len(backups) == 1  # the original is kept
    after = jobs.describe(finished_job)
    assert json.dumps(after["trials"], sort_keys=True) == json.dumps(before["trials"], sort_keys=True)
    assert jobs.cli("repair", finished_job).stdout.strip().endswith("nothing to repair")


def test_a_journal_that_is_a_directory_is_one_line_and_exit_2(jobs, finished_job) -> None:
    journal = jobs.job_dir(finished_job) / "journal.log"
    journal.rename(journal.with_name("moved.log"))
    journal.mkdir()
    out = jobs.cli("describe", finished_job)
    assert out.returncode == 2, out.stderr
    assert out.stderr.strip().count("\n") == 0 and "got a directory" in out.stderr, out.stderr
