"""The Slurm backend's faults, each on a real cluster of its own: folders the nodes do not share, a node
lost mid-trial."""

from __future__ import annotations

import json

import pytest
from slurmjobs import describe, runs, spec, start_sweep, trials_cli, wait_for
from slurmkit import MiniCluster, need_slurm

pytestmark = pytest.mark.integration


def test_folders_the_nodes_do_not_share_fail_the_sweep_at_once_with_one_line(tmp_path):
    need_slurm()
    jobs = tmp_path / "jobs"
    jobs.mkdir()
    cluster = MiniCluster(tmp_path / "cluster", private=(str(jobs),)).start()  # each node: an empty jobs/
    try:
        path = spec(tmp_path)
        run = trials_cli("sweep", str(path), "--root", str(jobs), "--job-id", "ns", "--runtime", "slurm",
                         cwd=tmp_path, env=cluster.env)
        assert run.returncode == 2, run.stdout + run.stderr
        lines = run.stderr.strip().splitlines()
        assert len(lines) == 1 and "Traceback" not in run.stderr
        assert lines[0].startswith("trials: error: --runtime slurm: node n")
        assert f"does not see {jobs}" in lines[0] and "--root" in lines[0]
        assert list(jobs.iterdir()) == []  # no job folder, no nonce left
    finally:
        cluster.stop()


@pytest.mark.long
def test_a_node_lost_mid_trial_restarts_its_replica_on_another_node_within_its_budget(tmp_path):
    need_slurm()
    cluster = MiniCluster(tmp_path / "cluster", slurmd_timeout_s=5).start()  # a silent node DOWN sooner
    try:
        path = spec(tmp_path, args=("--steps=80", "--sleep=0.1", "--resume"))
        proc = start_sweep(str(path), "--root", str(tmp_path / "jobs"), "--job-id", "nl", "--runtime", "slurm",
                           cwd=tmp_path, env=cluster.env)
        trial = tmp_path / "jobs" / "nl" / "1"
        wait_for(lambda: (trial / "step-workerpool0-0").exists(), 60, "a first step", proc)
        first = runs(trial)[0]
        lost = first[2]
        cluster.kill_node(lost)  # slurmd, its step daemons and the trainer: gone at once
        out, _ = proc.communicate(timeout=240)  # Slurm notices after SlurmdTimeout, then the restart runs
        assert proc.returncode == 0, out
        job = describe(tmp_path, cluster.env, "nl")
        assert job["trials"][0]["state"] == "SUCCEEDED"
        attempts = describe(tmp_path, cluster.env, "nl", "local-json")["trials"]["1"]["attempts"]
        exits = [a for a in attempts if "exitStatus" in a]
        assert exits[0]["exitStatus"] == 137 and exits[0]["node"] == lost and exits[0]["slurmState"] == "NODE_FAIL"
        assert exits[0]["budget"] == "worker restart 1 of 5"
        assert exits[-1]["exitStatus"] == 0 and exits[-1]["node"] != lost
        assert exits[0]["slurmJobId"] != exits[-1]["slurmJobId"]  # resubmitted, not Slurm's requeue
        starts = [r for r in runs(trial) if r[0] == "start"]
        assert [s[2] for s in starts] == [lost, exits[-1]["node"]]
        assert int(json.loads(json.dumps(starts[1][4]))) == 1  # TRIALS_ATTEMPT 1
    finally:
        cluster.stop()


def test_a_trainers_forged_exit_file_does_not_end_another_running_trial(tmp_path):
    """Issue 46: trial 1's trainer (the same user) writes a well-formed exit file, status 0, into trial 2's
    Slurm folder while trial 2 runs. It was recorded SUCCEEDED after 2 of its 8 steps, node "forged"; now
    the file counts only once Slurm says trial 2's job ended, with the exit code Slurm saw."""
    need_slurm()
    cluster = MiniCluster(tmp_path / "cluster").start()
    try:
        path = spec(tmp_path, trials=2, parallel=2, grid=[0.2, 0.4], args=("--steps=8", "--sleep=0.5",
                                                                            "--forge-into=2"))
        run = trials_cli("sweep", str(path), "--root", str(tmp_path / "jobs"), "--job-id", "fg", "--runtime",
                         "slurm", cwd=tmp_path, env=cluster.env)
        assert run.returncode == 0, run.stdout + run.stderr
        jobs = tmp_path / "jobs" / "fg"
        forged = json.loads((jobs / "1" / "forged.json").read_text())
        assert "/slurm/t2-a0-" in forged["file"]
        events = runs(jobs / "2")
        assert [e[0] for e in events] == ["start", "end"]
        assert float(events[0][3]) < forged["time"] < float(events[1][3])  # forged while trial 2 ran
        job = describe(tmp_path, cluster.env, "fg")
        second = next(t for t in job["trials"] if t["id"] == "2")
        assert second["state"] == "SUCCEEDED"
        assert len(second["measurements"]) == 8  # every step its trainer reported, not those before the forgery
        attempts = describe(tmp_path, cluster.env, "fg", "local-json")["trials"]["2"]["attempts"]
        assert [a["exitStatus"] for a in attempts] == [0]
        assert attempts[0]["node"] in ("n1", "n2")  # where Slurm ran it, never what the file said
    finally:
        cluster.stop()
