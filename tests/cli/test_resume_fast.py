"""``trials resume`` of a job with nothing to run: the fast path (no Optuna, nothing written) prints
what the slow path prints, byte for byte, and every doubt takes the slow path."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest
from jobkit import write_meta

from trials.controller.jobs import admin, registry
from trials.controller.jobs.lock import ControllerLock
from trials.storage_url import JOURNAL_FILE

pytestmark = pytest.mark.integration

SPEC = """
metrics: {loss: minimize}
parameters:
  x: {type: discrete, values: [1, 2, 3]}
algorithm: grid
max_trial_count: 3
parallel_trial_count: 1
"""
# x=3 fails after two successes: the job still SUCCEEDED (maxFailedTrialCount unset), one trial INFEASIBLE
TRAINER = """
import argparse, sys, hypertune
p = argparse.ArgumentParser()
p.add_argument('--x', type=float)
a = p.parse_args()
if a.x == 3:
    sys.exit(1)
hypertune.HyperTune().report_hyperparameter_tuning_metric(hyperparameter_metric_tag='loss', metric_value=a.x,
                                                          global_step=1)
"""


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "TRIALS_RESUME_FAST"}
    return {**env, "TRIALS_GCS_EMULATOR": "off", **extra}


def _trials(cwd, *argv: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "trials", *argv], cwd=cwd, env=_env(**env),
                          capture_output=True, text=True, timeout=120)


@pytest.fixture
def job(tmp_path):
    """A real 3-trial job run to JOB_STATE_SUCCEEDED (2 SUCCEEDED, 1 INFEASIBLE); its folder."""
    (tmp_path / "spec.yaml").write_text(SPEC)
    (tmp_path / "train.py").write_text(TRAINER)
    run = _trials(tmp_path, "sweep", "spec.yaml", "--job-id", "j", "--quiet", "--", sys.executable, "train.py")
    assert run.returncode == 0, run.stderr
    return tmp_path / "trials-jobs" / "j"


def _files(job_dir) -> dict[str, tuple[int, int]]:
    """Every file of the job folder (its trials' too) with its size and mtime: what a run would change."""
    out = {}
    for where, _, names in os.walk(job_dir):
        for name in names:
            st = os.stat(os.path.join(where, name))
            out[os.path.relpath(os.path.join(where, name), job_dir)] = (st.st_size, st.st_mtime_ns)
    return out


def _journal_size(job_dir) -> int:
    return os.path.getsize(job_dir / JOURNAL_FILE)


def _same_json_lines(fast: str, slow: str) -> None:
    """--json-logs: the same lines but the second the loop's event was written in."""
    stamp = re.compile(r'"timestampSeconds": \d+')
    assert stamp.sub('"timestampSeconds": T', fast) == stamp.sub('"timestampSeconds": T', slow)
    assert [json.loads(line)["event"] for line in fast.splitlines()] == ["job_done", "job_summary"]


@pytest.mark.parametrize("mode", [[], ["--quiet"], ["--json-logs"], ["--echo"]])
def test_the_fast_path_prints_what_the_slow_path_prints_and_writes_nothing(job, mode):
    cwd = job.parent.parent
    before = _files(job)
    fast = _trials(cwd, "resume", "j", *mode)
    assert _files(job) == before  # nothing written: not the journal, not a lock, not a snapshot
    slow = _trials(cwd, "resume", "j", *mode, TRIALS_RESUME_FAST="0")
    assert _journal_size(job) > before[JOURNAL_FILE][0]  # the slow path ran the loop (it writes the job state)
    assert (fast.returncode, fast.stderr) == (slow.returncode, slow.stderr) == (0, "")
    if mode == ["--json-logs"]:
        _same_json_lines(fast.stdout, slow.stdout)
    else:
        assert fast.stdout == slow.stdout
    if not mode or mode == ["--echo"]:
        assert fast.stdout.splitlines() == [
            f"job j: 3 trials, 1 in parallel, sampler grid; folder {job}",
            "outputs: the job has no baseOutputDirectory, so trials get no AIP_MODEL_DIR, AIP_CHECKPOINT_DIR or "
            "AIP_TENSORBOARD_LOG_DIR (as on Vertex); --base-output-dir DIR gives them a base",
            "job j JOB_STATE_SUCCEEDED: 2 succeeded (0 stopped early), 1 infeasible, 0 not run; no trial ran this time",
            "best trial 1: loss=1  --x=1"]
    if mode == ["--quiet"]:
        assert fast.stdout == ""


def test_a_large_job_read_from_its_snapshot_prints_the_same(tmp_path):
    """Past the snapshot's size (stopped, failed, two-metric trials, slim in the lean part): the same bytes."""
    from benchmarks.read_scale import build_job

    root = tmp_path / "jobs"
    job_dir = build_job(str(root), "big", 200, n_metrics=2, n_running=0, n_waiting=0, requeued=False)
    assert _trials(tmp_path, "describe", "big", "--root", str(root)).returncode == 0  # writes the snapshot
    assert os.path.exists(os.path.join(job_dir, JOURNAL_FILE + ".snapshot"))
    for mode in ([], ["--json-logs"]):
        before = _files(job_dir)
        fast = _trials(tmp_path, "resume", "big", "--root", str(root), *mode)
        assert _files(job_dir) == before
        slow = _trials(tmp_path, "resume", "big", "--root", str(root), *mode, TRIALS_RESUME_FAST="0")
        assert _files(job_dir) != before
        assert (fast.returncode, fast.stderr) == (slow.returncode, slow.stderr) == (0, "")
        if mode:
            _same_json_lines(fast.stdout, slow.stdout)
        else:
            assert fast.stdout == slow.stdout and "Pareto front" in fast.stdout


def test_the_fast_path_imports_no_optuna(job):
    """Checked in the command's own process, and against the slow path (the check can fail)."""
    probe = ("import sys\nfrom trials.cli import main\ncode = main(['resume', 'j'])\n"
             "print('optuna' in sys.modules, 'numpy' in sys.modules, code)")
    cwd = job.parent.parent
    fast = subprocess.run([sys.executable, "-c", probe], cwd=cwd, env=_env(), capture_output=True, text=True,
                          timeout=120)
    slow = subprocess.run([sys.executable, "-c", probe], cwd=cwd, env=_env(TRIALS_RESUME_FAST="0"),
                          capture_output=True, text=True, timeout=120)
    assert fast.stdout.splitlines()[-1] == "False False 0", fast.stderr
    assert slow.stdout.splitlines()[-1] == "True True 0", slow.stderr


# --- every doubt takes the slow path ------------------------------------------------------------------
@pytest.mark.parametrize("flags", [
    ["--max-failed-trial-count", "2"], ["--parallel-trial-count", "2"], ["--keep-going"], ["--seed", "3"],
    ["--grace-period", "5"], ["--memory-limit", "4000"], ["--inject-restarts", "0"], ["--stale-after", "60"],
    ["--pass-env", "HOME"], ["--gpus", "0"], ["--ignore-accelerators"], ["--runtime", "host"],
    ["--", sys.executable, "train.py"],
])
def test_an_option_takes_the_slow_path(job, flags):
    before = _journal_size(job)
    run = _trials(job.parent.parent, "resume", "j", *flags)
    assert run.returncode == 0, run.stderr
    assert _journal_size(job) > before  # the loop ran (it wrote the job RUNNING, then SUCCEEDED)
    assert "no trial ran this time" in run.stdout


def test_more_trials_than_the_grid_are_refused_by_the_slow_path(job):
    run = _trials(job.parent.parent, "resume", "j", "--max-trial-count", "4")
    assert run.returncode == 2 and "the grid of job j is exhausted (3 points)" in run.stderr and run.stdout == ""


@pytest.fixture
def random_job(tmp_path):
    """A real 2-trial random-search job run to JOB_STATE_SUCCEEDED (more trials can be added to it)."""
    (tmp_path / "spec.yaml").write_text(SPEC.replace("algorithm: grid", "algorithm: random")
                                        .replace("discrete, values: [1, 2, 3]", "double, min: 1, max: 2")
                                        .replace("max_trial_count: 3", "max_trial_count: 2"))
    (tmp_path / "train.py").write_text(TRAINER)
    run = _trials(tmp_path, "sweep", "spec.yaml", "--job-id", "j", "--quiet", "--", sys.executable, "train.py")
    assert run.returncode == 0, run.stderr
    return tmp_path / "trials-jobs" / "j"


def test_max_trial_count_adds_trials_and_runs_them(random_job):
    run = _trials(random_job.parent.parent, "resume", "j", "--max-trial-count", "3")
    assert run.returncode == 0, run.stderr
    assert "job j: added 1 trials" in run.stdout and "trial 3 started" in run.stdout
    assert "3 succeeded (0 stopped early), 0 infeasible, 0 not run; at most 1 in parallel" in run.stdout


def test_a_cancelled_job_runs_its_remaining_trials(random_job):
    h = registry.open_job("j", root=str(random_job.parent), storage=None)
    admin.change(h, max_trial_count=3)  # a trial left to run, as a cancel leaves one
    write_meta(h.store, state="JOB_STATE_CANCELLED", error={"code": 1, "message": "The job was cancelled."})
    run = _trials(random_job.parent.parent, "resume", "j")
    assert run.returncode == 0, run.stderr
    assert "trial 3 started" in run.stdout and "JOB_STATE_SUCCEEDED: 3 succeeded" in run.stdout


def test_a_cancelled_job_with_every_trial_ended_is_resumed_by_the_slow_path(job):
    h = registry.open_job("j", root=str(job.parent), storage=None)
    write_meta(h.store, state="JOB_STATE_CANCELLED", error={"code": 1, "message": "The job was cancelled."})
    run = _trials(job.parent.parent, "resume", "j")
    assert run.returncode == 0, run.stderr
    assert "JOB_STATE_SUCCEEDED: 2 succeeded (0 stopped early), 1 infeasible, 0 not run; no trial ran" in run.stdout
    assert registry.open_job("j", root=str(job.parent), storage=None).store.meta().state == "JOB_STATE_SUCCEEDED"


def test_a_requeued_trial_runs_again(random_job):
    """A SUCCEEDED job (as stored) with a trial back in the queue: the loop runs it."""
    h = registry.open_job("j", root=str(random_job.parent), storage=None)
    admin.change(h, max_trial_count=3)
    claimed = h.store.claim(h.job.study)
    assert claimed is not None
    h.store.set_trial_attrs(claimed.storage_id, state="REQUESTED", requeued=True)
    h.store.requeue(claimed.storage_id)
    write_meta(h.store, state="JOB_STATE_SUCCEEDED")
    run = _trials(random_job.parent.parent, "resume", "j")
    assert run.returncode == 0, run.stderr
    assert "3 succeeded (0 stopped early), 0 infeasible, 0 not run; at most 1 in parallel" in run.stdout


def test_a_trial_left_running_is_resumed(random_job):
    h = registry.open_job("j", root=str(random_job.parent), storage=None)
    admin.change(h, max_trial_count=3)
    claimed = h.store.claim(h.job.study)
    assert claimed is not None
    h.store.set_trial_attrs(claimed.storage_id, state="ACTIVE")
    write_meta(h.store, state="JOB_STATE_SUCCEEDED")  # (as no controller writes it: the check is the trials')
    run = _trials(random_job.parent.parent, "resume", "j")
    assert run.returncode == 0, run.stderr
    assert "trial 3 resumed" in run.stdout and "3 succeeded" in run.stdout


def test_a_held_controller_lock_takes_the_slow_path(job):
    lock = ControllerLock(str(job))
    lock.acquire()
    try:
        run = _trials(job.parent.parent, "resume", "j")
    finally:
        lock.release()
    assert run.returncode == 2 and "no trial ran this time" not in run.stdout  # (its job line came first)
    assert f"already being run by another controller (pid {os.getpid()})" in run.stderr


@pytest.mark.parametrize("damage", ["stale snapshot", "torn snapshot", "torn record", "journal lock"])
def test_a_journal_in_doubt_takes_the_slow_path(job, damage):
    journal = job / JOURNAL_FILE
    cwd = job.parent.parent
    if damage in ("stale snapshot", "torn snapshot"):
        from trials.study import replay

        replay.write_snapshot(str(journal), replay.read_journal(str(journal), snapshot=False))
        snapshot = job / (JOURNAL_FILE + ".snapshot")
        if damage == "torn snapshot":
            snapshot.write_bytes(snapshot.read_bytes()[:40])
        else:  # of a journal rewritten since: the same length and records, another first worker id
            data = bytearray(journal.read_bytes())
            at = data.index(b'"worker_id":"') + len(b'"worker_id":"')
            data[at] = ord("0") if data[at] != ord("0") else ord("1")
            journal.write_bytes(bytes(data))
    elif damage == "torn record":
        with open(journal, "ab") as f:
            f.write(b'{"op_code": 8, "worker_id": "x", "trial_id": 0, "user_at')
    else:
        (job / (JOURNAL_FILE + ".lock")).write_text("")
    before = _journal_size(job)
    run = _trials(cwd, "resume", "j")
    assert run.returncode == 0, run.stderr
    assert "no trial ran this time" in run.stdout
    assert _journal_size(job) != before  # the slow path: its lock and repair, then the loop's writes
    assert not (job / (JOURNAL_FILE + ".lock")).exists()
