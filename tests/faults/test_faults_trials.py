"""Trials that misbehave on purpose: each fails (or not) alone, with a clear reason, and the job goes on."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from faultkit import SCRIPTS, TRAINER, processes_of, wait_no_processes

pytestmark = [pytest.mark.faults]


def grid_spec(jobs, faults: list[str], *, xs=(0.1,), max_failed: int = 0, parallel: int = 2,
              extra: str = "") -> str:
    """A grid job over ``fault`` x ``x``: one trial per (x, fault), in that order (x outermost)."""
    n = len(faults) * len(xs)
    path = jobs.root / "grid.yaml"
    path.write_text(
        "metrics: {loss: minimize}\n"
        "parameters:\n"
        f"  x: {{type: discrete, values: {list(xs)}}}\n"
        f"  fault: {{type: categorical, values: {json.dumps(faults)}}}\n"
        "algorithm: grid\n"
        f"max_trial_count: {n}\nparallel_trial_count: {parallel}\nmax_failed_trial_count: {max_failed}\n"
        + extra)
    return str(path)


def by_fault(rest: dict) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for t in rest["trials"]:
        params = {p["parameterId"]: p["value"] for p in t["parameters"]}
        out.setdefault(params.get("fault", "none"), []).append(t)
    return out


def steps(trial: dict) -> list[int]:
    return [int(m["stepCount"]) for m in trial.get("measurements", [])]


def final_value(trial: dict) -> float:
    return trial["finalMeasurement"]["metrics"][0]["value"]


def test_crash_at_random_epoch_fails_alone_and_a_transient_exit_restarts(jobs) -> None:
    job_id = jobs.job_id("crash")
    spec = grid_spec(jobs, ["none", "crash", "transient"], xs=(0.1, 0.5), max_failed=3)
    out = jobs.sweep(spec, job_id, "--epochs=4", "--sleep=0.01")
    assert out.returncode == 0, out.stderr
    rest = jobs.describe(job_id)
    assert rest["state"] == "JOB_STATE_SUCCEEDED"
    trials = by_fault(rest)
    local = jobs.local(job_id)
    for t in trials["crash"]:
        assert t["state"] == "INFEASIBLE"
        assert t["infeasibleReason"] == ("The replica workerpool0-0 exited with a non-zero status of 1. "
                                         "Termination reason: Error.")  # Vertex's words
        reason = local[t["id"]]["error_detail"][0]  # the exception, in the local view
        assert "RuntimeError: injected crash at epoch" in reason
        epoch = int(reason.split("injected crash at epoch ")[1].split(".")[0].split()[0])
        assert steps(t) == list(range(1, epoch)), "the steps before the crash are kept"
    for t in trials["transient"] + trials["none"]:
        assert t["state"] == "SUCCEEDED", t.get("infeasibleReason")
        assert steps(t) == [1, 2, 3, 4]
    study = jobs.optuna_study(job_id)
    transient = [t for t in study.trials if t.params["fault"] == "transient"]
    for t in transient:
        statuses = [a["exitStatus"] for a in t.user_attrs["attempts"] if "exitStatus" in a]
        assert statuses == [139, 0], statuses  # SIGSEGV-like exit restarted once, same trial id


def test_hanging_trial_is_stopped_by_its_timeout(jobs) -> None:
    job_id = jobs.job_id("hang")
    spec = grid_spec(jobs, ["none", "hang"], max_failed=2,
                     extra=f"command: [python, {TRAINER}]\nargs: [--epochs=2, --sleep=0.01]\ntimeout: 1.5\n")
    start = time.monotonic()
    out = jobs.cli("sweep", spec, "--job-id", job_id, "--grace-period", "0.3")
    elapsed = time.monotonic() - start
    assert out.returncode == 0, out.stderr
    trials = by_fault(jobs.describe(job_id))
    hung = trials["hang"][0]
    assert hung["state"] == "INFEASIBLE"
    assert "exceeded its maximum running time of 1.5s" in hung["infeasibleReason"]
    assert steps(hung) == [1], "what it reported before hanging is kept"
    assert trials["none"][0]["state"] == "SUCCEEDED"
    assert elapsed < 12, elapsed  # SIGTERM is ignored: SIGKILL after the 0.3 s grace period
    assert wait_no_processes(jobs.tag) == []


def test_stdout_flood_is_logged_and_echoed_without_harm(jobs) -> None:
    job_id = jobs.job_id("flood")
    out = jobs.sweep(jobs.spec(), job_id, "--fault=flood", "--flood-mb=8", opts=["--echo"])
    assert out.returncode == 0, out.stderr[-2000:]
    trial = jobs.describe(job_id)["trials"][0]
    assert trial["state"] == "SUCCEEDED"
    log = jobs.job_dir(job_id) / "1" / "workerpool0-0.stdout.log"
    assert log.stat().st_size > 8 * 2**20
    assert "[1/workerpool0-0] line 19999" in out.stdout
    longest = max(len(line) for line in out.stdout.splitlines())
    assert longest < 2**17, "an endless line is echoed in bounded pieces"


@pytest.mark.parametrize("fault, step, value", [("torn", 1, 0.25), ("huge", 7, 0.125)])
def test_torn_or_huge_hypertune_file_keeps_its_good_lines(jobs, fault: str, step: int, value: float) -> None:
    job_id = jobs.job_id(fault)
    out = jobs.sweep(jobs.spec(), job_id, f"--fault={fault}")
    assert out.returncode == 0, out.stderr
    trial = jobs.describe(job_id)["trials"][0]
    assert trial["state"] == "SUCCEEDED", trial.get("infeasibleReason")
    assert steps(trial) == [step]
    assert final_value(trial) == value


def test_nan_final_value_makes_the_trial_infeasible(jobs) -> None:
    job_id = jobs.job_id("nan")
    out = jobs.sweep(jobs.spec(), job_id, "--fault=nan")
    trial = jobs.describe(job_id)["trials"][0]
    assert trial["state"] == "INFEASIBLE"
    assert "objective metric loss has the non-finite final value nan" in trial["infeasibleReason"]
    assert steps(trial)[:2] == [1, 2], "the finite steps are kept"
    # infeasible is not failed: the job itself succeeded, but no trial did, so the sweep exits 1
    assert jobs.describe(job_id)["state"] == "JOB_STATE_SUCCEEDED"
    assert out.returncode == 1 and "error: no trial succeeded" in out.stdout


def test_wrong_tag_warns_and_names_the_reported_tags(jobs) -> None:
    job_id = jobs.job_id("tag")
    # 2 steps: fewer than the job's wrong-tag rule waits for (policy/tags.py, 3), which would otherwise race the
    # trial's exit on a loaded machine and fail the job while the trial still runs (its own test is elsewhere)
    out = jobs.sweep(jobs.spec(), job_id, "--fault=wrong_tag", "--epochs=2")
    assert "reports tags not in the spec: accuracy (spec metrics: loss)" in out.stdout + out.stderr
    trial = jobs.describe(job_id)["trials"][0]
    assert trial["state"] == "INFEASIBLE"
    assert "without reporting the objective metric loss; it reported accuracy" in trial["infeasibleReason"]


def test_exit_0_without_a_metric_is_infeasible(jobs) -> None:
    job_id = jobs.job_id("nometric")
    jobs.sweep(jobs.spec(), job_id, "--fault=no_metric")
    trial = jobs.describe(job_id)["trials"][0]
    assert trial["state"] == "INFEASIBLE"
    assert "without reporting the objective metric loss; it reported no metrics at all" in trial["infeasibleReason"]


def test_forked_child_that_ignores_sigterm_is_stopped_with_its_group(jobs) -> None:
    job_id = jobs.job_id("fork")
    out = jobs.sweep(jobs.spec(n=2, parallel=2), job_id, "--fault=fork", "--epochs=2")
    assert out.returncode == 0, out.stderr
    for trial_id in ("1", "2"):  # each forked its child (a pid of its PID namespace with the sandbox)
        assert int((jobs.job_dir(job_id) / trial_id / "child.pid").read_text()) > 0
    assert [t["state"] for t in jobs.describe(job_id)["trials"]] == ["SUCCEEDED", "SUCCEEDED"]
    assert processes_of(jobs.tag) == []


def test_file_size_limit_fails_the_trial_with_its_reason_and_the_job_goes_on(jobs) -> None:
    job_id = jobs.job_id("fsize")
    spec = grid_spec(jobs, ["fill", "none"], max_failed=2, parallel=1)
    out = jobs.cli("sweep", spec, "--job-id", job_id, "--", "python", str(SCRIPTS / "fault_fsize.py"),
                   str(256 * 1024), TRAINER, "--fill-mb=1")
    assert out.returncode == 0, out.stderr
    trials = by_fault(jobs.describe(job_id))
    assert trials["fill"][0]["state"] == "INFEASIBLE"
    detail = jobs.local(job_id)[trials["fill"][0]["id"]]["error_detail"]
    assert "OSError: [Errno 27] File too large" in detail[0]
    assert trials["none"][0]["state"] == "SUCCEEDED"


def _can_mount_tmpfs(tmp: Path) -> bool:
    if sys.platform != "linux" or os.geteuid() != 0:
        return False
    probe = tmp / "probe"
    probe.mkdir()
    ok = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(probe)],
                        capture_output=True).returncode == 0
    if ok:
        subprocess.run(["umount", str(probe)], check=True)
    return ok


def test_full_disk_in_trial_directories_fails_those_trials_only(jobs, tmp_path: Path) -> None:
    if not _can_mount_tmpfs(tmp_path):
        pytest.skip("needs root to mount a tiny tmpfs (the file-size-limit test covers the rest)")
    job_id = jobs.job_id("enospc")
    spec = jobs.spec(n=3, parallel=1, max_failed=3)
    mounts = [jobs.job_dir(job_id) / "1", jobs.job_dir(job_id) / "2"]
    try:
        for m in mounts:
            m.mkdir(parents=True)
            subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(m)], check=True)
        with open(mounts[0] / "prefill", "wb") as f, contextlib.suppress(OSError):  # trial 1: full before it starts
            f.write(b"\0" * 2**20)
        out = jobs.sweep(spec, job_id, "--fault=fill", "--fill-mb=1")  # trial 2: fills its disk
        assert out.returncode == 0, out.stderr
        trials = jobs.describe(job_id)["trials"]
        local = jobs.local(job_id)
    finally:
        for m in mounts:
            subprocess.run(["umount", str(m)], capture_output=True)
    assert trials[0]["state"] == "INFEASIBLE"
    assert trials[0]["infeasibleReason"].startswith("The trial could not be started: No space left on device")
    assert trials[1]["state"] == "INFEASIBLE"
    assert "No space left on device: the filesystem of" in local[trials[1]["id"]]["error_detail"][0]
    assert trials[2]["state"] == "SUCCEEDED"


def test_a_missing_trial_command_fails_the_trial_and_ends_the_job_cleanly(jobs) -> None:
    job_id = jobs.job_id("nocmd")
    out = jobs.cli("sweep", jobs.spec(n=2), "--job-id", job_id, "--", "/nonexistent/train")
    assert out.returncode == 1, out.stderr
    assert "Traceback" not in out.stderr
    rest = jobs.describe(job_id)
    assert rest["state"] == "JOB_STATE_FAILED"  # not left RUNNING without a controller
    reason = rest["trials"][0]["infeasibleReason"]
    assert reason.startswith("The trial could not be started: replica workerpool0-0: command "
                             "'/nonexistent/train' was not found"), reason


def _sweep_with_shim_failures(jobs, job_id: str, n_failures: int) -> subprocess.CompletedProcess:
    env = jobs.env()
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(SCRIPTS / "hooks"), env.get("PYTHONPATH")]))
    env["TEST_HOOKS"] = f"shim-fails:{n_failures}"
    return subprocess.run([sys.executable, "-m", "trials", "sweep", jobs.spec(n=1), "--job-id", job_id,
                           "--", "python", TRAINER], cwd=jobs.root, env=env, capture_output=True, text=True,
                          timeout=120)


def test_a_replica_the_shim_cannot_start_is_retried_twice_as_an_internal_error(jobs) -> None:
    job_id = jobs.job_id("internal")
    out = _sweep_with_shim_failures(jobs, job_id, 2)  # the real shim fails twice, then starts it
    if "the sandbox is off" in out.stdout:
        pytest.skip("the sandbox is off here: the shim sets nothing up that could fail")
    assert out.returncode == 0, out.stdout + out.stderr
    (trial,) = jobs.describe(job_id)["trials"]
    assert trial["state"] == "SUCCEEDED"
    attempts = jobs.local(job_id)["1"]["attempts"]
    internal = [a for a in attempts if "internalError" in a]
    assert [a["budget"] for a in internal] == ["internal retry 1 of 2", "internal retry 2 of 2"]
    assert all("the sandbox could not be set up" in a["internalError"] for a in internal)
    assert all(a["attempt"] == 0 for a in internal)  # the same attempt again, not a restart


def test_a_third_internal_error_fails_the_trial_with_vertexs_words_not_as_a_user_error(jobs) -> None:
    job_id = jobs.job_id("internal3")
    out = _sweep_with_shim_failures(jobs, job_id, 3)
    if "the sandbox is off" in out.stdout:
        pytest.skip("the sandbox is off here: the shim sets nothing up that could fail")
    assert out.returncode == 1 and "Traceback" not in out.stderr, out.stdout + out.stderr
    (trial,) = jobs.describe(job_id)["trials"]
    assert trial["state"] == "INFEASIBLE"
    assert trial["infeasibleReason"] == "Internal error occurred for the current attempt."
    local = jobs.local(job_id)["1"]
    assert "the sandbox could not be set up" in local["error_detail"][0]
    assert len([a for a in local["attempts"] if "internalError" in a]) == 3
