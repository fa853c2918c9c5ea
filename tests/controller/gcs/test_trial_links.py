"""Through a real trial's endpoint: a sweep whose trainer plants links in /gcs and uses the job's
endpoint (STORAGE_EMULATOR_HOST, the google-cloud-storage client) creates nothing on the host and reads
no host file; the same through `trials serve`'s endpoint. (A container trial's: tests/containers.)"""

from __future__ import annotations

import json
import os
import queue
import re
import signal
import subprocess
import sys
import threading

import pytest
from gcskit import SECRET, download, media_upload, needs_gcs, secret_file

pytestmark = [needs_gcs, pytest.mark.integration]

TRAINER = '''
import json, os, sys
import hypertune
from google.api_core import exceptions
from google.cloud import storage

target, secret = sys.argv[1], sys.argv[2]
gcs = os.environ.get("TRIALS_GCS_ROOT") or "/gcs"
os.makedirs(f"{gcs}/b", exist_ok=True)
os.symlink("/", f"{gcs}/b/esc")  # the endpoint runs on the host: through it, the host's /
os.symlink(secret, f"{gcs}/b/s.txt")
bucket = storage.Client(project="p").bucket("b")
got = {"host": os.environ.get("STORAGE_EMULATOR_HOST", "")}
try:
    bucket.blob("esc" + target).upload_from_string("escaped")
    got["upload"] = 200
except exceptions.GoogleAPICallError as err:
    got["upload"] = err.code
try:
    got["read"] = bucket.blob("s.txt").download_as_text()
except exceptions.GoogleAPICallError as err:
    got["read"] = err.code
got["listed"] = sorted(b.name for b in storage.Client(project="p").list_blobs("b"))
bucket.blob("mine.txt").upload_from_string("still works")
got["mine"] = bucket.blob("mine.txt").download_as_text()
with open(os.path.join(os.environ["TRIALS_TRIAL_DIR"], "gcs.json"), "w") as f:
    json.dump(got, f)
hypertune.HyperTune().report_hyperparameter_tuning_metric(
    hyperparameter_metric_tag="score", metric_value=1.0, global_step=1)
'''

SPEC = """studySpec:
  metrics: [{metricId: score, goal: MAXIMIZE}]
  parameters: [{parameterId: x, doubleValueSpec: {minValue: 0.0, maxValue: 1.0}}]
maxTrialCount: 1
parallelTrialCount: 1
trialJobSpec:
  workerPoolSpecs:
  - {machineSpec: {machineType: n1-standard-4}, replicaCount: 1, containerSpec: {imageUri: gcr.io/p/t}}
"""


def test_a_host_trial_cannot_reach_the_host_through_a_link_it_plants(tmp_path):
    outside = tmp_path / "outside"
    secret = secret_file(outside)
    target = outside / "planted.txt"
    (tmp_path / "trainer.py").write_text(TRAINER)
    (tmp_path / "spec.yaml").write_text(SPEC)
    env = {**os.environ, "TRIALS_GCS_EMULATOR": "on"}
    env.pop("STORAGE_EMULATOR_HOST", None)
    run = subprocess.run([sys.executable, "-m", "trials", "sweep", str(tmp_path / "spec.yaml"), "--root",
                          str(tmp_path / "jobs"), "--job-id", "links", "--", sys.executable,
                          str(tmp_path / "trainer.py"), str(target), str(secret)],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=180)
    assert run.returncode == 0, run.stdout + run.stderr
    got = json.loads((tmp_path / "jobs" / "links" / "1" / "gcs.json").read_text())
    assert got["host"].startswith("http://127.0.0.1:")  # the job's own endpoint
    assert got["upload"] == 403 and got["read"] == 404, got
    assert got["listed"] == [] and got["mine"] == "still works", got
    assert not target.exists() and sorted(os.listdir(outside)) == ["secret"]
    assert secret.read_bytes() == SECRET
    assert (tmp_path / "jobs" / "links" / "gcs" / "b" / "mine.txt").read_text() == "still works"


def test_serves_endpoint_follows_no_link_either(tmp_path):
    outside = tmp_path / "outside"
    secret = secret_file(outside)
    target = outside / "planted.txt"
    root = tmp_path / "serve"
    env = {**os.environ, "TRIALS_GCS_EMULATOR": "on"}
    proc = subprocess.Popen([sys.executable, "-m", "trials", "serve", "--port", "0", "--root", str(root)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=tmp_path, env=env)
    try:
        assert proc.stdout is not None
        lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=lambda: [lines.put(line) for line in proc.stdout], daemon=True).start()  # type: ignore[union-attr]
        host, said = "", []
        while not host:
            said.append(lines.get(timeout=60))  # its start-up lines: the endpoint's is among the first few
            found = re.search(r"STORAGE_EMULATOR_HOST=(http://\S+)", said[-1])
            host = found.group(1) if found else ""
            assert "no Cloud Storage endpoint" not in said[-1], said
        bucket = root / "gcs" / "b"
        bucket.mkdir(parents=True, exist_ok=True)
        (bucket / "esc").symlink_to("/")
        (bucket / "s.txt").symlink_to(secret)
        status, _ = media_upload(host, "b", "esc" + str(target), b"escaped")
        assert status == 403
        status, body = download(host, "b", "s.txt")
        assert status == 404 and SECRET not in body
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=60)
    assert not target.exists() and secret.read_bytes() == SECRET
