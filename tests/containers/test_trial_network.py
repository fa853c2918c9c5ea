"""A container trial is off the host's network: the host's loopback (a trust-auth PostgreSQL on 127.0.0.1, any
port of the controller's) is not reachable from it, the job's storage endpoint is, on the trial network's gateway.
Real podman, real `trials sweep`, real sockets."""

from __future__ import annotations

import ipaddress
import json
import socket
import subprocess
from pathlib import Path

import pytest
from containerkit import SPEC_URI, TRAINER, run_trials

pytestmark = pytest.mark.integration

POSTGRES_PORT = 5432  # the machine's PostgreSQL (.ci/postgres.sh): trust auth on 127.0.0.1


def _spec(tmp_path: Path, args: list[str], *, trials: int) -> Path:
    body = {
        "studySpec": {"metrics": [{"metricId": "score", "goal": "MAXIMIZE"}],
                      "parameters": [{"parameterId": "x", "doubleValueSpec": {"minValue": 0.1, "maxValue": 0.9}}]},
        "maxTrialCount": trials, "parallelTrialCount": trials,
        "trialJobSpec": {"workerPoolSpecs": [{"machineSpec": {"machineType": "n1-standard-4"}, "replicaCount": 1,
                                              "containerSpec": {"imageUri": SPEC_URI, "args": args}}]},
    }
    path = tmp_path / "spec.json"
    path.write_text(json.dumps(body))
    return path


def _reachable_here(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(5)
        return s.connect_ex(("127.0.0.1", port)) == 0


@pytest.mark.parametrize("runtime", ["podman", "docker"])
def test_a_one_replica_trial_reaches_the_storage_endpoint_and_nothing_of_the_hosts_loopback(tmp_path, runtime,
                                                                                           request):
    container_env = request.getfixturevalue("container_env" if runtime == "podman" else "docker_env")
    gcs = tmp_path / "gcs"
    (gcs / "bucket" / "data").mkdir(parents=True)
    (gcs / "bucket" / "data" / "a.txt").write_text("a")
    with socket.create_server(("127.0.0.1", 0)) as listener:  # a loopback service of this host, the test's own
        listener.listen(8)
        ports = [listener.getsockname()[1]] + ([POSTGRES_PORT] if _reachable_here(POSTGRES_PORT) else [])
        args = ["--mode=probe", *(f"--probe={p}" for p in ports)]
        env = {**container_env, "TRIALS_GCS_EMULATOR": "on"}
        run = run_trials("sweep", str(_spec(tmp_path, args, trials=2)), "--root", str(tmp_path / "jobs"),
                         "--job-id", "net", "--gcs-root", str(gcs), "--runtime", runtime,
                         "--image", f"{SPEC_URI}={TRAINER}", cwd=tmp_path, env=env)
    assert run.returncode == 0, run.stdout + run.stderr
    gateways = set()
    for trial in ("1", "2"):
        out = (tmp_path / "jobs" / "net" / trial / "workerpool0-0.stdout.log").read_text()
        probe = json.loads(next(line for line in out.splitlines() if line.startswith("probe: "))[len("probe: "):])
        for port in ports:  # refused: the container's own loopback, not the host's
            assert probe["ports"][str(port)].startswith("not reached"), (port, probe)
        assert probe["objects"] == ["data/a.txt"], probe  # the job's endpoint, through the variable it was given
        host = probe["endpoint"].removeprefix("http://").rpartition(":")[0]
        address = ipaddress.ip_address(host.strip("[]"))
        assert not address.is_loopback and not address.is_unspecified, probe
        gateways.add(host)
    assert len(gateways) == 2  # two trials at once: two networks
    label = f"trials.job_dir={tmp_path / 'jobs' / 'net'}"
    listed = subprocess.run([runtime, "ps", "--all", "--filter", f"label={label}", "--format", "{{.Names}}"],
                            capture_output=True, text=True, env=container_env)
    assert listed.stdout.split() == []  # the keepers went with the job
    networks = subprocess.run([runtime, "network", "ls", "--filter", f"label={label}", "--format", "{{.Name}}"],
                              capture_output=True, text=True, env=container_env)
    assert networks.stdout.split() == []


def test_the_next_trial_takes_over_the_network_of_a_finished_one(tmp_path, container_env):
    """Three trials one after another: one network (made once), each trial alone on it."""
    (tmp_path / "gcs" / "bucket").mkdir(parents=True)
    run = run_trials("sweep", str(_spec(tmp_path, ["--mode=probe"], trials=1)), "--root", str(tmp_path / "jobs"),
                     "--job-id", "seq", "--max-trial-count", "3", "--gcs-root", str(tmp_path / "gcs"),
                     "--runtime", "podman",
                     "--image", f"{SPEC_URI}={TRAINER}", cwd=tmp_path, env={**container_env,
                                                                            "TRIALS_GCS_EMULATOR": "on"})
    assert run.returncode == 0, run.stdout + run.stderr
    endpoints = set()
    for trial in ("1", "2", "3"):
        out = (tmp_path / "jobs" / "seq" / trial / "workerpool0-0.stdout.log").read_text()
        probe = json.loads(next(line for line in out.splitlines() if line.startswith("probe: "))[len("probe: "):])
        endpoints.add(probe["endpoint"])
        assert probe["objects"] == [], probe  # reached (an empty bucket folder)
    (endpoint,) = endpoints
    assert not ipaddress.ip_address(endpoint.removeprefix("http://").rpartition(":")[0]).is_loopback
