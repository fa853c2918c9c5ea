"""A trainer plants FIFOs where its metrics should be: the controller never blocks on them."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "faults"))
from faultkit import Jobs, wait_no_processes  # noqa: E402

pytestmark = [pytest.mark.faults]

# The first run plants both metric files as FIFOs, then sleeps; a run that finds them exits at once.
FIFO_TRAINER = """\
import os, sys, time
d = os.environ["TRIALS_TRIAL_DIR"]
paths = (os.environ["CLOUD_ML_HP_METRIC_FILE"], os.path.join(d, "metrics.jsonl"))
if os.path.exists(paths[0]):
    sys.exit(0)
for path in paths:
    os.mkfifo(path)
open(os.path.join(d, "planted"), "w").close()
time.sleep(float(sys.argv[1]))
"""


@pytest.fixture
def jobs(tmp_path: Path):
    j = Jobs(tmp_path)
    yield j
    j.cleanup()


def _trainer(jobs: Jobs) -> str:
    path = jobs.root / "fifo_trainer.py"
    path.write_text(FIFO_TRAINER)
    return str(path)


def test_fifo_metric_files_are_skipped_with_one_warning(jobs: Jobs) -> None:
    job_id = jobs.job_id("fifo")
    out = jobs.cli("sweep", jobs.spec(n=2), "--job-id", job_id, "--", sys.executable,
                   _trainer(jobs), "0.5", timeout=60)
    assert out.returncode in (0, 1), out.stderr
    warnings = [line for line in out.stderr.splitlines() + out.stdout.splitlines()
                if "a FIFO, not a regular file" in line]
    assert len(warnings) == 2, out.stdout + out.stderr  # one per trial
    assert "hypertune" in warnings[0] or "metrics" in warnings[0]
    rest = jobs.describe(job_id)
    assert {t["state"] for t in rest["trials"]} == {"INFEASIBLE"}


def _wait_for(path: Path, proc: subprocess.Popen, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not path.exists():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.1)


def test_cancel_and_resume_do_not_block_on_fifo_metric_files(jobs: Jobs) -> None:
    job_id = jobs.job_id("fifocancel")
    spec = jobs.spec(n=1)
    trainer = _trainer(jobs)
    proc = jobs.start("sweep", spec, "--job-id", job_id, "--grace-period", "0.5", "--",
                      sys.executable, trainer, "60")
    _wait_for(jobs.job_dir(job_id) / "1" / "planted", proc)
    time.sleep(1.0)  # a few polls of the FIFOs
    out = jobs.cli("cancel", job_id, timeout=30)
    assert out.returncode == 0, out.stderr
    proc.communicate(timeout=30)  # the controller ends: it was not stuck in open()
    assert jobs.describe(job_id)["state"] == "JOB_STATE_CANCELLED"
    assert wait_no_processes(jobs.tag) == []
    # the resumed trial finds the FIFOs of the interrupted attempt and reads what it can
    out = jobs.cli("resume", job_id, timeout=60)
    assert "a FIFO, not a regular file" in out.stdout + out.stderr, out.stdout + out.stderr
    assert jobs.describe(job_id)["state"] in ("JOB_STATE_SUCCEEDED", "JOB_STATE_FAILED")
