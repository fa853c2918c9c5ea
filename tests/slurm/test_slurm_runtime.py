"""`--runtime slurm` on a real two-node Slurm cluster (tests/slurm/slurmkit.py): each trial attempt one Slurm
job, its replicas tasks on the nodes, real `trials` processes and signals."""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path

import pytest
from slurmjobs import describe, runs, spec, squeue_ids, start_sweep, trials_cli, wait_for

pytestmark = pytest.mark.integration

def test_two_pools_run_as_one_heterogeneous_job_on_two_nodes_whose_replicas_connect(tmp_path, slurm_env):
    path = spec(tmp_path, pools=({"replicas": 1, "gpus": 1}, {"replicas": 1}), args=("--connect",))
    run = trials_cli("sweep", str(path), "--root", str(tmp_path / "jobs"), "--job-id", "het", "--runtime", "slurm",
                     cwd=tmp_path, env=slurm_env)
    assert run.returncode == 0, run.stdout + run.stderr
    assert describe(tmp_path, slurm_env, "het")["trials"][0]["state"] == "SUCCEEDED"
    trial = tmp_path / "jobs" / "het" / "1"
    chief = json.loads((trial / "got-workerpool0-0-0.json").read_text())
    worker = json.loads((trial / "got-workerpool1-0-0.json").read_text())
    assert {chief["node"], worker["node"]} == {"n1", "n2"}  # one replica a node, as one VM each on Vertex
    assert json.loads((trial / "peers.json").read_text()) == ["workerpool1-0"]  # they reached each other
    host = socket.gethostname()  # the nodes' real host name (both nodes are this machine here)
    for got in (chief, worker):
        cluster = got["cluster"]["cluster"]
        assert cluster["workerpool0"][0].rsplit(":", 1)[0] == host
        assert cluster["workerpool1"][0].rsplit(":", 1)[0] == host
        assert got["master"] == cluster["workerpool0"][0].rsplit(":", 1)
        assert got["tf_config"]["cluster"]["chief"] == cluster["workerpool0"]
    # GPUs: exactly the replica that asked got Slurm's, the other none
    assert chief["cuda"] == "0" and worker["cuda"] == ""
    local = describe(tmp_path, slurm_env, "het", "local-json")["trials"]["1"]["attempts"]
    assert {a["slurmJobId"] for a in local} == {chief["slurm_job"]} == {worker["slurm_job"]}
    assert sorted(a["node"] for a in local) == ["n1", "n2"]
    # one heterogeneous job: a component per worker pool
    assert sorted(squeue_ids(slurm_env, chief["slurm_job"])) == [f"{chief['slurm_job']}+0|COMPLETED",
                                                                  f"{chief['slurm_job']}+1|COMPLETED"]


def test_one_pool_of_two_replicas_is_one_job_of_two_tasks(tmp_path, slurm_env):
    path = spec(tmp_path, pools=({"replicas": 2},), args=("--connect",))
    run = trials_cli("sweep", str(path), "--root", str(tmp_path / "jobs"), "--job-id", "two", "--runtime", "slurm",
                     cwd=tmp_path, env=slurm_env)
    assert run.returncode == 0, run.stdout + run.stderr
    trial = tmp_path / "jobs" / "two" / "1"
    got = [json.loads((trial / f"got-workerpool0-{j}-0.json").read_text()) for j in (0, 1)]
    assert got[0]["slurm_job"] == got[1]["slurm_job"]  # one job, two tasks
    assert {g["node"] for g in got} == {"n1", "n2"}
    assert json.loads((trial / "peers.json").read_text()) == ["workerpool0-1"]
    assert got[0]["cuda"] == got[1]["cuda"] == ""  # asked for no accelerator: sees none


def test_cancel_stops_the_trial_through_slurm(tmp_path, slurm_env):
    path = spec(tmp_path, args=("--steps=600", "--sleep=0.1"))
    proc = start_sweep(str(path), "--root", str(tmp_path / "jobs"), "--job-id", "cx", "--runtime", "slurm",
                       cwd=tmp_path, env=slurm_env)
    trial = tmp_path / "jobs" / "cx" / "1"
    wait_for(lambda: runs(trial), 60, "trainer start", proc)
    cancel = trials_cli("cancel", "cx", "--root", str(tmp_path / "jobs"), cwd=tmp_path, env=slurm_env)
    assert cancel.returncode == 0, cancel.stderr
    proc.wait(90)
    assert describe(tmp_path, slurm_env, "cx")["state"] == "JOB_STATE_CANCELLED"
    assert [r[0] for r in runs(trial)] == ["start", "term"]  # SIGTERM reached the trainer on its node
    pid = int(runs(trial)[0][1])
    assert not os.path.exists(f"/proc/{pid}") or Path(f"/proc/{pid}/stat").read_text().split()[2] in "ZX"
    job_id = describe(tmp_path, slurm_env, "cx", "local-json")["trials"]["1"]["attempts"][0]["slurmJobId"]
    assert squeue_ids(slurm_env, job_id)[0].split("|")[1] in ("CANCELLED", "COMPLETED", "FAILED")


@pytest.mark.long
def test_an_early_stopped_trial_is_stopped_through_slurm(tmp_path, slurm_env):
    # the median rule stops a trial once 6 have completed: the 7th, the worst, is stopped
    path = spec(tmp_path, grid=[0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.9], trials=7, args=("--steps=20", "--sleep=0.05"),
                goal="MINIMIZE",
                stopping={"medianAutomatedStoppingSpec": {"useElapsedDuration": False}})
    run = trials_cli("sweep", str(path), "--root", str(tmp_path / "jobs"), "--job-id", "es", "--runtime", "slurm",
                     cwd=tmp_path, env=slurm_env)
    assert run.returncode == 0, run.stdout + run.stderr
    job = describe(tmp_path, slurm_env, "es")
    local = describe(tmp_path, slurm_env, "es", "local-json")["trials"]
    low = next(t for t in job["trials"] if t["parameters"][0]["value"] == 0.9)  # the worst: minimized
    assert local[low["id"]].get("stopped_early"), local[low["id"]]
    assert [r[0] for r in runs(tmp_path / "jobs" / "es" / low["id"])] == ["start", "term"]
    assert len(low["measurements"]) < 20


def test_a_controller_killed_and_resumed_cancels_what_it_left_and_never_runs_a_trial_twice(tmp_path, slurm_env):
    slow = tmp_path / "slow"
    slow.touch()  # the first copy takes 1 s a step: it still runs when the resumed controller starts
    path = spec(tmp_path, args=("--steps=40", "--sleep=0.1", "--resume", f"--slow-if={slow}"))
    proc = start_sweep(str(path), "--root", str(tmp_path / "jobs"), "--job-id", "kr", "--runtime", "slurm",
                       cwd=tmp_path, env=slurm_env)
    trial = tmp_path / "jobs" / "kr" / "1"
    wait_for(lambda: (trial / "step-workerpool0-0").exists(), 60, "a first step", proc)
    proc.kill()  # SIGKILL: the Slurm job and its trainer go on
    proc.wait()
    slow.unlink()  # the second copy runs at full speed
    assert runs(trial)[-1][0] == "start"
    resumed = trials_cli("resume", "kr", "--root", str(tmp_path / "jobs"), cwd=tmp_path, env=slurm_env)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert "cancelled 1 Slurm job(s) an earlier controller of this job left" in resumed.stdout + resumed.stderr
    assert describe(tmp_path, slurm_env, "kr")["trials"][0]["state"] == "SUCCEEDED"
    events = runs(trial)
    assert [e[0] for e in events] == ["start", "term", "start", "end"]
    assert float(events[1][3]) <= float(events[2][3])  # the first copy had stopped before the second began



def test_a_trial_over_its_timeout_that_ignores_sigterm_is_killed_through_slurm_after_the_grace(tmp_path, slurm_env):
    path = spec(tmp_path, args=("--steps=600", "--sleep=0.1", "--ignore-term"), timeout="3s")
    run = trials_cli("sweep", str(path), "--root", str(tmp_path / "jobs"), "--job-id", "to", "--runtime", "slurm",
                     "--grace-period", "1", cwd=tmp_path, env=slurm_env)
    trial = tmp_path / "jobs" / "to" / "1"
    assert [r[0] for r in runs(trial)] == ["start", "term"], run.stdout + run.stderr  # TERM, then only KILL ended it
    job = describe(tmp_path, slurm_env, "to")
    assert "maximum running time of 3s" in job["trials"][0]["infeasibleReason"]
    attempt = describe(tmp_path, slurm_env, "to", "local-json")["trials"]["1"]["attempts"][0]
    assert attempt["exitStatus"] == 137
    pid = int(runs(trial)[0][1])
    assert not os.path.exists(f"/proc/{pid}") or Path(f"/proc/{pid}/stat").read_text().split()[2] in "ZX"
    # its entry carried out the SIGKILL (the job then ends FAILED with 137), or Slurm's cancel did
    assert squeue_ids(slurm_env, attempt["slurmJobId"])[0].split("|")[1] in ("FAILED", "CANCELLED")


def test_cancel_of_a_job_whose_controller_died_cancels_its_slurm_jobs(tmp_path, slurm_env):
    path = spec(tmp_path, args=("--steps=600", "--sleep=0.1"))
    proc = start_sweep(str(path), "--root", str(tmp_path / "jobs"), "--job-id", "dc", "--runtime", "slurm",
                       cwd=tmp_path, env=slurm_env)
    trial = tmp_path / "jobs" / "dc" / "1"
    wait_for(lambda: (trial / "step-workerpool0-0").exists(), 60, "a first step", proc)
    proc.kill()  # SIGKILL: nobody stops its Slurm job now …
    proc.wait()
    cancel = trials_cli("cancel", "dc", "--root", str(tmp_path / "jobs"), cwd=tmp_path, env=slurm_env)
    assert cancel.returncode == 0, cancel.stdout + cancel.stderr
    assert describe(tmp_path, slurm_env, "dc")["state"] == "JOB_STATE_CANCELLED"
    wait_for(lambda: [r[0] for r in runs(trial)] == ["start", "term"], 30, "the trainer's SIGTERM")  # … but cancel
    pid = int(runs(trial)[0][1])
    wait_for(lambda: not os.path.exists(f"/proc/{pid}") or Path(f"/proc/{pid}/stat").read_text().split()[2] in "ZX",
             30, "the trainer's end")
