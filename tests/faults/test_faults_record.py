"""The job's record and its states (issue 23, items 6-10): what a real controller writes must be true.

The order each scenario needs (a signal in a start-up window, a cancel or an extension racing a
controller's end, a clock set back mid-trial) is arranged with the hooks of
``tests/scripts/hooks/sitecustomize.py`` and a trainer that waits on files; nothing sleeps and hopes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import pytest
from faultkit import SCRIPTS, TRAINER, Jobs, wait_no_processes

pytestmark = [pytest.mark.faults]

HOOKS = SCRIPTS / "hooks"
GATED = str(SCRIPTS / "gated_trainer.py")


def hooked(jobs: Jobs, hook_dir: Path, hooks: Sequence[str], *args: str) -> subprocess.Popen[str]:
    """``python -m trials ARGS`` with the named test hooks (markers in ``hook_dir``)."""
    hook_dir.mkdir(exist_ok=True)
    env = jobs.env()
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HOOKS), env.get("PYTHONPATH")]))
    env["TEST_HOOKS"] = ",".join(hooks)
    env["TEST_HOOK_DIR"] = str(hook_dir)
    proc = subprocess.Popen([sys.executable, "-m", "trials", *args], cwd=jobs.root, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    jobs.started.append(proc)
    return proc


def wait_file(*paths: Path, procs: Sequence[subprocess.Popen[str]] = (), timeout_s: float = 90.0) -> Path:
    """The first of ``paths`` to exist (a liveness bound only: the order comes from the hooks)."""
    deadline = time.monotonic() + timeout_s
    while True:
        for path in paths:
            if path.exists():
                return path
        for proc in procs:
            if proc.poll() is not None:
                out, err = proc.communicate()
                pytest.fail(f"{proc.args} ended ({proc.returncode}) before {paths}: {out}{err}")
        assert time.monotonic() < deadline, f"none of {paths} appeared"
        time.sleep(0.01)


def go(hook_dir: Path, label: str) -> None:
    (hook_dir / f"{label}.go").touch()


def plan(gates: Path, trial_id: str, **what: object) -> None:
    (gates / f"plan-{trial_id}").write_text(json.dumps(what))


@pytest.fixture
def gates(jobs: Jobs) -> Path:
    """The gated trainer's folder, the shared bucket (a sandboxed trial sees the rest of the host
    copy-on-write): its sweep gets ``--gcs-root jobs.gcs_root``."""
    return jobs.shared()


def states(jobs: Jobs, job_id: str) -> list[str]:
    return [t["state"] for t in jobs.describe(job_id)["trials"]]


# --- 6: a stop signal in the controller's first moments ---------------------------------------------
@pytest.mark.parametrize("command", ["sweep", "resume"])
def test_sigterm_right_after_the_job_is_recorded_running_cancels_it_cleanly(jobs: Jobs, tmp_path: Path,
                                                                            command: str) -> None:
    # The SIGTERM arrives right after JOB_STATE_RUNNING is written, before the job loop's first
    # pass (the sandbox probe and the local Cloud Storage endpoint start then): it used to kill the
    # controller with the default action, leaving the job RUNNING for good with no resume line.
    job_id = jobs.job_id(f"early-{command}")
    spec = jobs.spec(n=2)
    run = ["sweep", spec, "--job-id", job_id, "--grace-period", "0.5", "--", "python", TRAINER, "--epochs=2"]
    if command == "resume":  # a job cancelled once (SIGTERM in the same window), then resumed
        first = hooked(jobs, tmp_path / "first", ["sigterm-after-running"], *run)
        first.communicate(timeout=120)
        assert jobs.describe(job_id)["state"] == "JOB_STATE_CANCELLED"
        run = ["resume", job_id, "--grace-period", "0.5"]
    proc = hooked(jobs, tmp_path / "hooks", ["sigterm-after-running"], *run)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, out + err
    assert "JOB_STATE_CANCELLED" in out and f"resume it with: trials resume {job_id}" in out, out
    assert "Traceback" not in err, err
    rest = jobs.describe(job_id)
    assert rest["state"] == "JOB_STATE_CANCELLED", rest["state"]
    assert "ACTIVE" not in states(jobs, job_id)
    assert wait_no_processes(job_id) == []
    done = jobs.cli("resume", job_id, "--grace-period", "0.5", timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert states(jobs, job_id) == ["SUCCEEDED", "SUCCEEDED"]


# --- 7: a cancel racing a controller's end ------------------------------------------------------------
def test_a_cancel_racing_the_end_of_a_finished_job_never_leaves_it_cancelling(jobs: Jobs, tmp_path: Path) -> None:
    # The controller has run every trial and is about to record the job's end; `trials cancel`
    # reads JOB_STATE_RUNNING, then the controller ends, then the cancel goes on. It used to write
    # CANCELLING over SUCCEEDED and SIGTERM the controller that had already ended: CANCELLING for good.
    job_id = jobs.job_id("cancelrace")
    ctl_dir, cancel_dir = tmp_path / "ctl", tmp_path / "cancel"
    ctl = hooked(jobs, ctl_dir, ["pause:JobRunner._loop:after:1", "pause:JobRunner.run:after:1", "flock-blocked"],
                 "sweep", jobs.spec(n=2), "--job-id", job_id, "--grace-period", "0.5", "--",
                 "python", TRAINER, "--epochs=2")
    wait_file(ctl_dir / "JobRunner._loop-after-1.reached", procs=[ctl])  # every trial done, job RUNNING
    cancel = hooked(jobs, cancel_dir, ["pause-after-state-read"], "cancel", job_id)
    wait_file(cancel_dir / "state-read.reached", procs=[cancel])
    go(ctl_dir, "JobRunner._loop-after-1")
    # the controller ends now (unless the cancel's read holds it off until the cancel is done)
    wait_file(ctl_dir / "JobRunner.run-after-1.reached", ctl_dir / "flock-blocked", procs=[ctl])
    go(cancel_dir, "state-read")
    out, err = cancel.communicate(timeout=60)
    assert cancel.returncode == 0, out + err
    go(ctl_dir, "JobRunner.run-after-1")
    ctl_out, ctl_err = ctl.communicate(timeout=60)
    assert jobs.describe(job_id)["state"] == "JOB_STATE_SUCCEEDED", (out, ctl_out, ctl_err)
    assert states(jobs, job_id) == ["SUCCEEDED", "SUCCEEDED"]
    assert ctl.returncode == 0, ctl_out + ctl_err
    again = jobs.cli("cancel", job_id)  # a cancel of a finished job says so and changes nothing
    assert again.returncode == 0, again.stderr
    assert again.stdout == f"job {job_id} already SUCCEEDED: nothing to cancel\n", again.stdout
    assert jobs.describe(job_id)["state"] == "JOB_STATE_SUCCEEDED"


# --- 8: trials added while the controller finishes its last one -----------------------------------------
def test_trials_added_while_the_last_trial_is_recorded_are_run_by_the_running_controller(
        jobs: Jobs, tmp_path: Path, gates: Path) -> None:
    # The controller found no trial left to claim and is recording its last trial when
    # `trials resume --max-trial-count 4` adds two: it used to end SUCCEEDED without them although
    # the extender said it would run them.
    job_id = jobs.job_id("extendlast")
    ctl_dir = tmp_path / "ctl"
    plan(gates, "2", wait_for="go-2")  # trial 2 ends after trial 1 is recorded
    # next_claim's 3rd call: after trials 1 and 2, the claim of trial 1's free slot finds none left
    ctl = hooked(jobs, ctl_dir, ["pause:JobRunner._finalize:after:1", "pause:LoopState.next_claim:after:3",
                                 "pause:JobRunner._finalize:before:2"],
                 "sweep", jobs.spec(n=2, parallel=2), "--job-id", job_id, "--grace-period", "0.5",
                 "--gcs-root", str(jobs.gcs_root), "--", "python", GATED, str(gates))
    wait_file(ctl_dir / "JobRunner._finalize-after-1.reached", procs=[ctl])
    go(ctl_dir, "JobRunner._finalize-after-1")
    # trial 2 ends only once the controller found no trial left to claim (ending in the same pass as
    # trial 1's record, it would leave the loop claiming the added trials itself, with no line for them)
    wait_file(ctl_dir / "LoopState.next_claim-after-3.reached", procs=[ctl])
    (gates / "go-2").touch()
    go(ctl_dir, "LoopState.next_claim-after-3")
    wait_file(ctl_dir / "JobRunner._finalize-before-2.reached", procs=[ctl])
    out = jobs.cli("resume", job_id, "--max-trial-count", "4")
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"added 2 trials (now 4); the controller already running the job (pid {ctl.pid}) runs them" \
        in out.stdout, out.stdout
    go(ctl_dir, "JobRunner._finalize-before-2")
    ctl_out, ctl_err = ctl.communicate(timeout=120)
    assert ctl.returncode == 0, ctl_out + ctl_err
    assert "trials added to the job: 2 to run, 4 in all" in ctl_out, ctl_out
    assert jobs.describe(job_id)["state"] == "JOB_STATE_SUCCEEDED"
    assert states(jobs, job_id) == ["SUCCEEDED"] * 4


def test_trials_added_after_the_controller_ended_are_run_by_the_extender(jobs: Jobs, tmp_path: Path) -> None:
    # The controller has recorded the job's end but has not exited yet (it still held its lock):
    # the extender used to say the running controller would run the new trials, and nobody did.
    job_id = jobs.job_id("extendend")
    ctl_dir = tmp_path / "ctl"
    ctl = hooked(jobs, ctl_dir, ["pause:JobRunner.run:after:1"], "sweep", jobs.spec(n=2), "--job-id", job_id,
                 "--grace-period", "0.5", "--", "python", TRAINER, "--epochs=2")
    wait_file(ctl_dir / "JobRunner.run-after-1.reached", procs=[ctl])
    assert jobs.describe(job_id)["state"] == "JOB_STATE_SUCCEEDED"
    out = jobs.cli("resume", job_id, "--max-trial-count", "4", "--grace-period", "0.5", timeout=120)
    go(ctl_dir, "JobRunner.run-after-1")
    ctl.communicate(timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"job {job_id}: added 2 trials\n" in out.stdout, out.stdout
    assert "already running" not in out.stdout
    assert jobs.describe(job_id)["state"] == "JOB_STATE_SUCCEEDED"
    assert states(jobs, job_id) == ["SUCCEEDED"] * 4


# --- 9: a job its first failure ended goes on with a higher failure budget ---------------------------------
def test_a_failed_job_resumes_with_a_higher_failure_budget_and_its_stopped_trial_is_not_left_requested(
        jobs: Jobs, gates: Path) -> None:
    job_id = jobs.job_id("failbudget")
    plan(gates, "1", wait_for="reported-2", exit=1)  # trial 1 fails while trial 2 runs
    plan(gates, "2", wait_for="never")  # trial 2 runs until the job's failure stops it
    out = jobs.cli("sweep", jobs.spec(n=4, parallel=2), "--job-id", job_id, "--grace-period", "0.5",
                   "--gcs-root", str(jobs.gcs_root), "--", "python", GATED, str(gates), timeout=120)
    assert out.returncode == 1, out.stdout + out.stderr
    assert "JOB_STATE_FAILED" in out.stdout
    rest = jobs.describe(job_id)
    assert rest["state"] == "JOB_STATE_FAILED"
    # trial 2 was stopped because the job failed: it ended with the job, not REQUESTED ("runs again")
    assert [t["state"] for t in rest["trials"][:2]] == ["INFEASIBLE", "INFEASIBLE"], rest["trials"]
    assert rest["trials"][1]["infeasibleReason"].startswith("The trial was stopped because the job failed: Trial 1:")
    journal = (jobs.job_dir(job_id) / "journal.log").read_bytes()

    plain = jobs.cli("resume", job_id)  # as it is, it would fail again at once: say so, change nothing
    assert plain.returncode == 2, plain.stdout + plain.stderr
    assert plain.stderr.strip().splitlines() == [
        f"trials: error: job {job_id} would fail again at once: 1 of its trials failed (maxFailedTrialCount "
        f"unset: the first failure ends it); to run its 2 trials left, resume it with "
        f"--max-failed-trial-count N (N > 1)"], plain.stderr
    for bad, says in ((["--max-failed-trial-count", "-1"], "expected an integer ≥ 0"),
                      (["--max-failed-trial-count", "5"], "expected a maxFailedTrialCount ≤ maxTrialCount (4)"),
                      (["--parallel-trial-count", "0"], "--parallel-trial-count: expected an integer ≥ 1")):
        refused = jobs.cli("resume", job_id, *bad)
        assert refused.returncode == 2 and says in refused.stderr, refused.stderr
        assert len(refused.stderr.strip().splitlines()) == 1, refused.stderr
    assert (jobs.job_dir(job_id) / "journal.log").read_bytes() == journal  # nothing written

    more = jobs.cli("resume", job_id, "--max-failed-trial-count", "3", "--parallel-trial-count", "1",
                    "--grace-period", "0.5", timeout=120)
    assert more.returncode == 0, more.stdout + more.stderr
    assert f"job {job_id}: maxFailedTrialCount 3, parallelTrialCount 1 from now on" in more.stdout, more.stdout
    rest = jobs.describe(job_id)
    assert rest["state"] == "JOB_STATE_SUCCEEDED"
    assert [t["state"] for t in rest["trials"]] == ["INFEASIBLE", "INFEASIBLE", "SUCCEEDED", "SUCCEEDED"]
    assert (rest["maxFailedTrialCount"], rest["parallelTrialCount"]) == (3, 1)
    exported = jobs.cli("export", job_id, "--format", "rest-json", "--draft")
    assert exported.returncode == 0, exported.stderr
    assert (json.loads(exported.stdout)["maxFailedTrialCount"], json.loads(exported.stdout)["parallelTrialCount"]) \
        == (3, 1)


# --- 10: the wall clock set back while a trial runs ----------------------------------------------------------
def test_a_wall_clock_set_back_mid_trial_changes_no_duration_and_no_end_before_its_start(
        jobs: Jobs, tmp_path: Path, gates: Path) -> None:
    # The controller's wall clock goes back 2 h while trial 1 runs: it used to print
    # "SUCCEEDED … -7196.8s" and record a job (and trial) ending before it started.
    from trials.timefmt import parse_rfc3339

    job_id = jobs.job_id("clock")
    ctl_dir = tmp_path / "ctl"
    plan(gates, "1", wait_for="go-1")
    ctl = hooked(jobs, ctl_dir, ["clock-jump"], "sweep", jobs.spec(n=1), "--job-id", job_id,
                 "--grace-period", "0.5", "--gcs-root", str(jobs.gcs_root), "--", "python", GATED, str(gates))
    wait_file(gates / "reported-1", procs=[ctl])
    (ctl_dir / "jump").touch()  # from now on the controller's time.time() is 2 h behind
    (gates / "go-1").touch()
    out, err = ctl.communicate(timeout=120)
    assert ctl.returncode == 0, out + err
    line = next(x for x in out.splitlines() if "trial 1 SUCCEEDED" in x)
    seconds = float(line.split(", ")[1].split("s:")[0])
    assert 0 <= seconds < 3600, line
    rest = jobs.describe(job_id)
    start, end = parse_rfc3339(rest["startTime"]), parse_rfc3339(rest["endTime"])
    assert 0 <= end - start < 3600, (rest["startTime"], rest["endTime"])
    trial = rest["trials"][0]
    t_start, t_end = parse_rfc3339(trial["startTime"]), parse_rfc3339(trial["endTime"])
    assert 0 <= t_end - t_start < 3600, (trial["startTime"], trial["endTime"], seconds)
    assert start <= t_start and t_end <= end
    assert [float(m["elapsedDuration"].rstrip("s")) >= 0 for m in trial["measurements"]] == [True, True]
