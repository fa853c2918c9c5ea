"""`trials serve` driven by the real google-cloud-aiplatform SDK (REST transport) and its gapic client."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

aiplatform = pytest.importorskip("google.cloud.aiplatform", reason="google-cloud-aiplatform is not installed")
hpt = pytest.importorskip("google.cloud.aiplatform.hyperparameter_tuning")
from google.api_core import exceptions as gexc  # noqa: E402
from google.cloud.aiplatform import jobs as sdk_jobs  # noqa: E402
from google.oauth2.credentials import Credentials  # noqa: E402

TRAINER = """\
import argparse, os, time, hypertune
p = argparse.ArgumentParser()
p.add_argument("--x", type=float, required=True)
p.add_argument("--k", type=float, default=1.0)
p.add_argument("--epochs", type=int, default=3)
p.add_argument("--sleep", type=float, default=0.05)
a = p.parse_args()
ht = hypertune.HyperTune()
for e in range(1, a.epochs + 1):
    time.sleep(a.sleep)
    ht.report_hyperparameter_tuning_metric(hyperparameter_metric_tag="loss",
                                           metric_value=(a.x - 0.3) ** 2 + a.k / e, global_step=e)
"""


class Server:
    def __init__(self, root: Path):
        self.root = root
        self.proc: subprocess.Popen[str] | None = None
        self.url = ""
        self.token = ""

    def start(self) -> list[str]:
        self.proc = subprocess.Popen([sys.executable, "-m", "trials", "serve", "--port", "0", "--root", str(self.root)],
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        assert self.proc.stdout is not None
        lines = [self.proc.stdout.readline() for _ in range(4)]
        assert lines[0].startswith("serving Vertex AI's v1 JobService API on http://127.0.0.1:"), lines
        self.url = lines[0].split(" on ", 1)[1].split(" ")[0]
        self.token = printed_token(lines[1])
        return lines

    def credentials(self) -> Credentials:
        """What the aiplatform.init line the server printed says to use."""
        return Credentials(token=self.token)

    def stop(self, sig: int = signal.SIGTERM) -> str:
        assert self.proc is not None
        self.proc.send_signal(sig)
        out, _ = self.proc.communicate(timeout=30)
        return out

    def call(self, method: str, path: str, body: object = None, raw: bytes | None = None) -> tuple[int, dict]:
        data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
        req = urllib.request.Request(self.url + path, data=data, method=method,
                                     headers={"Content-Type": "application/json",
                                              "Authorization": f"Bearer {self.token}"})
        try:
            with urllib.request.urlopen(req, timeout=60) as r:
                return r.status, json.loads(r.read())
        except urllib.error.HTTPError as err:
            return err.code, json.loads(err.read())


def printed_token(line: str) -> str:
    """The token inside the ``aiplatform.init(..., credentials=...Credentials(token="…"), ...)`` line."""
    m = re.search(r'credentials=google\.oauth2\.credentials\.Credentials\(token="([^"]+)"\)', line)
    assert m, line
    return m.group(1)


@pytest.fixture
def server(tmp_path: Path, monkeypatch):
    (tmp_path / "task.py").write_text(TRAINER)
    s = Server(tmp_path / "jobs")
    s.start()
    monkeypatch.setattr(sdk_jobs, "_JOB_WAIT_TIME", 0.2)  # the SDK polls every 5 s otherwise
    aiplatform.init(project="my-project", location="us-central1", api_endpoint=s.url, api_transport="rest",
                    credentials=s.credentials())
    yield s
    if s.proc is not None and s.proc.poll() is None:
        s.stop()
    for d in (tmp_path / "jobs").glob("*"):  # the controllers of jobs still running: cancelled
        if (d / "journal.log").exists():
            subprocess.run([sys.executable, "-m", "trials", "cancel", d.name, "--root", str(tmp_path / "jobs")],
                           capture_output=True, timeout=60)


def tuning_job(tmp_path: Path, *, epochs: int = 3, sleep: float = 0.05, n: int = 4, parallel: int = 2,
               x_max: float = 1.0) -> aiplatform.HyperparameterTuningJob:
    custom = aiplatform.CustomJob(
        display_name="trial", staging_bucket="gs://stage",
        worker_pool_specs=[{"machine_spec": {"machine_type": "n1-standard-4"}, "replica_count": 1,
                            "container_spec": {"image_uri": "gcr.io/p/trainer:1",
                                               "command": ["python", str(tmp_path / "task.py")],
                                               "args": [f"--epochs={epochs}", f"--sleep={sleep}"]}}])
    return aiplatform.HyperparameterTuningJob(
        display_name="hp-sdk", custom_job=custom, metric_spec={"loss": "minimize"},
        parameter_spec={"x": hpt.DoubleParameterSpec(min=0, max=x_max, scale="linear"),
                        "k": hpt.DiscreteParameterSpec(values=[1, 2], scale=None)},
        max_trial_count=n, parallel_trial_count=parallel)


def test_the_sdk_runs_a_tuning_job_to_completion_reads_its_trials_lists_and_deletes_it(server, tmp_path) -> None:
    job = tuning_job(tmp_path)
    job.run(sync=True)
    assert job.state.name == "JOB_STATE_SUCCEEDED"
    name = job.resource_name
    assert name.startswith("projects/my-project/locations/us-central1/hyperparameterTuningJobs/")
    job_id = name.rsplit("/", 1)[1]
    assert job_id.isdigit()
    trials = job.trials
    assert len(trials) == 4 and {t.state.name for t in trials} == {"SUCCEEDED"}
    for t in trials:
        assert [m.step_count for m in t.measurements] == [1, 2, 3]
        params = {p.parameter_id: p.value for p in t.parameters}
        assert set(params) == {"x", "k"} and 0 <= params["x"] <= 1
        assert t.final_measurement.metrics[0].value == pytest.approx((params["x"] - 0.3) ** 2 + params["k"] / 3)
    best = min(trials, key=lambda t: t.final_measurement.metrics[0].value)
    # the CLI sees the same job under the same name
    out = subprocess.run([sys.executable, "-m", "trials", "describe", job_id, "--root", str(server.root),
                          "--format", "json"], capture_output=True, text=True, check=True).stdout
    described = json.loads(out)
    assert described["name"] == name and described["displayName"] == "hp-sdk"
    best_cli = subprocess.run([sys.executable, "-m", "trials", "best", job_id, "--root", str(server.root),
                               "--format", "json"], capture_output=True, text=True, check=True).stdout
    assert best.id in best_cli
    listed = aiplatform.HyperparameterTuningJob.list()
    assert [j.resource_name for j in listed] == [name]
    assert [j.display_name for j in aiplatform.HyperparameterTuningJob.list(
        filter='state="JOB_STATE_SUCCEEDED" AND display_name="hp-sdk"')] == ["hp-sdk"]
    assert aiplatform.HyperparameterTuningJob.list(filter="state=JOB_STATE_FAILED") == []
    job.delete()
    assert not (server.root / job_id).exists()
    with pytest.raises(gexc.NotFound):
        aiplatform.HyperparameterTuningJob.get(name)


def test_run_without_waiting_then_cancel(server, tmp_path) -> None:
    job = tuning_job(tmp_path, epochs=200, sleep=0.1, n=3, parallel=1)
    job.run(sync=False)
    job.wait_for_resource_creation()
    deadline = time.monotonic() + 60
    while job.state.name != "JOB_STATE_RUNNING" and time.monotonic() < deadline:
        time.sleep(0.2)
    job.cancel()
    while job.state.name not in ("JOB_STATE_CANCELLED", "JOB_STATE_FAILED") and time.monotonic() < deadline + 60:
        time.sleep(0.2)
    assert job.state.name == "JOB_STATE_CANCELLED"
    assert job.error.message == "The job was cancelled."
    with pytest.raises(RuntimeError, match="cancelled"):
        job.wait()  # the SDK's own verdict on a cancelled job
    with pytest.raises(gexc.BadRequest, match="already in JOB_STATE_CANCELLED"):
        job.cancel()  # Vertex refuses to cancel an ended job (FAILED_PRECONDITION)


def test_a_bad_spec_is_the_sdks_bad_request_with_the_validation_message(server, tmp_path) -> None:
    job = tuning_job(tmp_path, x_max=-1.0)  # max below min
    with pytest.raises(gexc.BadRequest) as err:
        job.run(sync=True)
    assert "studySpec.parameters[0].doubleValueSpec" in err.value.message, err.value.message
    assert not any(server.root.glob("*/journal.log"))  # nothing made
    status, body = server.call("POST", "/v1/projects/p/locations/l/hyperparameterTuningJobs",
                               {"displayName": "d", "studySpec": {"metrics": []}})
    assert status == 400 and body["error"]["status"] == "INVALID_ARGUMENT"
    assert body["error"]["message"].startswith("hyperparameterTuningJob: studySpec.metrics:")


def test_the_gapic_job_service_client_over_rest(server, tmp_path) -> None:
    from google.cloud.aiplatform_v1.services.job_service import JobServiceClient
    from google.cloud.aiplatform_v1.types import HyperparameterTuningJob

    client = JobServiceClient(transport="rest", credentials=server.credentials(),
                              client_options={"api_endpoint": server.url})
    parent = "projects/proj-1/locations/europe-west4"
    body = tuning_job(tmp_path, n=2)._gca_resource  # what the SDK would send, as the v1 type
    created = client.create_hyperparameter_tuning_job(parent=parent, hyperparameter_tuning_job=HyperparameterTuningJob(
        display_name="gapic", study_spec=body.study_spec, max_trial_count=2, parallel_trial_count=2,
        trial_job_spec=body.trial_job_spec))
    assert created.name.startswith(parent + "/hyperparameterTuningJobs/")
    deadline = time.monotonic() + 120
    got = client.get_hyperparameter_tuning_job(name=created.name)
    while got.state.name not in ("JOB_STATE_SUCCEEDED", "JOB_STATE_FAILED") and time.monotonic() < deadline:
        time.sleep(0.2)
        got = client.get_hyperparameter_tuning_job(name=created.name)
    assert got.state.name == "JOB_STATE_SUCCEEDED" and len(got.trials) == 2
    assert got.create_time and got.start_time and got.end_time
    page = client.list_hyperparameter_tuning_jobs(parent=parent)
    assert [j.name for j in page] == [created.name]
    assert list(client.list_hyperparameter_tuning_jobs(parent="projects/other/locations/x")) == []
    client.delete_hyperparameter_tuning_job(name=created.name).result(timeout=30)
    with pytest.raises(gexc.NotFound):
        client.get_hyperparameter_tuning_job(name=created.name)


def test_custom_jobs_run_once_succeed_or_fail_by_their_replicas_and_are_listed_apart(server, tmp_path) -> None:
    good = aiplatform.CustomJob(
        display_name="once", base_output_dir="gs://out/once", staging_bucket="gs://stage",
        worker_pool_specs=[{"machine_spec": {"machine_type": "n1-standard-4"}, "replica_count": 1,
                            "container_spec": {"image_uri": "gcr.io/p/trainer:1",
                                               "command": ["python", str(tmp_path / "task.py")],
                                               "args": ["--x=0.5", "--epochs=2"]}}])
    good.run(sync=True)
    assert good.state.name == "JOB_STATE_SUCCEEDED"
    assert good.resource_name.startswith("projects/my-project/locations/us-central1/customJobs/")
    job_id = good.resource_name.rsplit("/", 1)[1]
    # the trial's job is the CustomJob's: its base output, the trainer's reports in its folder
    env = json.loads((server.root / job_id / "1" / "env.json").read_text())["workerpool0-0"]
    assert env["AIP_MODEL_DIR"] == "gs://out/once/model/"  # (a CustomJob's, not a trial's: no trial id in it)
    assert good.job_spec.base_output_directory.output_uri_prefix == "gs://out/once"
    bad = aiplatform.CustomJob(
        display_name="exits-3", staging_bucket="gs://stage",
        worker_pool_specs=[{"machine_spec": {"machine_type": "n1-standard-4"}, "replica_count": 1,
                            "container_spec": {"image_uri": "gcr.io/p/trainer:1",
                                               "command": ["python", "-c", "import sys; sys.exit(3)"]}}])
    with pytest.raises(RuntimeError, match="exited with a non-zero status of 3"):
        bad.run(sync=True)
    assert bad.state.name == "JOB_STATE_FAILED"
    assert [j.display_name for j in aiplatform.CustomJob.list()] == ["once", "exits-3"]
    assert aiplatform.HyperparameterTuningJob.list() == []
    with pytest.raises(gexc.NotFound):  # a CustomJob is not a tuning job
        aiplatform.HyperparameterTuningJob.get(good.resource_name.replace("/customJobs/", "/hyperparameterTuningJobs/"))


def test_a_restarted_server_resumes_the_job_its_crash_left(server, tmp_path) -> None:
    job = tuning_job(tmp_path, epochs=30, sleep=0.1, n=2, parallel=1)
    job.run(sync=False)
    job.wait_for_resource_creation()
    job_id = job.resource_name.rsplit("/", 1)[1]
    job_dir = server.root / job_id
    deadline = time.monotonic() + 60
    while not list(job_dir.glob("1/*")) and time.monotonic() < deadline:
        time.sleep(0.1)
    server.proc.kill()  # the server crashes...
    server.proc.wait()
    from trials.controller.jobs.lock import lock_holder

    pid = lock_holder(str(job_dir))
    assert pid
    os.kill(pid, signal.SIGKILL)  # ...and so does the job's controller
    while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    lines = server.start()
    assert server.proc.stdout is not None
    assert server.proc.stdout.readline() == f"resumed 1 job: {job_id}\n"
    aiplatform.init(api_endpoint=server.url, credentials=server.credentials())  # (a new token: a new server)
    job = aiplatform.HyperparameterTuningJob.get(job.resource_name)
    job.wait_for_completion()
    assert job.state.name == "JOB_STATE_SUCCEEDED", lines
    assert [t.state.name for t in job.trials] == ["SUCCEEDED", "SUCCEEDED"]
