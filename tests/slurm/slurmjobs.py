"""What the Slurm tests share: a spec of the test trainer's pools, the `trials` command line, the trainer's
run log, waiting with a reason."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

TRAINER = str(Path(__file__).resolve().parent / "slurm_trainer.py")


def spec(tmp_path: Path, *, pools=({"replicas": 1},), trials=1, parallel=1, args=(), stopping=None,
         grid=None, goal="MAXIMIZE", timeout=None, name="spec.json") -> Path:
    worker_pools = []
    for pool in pools:
        machine = {"machineType": "n1-standard-4"}
        if pool.get("gpus"):
            machine.update(acceleratorType="NVIDIA_TESLA_T4", acceleratorCount=pool["gpus"])
        worker_pools.append({"machineSpec": machine, "replicaCount": pool["replicas"],
                             "containerSpec": {"imageUri": "us-docker.pkg.dev/p/r/trainer:1",
                                               "command": [sys.executable, TRAINER], "args": list(args)}})
    param = ({"parameterId": "x", "discreteValueSpec": {"values": grid}} if grid
             else {"parameterId": "x", "doubleValueSpec": {"minValue": 0.1, "maxValue": 0.9}})
    study = {"metrics": [{"metricId": "score", "goal": goal}], "parameters": [param]}
    if grid:
        study["algorithm"] = "GRID_SEARCH"
    if stopping:
        study.update(stopping)
    body = {"studySpec": study, "maxTrialCount": trials, "parallelTrialCount": parallel,
            "trialJobSpec": {"workerPoolSpecs": worker_pools,
                             **({"scheduling": {"timeout": timeout}} if timeout else {})}}
    path = tmp_path / name
    path.write_text(json.dumps(body))
    return path


def trials_cli(*argv: str, cwd: Path, env: dict[str, str], timeout: float = 180) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "trials", *argv], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=timeout)


def start_sweep(*argv: str, cwd: Path, env: dict[str, str]) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "trials", "sweep", *argv], cwd=cwd, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def describe(tmp_path: Path, env, job: str, fmt: str = "json") -> dict:
    out = trials_cli("describe", job, "--root", str(tmp_path / "jobs"), "--format", fmt, cwd=tmp_path, env=env)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def runs(trial_dir: Path, replica: str = "workerpool0-0") -> list[list[str]]:
    path = trial_dir / f"runs-{replica}.log"
    return [line.split() for line in path.read_text().splitlines()] if path.exists() else []


def wait_for(check, timeout: float, what: str, proc: subprocess.Popen | None = None):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        got = check()
        if got:
            return got
        if proc is not None and proc.poll() is not None:
            pytest.fail(f"the controller exited ({proc.returncode}) before {what}: {proc.stdout.read()}")
        time.sleep(0.1)
    pytest.fail(f"no {what} in {timeout:g}s")


def squeue_ids(env, job_id: str) -> list[str]:
    out = subprocess.run(["squeue", "-h", "--states=all", "-j", job_id, "-o", "%i|%T"], env=env,
                         capture_output=True, text=True, check=True).stdout
    return out.split()
