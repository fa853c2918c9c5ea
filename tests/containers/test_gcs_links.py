"""A container trial plants links in /gcs and calls the job's Cloud Storage endpoint (which runs on the
host): it creates nothing on the host and reads no host file through them. Real podman, the test image,
raw HTTP from inside the container (the image has no google-cloud-storage)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from containerkit import SPEC_URI, TRAINER, run_trials

pytestmark = pytest.mark.integration

IMAGE_FLAGS = ("--runtime", "podman", "--image", f"{SPEC_URI}={TRAINER}")
SECRET = "SECRET-0600-CONTENT"
SCRIPT = r'''
import json, os, sys, urllib.error, urllib.parse, urllib.request
import hypertune

target, secret = sys.argv[1], sys.argv[2]
me = os.environ["TRIALS_REPLICA"]
os.makedirs("/gcs/b", exist_ok=True)
os.symlink("/", f"/gcs/b/esc-{me}")  # resolved by the endpoint on the host: the host's /
os.symlink(secret, f"/gcs/b/s-{me}.txt")
host = os.environ["STORAGE_EMULATOR_HOST"]

def call(method, path, data=None):
    req = urllib.request.Request(host + path, data=data, method=method,
                                 headers={"Content-Type": "application/octet-stream"})
    try:
        with urllib.request.urlopen(req, timeout=60) as answer:
            return answer.status, answer.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as err:
        return err.code, ""

def upload(name, data):
    return call("POST", "/upload/storage/v1/b/b/o?uploadType=media&name=" + urllib.parse.quote(name, safe=""), data)[0]

got = {"host": host, "upload": upload(f"esc-{me}{target}-{me}", b"escaped"),
       "read": call("GET", f"/download/storage/v1/b/b/o/s-{me}.txt?alt=media"),
       "listed": sorted(o["name"] for o in json.loads(call("GET", "/storage/v1/b/b/o")[1]).get("items", [])),
       "mine": upload(f"mine-{me}.txt", b"mine")}
print("GOT " + json.dumps(got), flush=True)
hypertune.HyperTune().report_hyperparameter_tuning_metric(hyperparameter_metric_tag="score", metric_value=1.0,
                                                          global_step=1)
'''


def _spec(tmp_path: Path, target: Path, secret: Path, pools: int) -> Path:
    pool = {"machineSpec": {"machineType": "n1-standard-4"}, "replicaCount": 1,
            "containerSpec": {"imageUri": SPEC_URI, "command": ["python3", "-c", SCRIPT],
                              "args": [str(target), str(secret)]}}
    body = {"studySpec": {"metrics": [{"metricId": "score", "goal": "MAXIMIZE"}],
                          "parameters": [{"parameterId": "x", "doubleValueSpec": {"minValue": 0.1, "maxValue": 0.9}}]},
            "maxTrialCount": 1, "parallelTrialCount": 1,
            "trialJobSpec": {"workerPoolSpecs": [pool] * pools}}
    path = tmp_path / f"spec{pools}.json"
    path.write_text(json.dumps(body))
    return path


@pytest.mark.parametrize("pools", [1, 2], ids=["one-replica", "two-pools"])
def test_a_container_trial_cannot_reach_the_host_through_a_link_it_plants(tmp_path, container_env, pools):
    outside = tmp_path / "outside"
    outside.mkdir()
    secret = outside / "secret"
    secret.write_text(SECRET)
    secret.chmod(0o600)
    target = outside / "planted"
    gcs = tmp_path / "gcs"
    (gcs / "b").mkdir(parents=True)
    env = {**container_env, "TRIALS_GCS_EMULATOR": "on"}
    run = run_trials("sweep", str(_spec(tmp_path, target, secret, pools)), "--root", str(tmp_path / "jobs"),
                     "--job-id", "links", "--gcs-root", str(gcs), *IMAGE_FLAGS, cwd=tmp_path, env=env)
    assert run.returncode == 0, run.stdout + run.stderr
    replicas = ["workerpool0-0", "workerpool1-0"][:pools]
    for replica in replicas:
        out = (tmp_path / "jobs" / "links" / "1" / f"{replica}.stdout.log").read_text()
        got = json.loads(out.split("GOT ", 1)[1].splitlines()[0])
        assert got["upload"] == 403, got
        assert got["read"][0] == 404 and SECRET not in got["read"][1], got
        assert not [n for n in got["listed"] if n.startswith(("s-", "esc-"))], got
        assert got["mine"] == 200, got
        assert (gcs / "b" / f"mine-{replica}.txt").read_text() == "mine"
    assert sorted(os.listdir(outside)) == ["secret"]  # nothing planted through the link
    assert secret.read_text() == SECRET
