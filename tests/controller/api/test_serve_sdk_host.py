"""`trials serve` on the host runtime driven by the real google-cloud-aiplatform SDK: a script the SDK
stages with `CustomJob.from_local_script` and a prebuilt image runs as a pythonPackageSpec (its package
pip-installed into the job's own environment), and a cancelled job's trials keep what they did."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from tests.controller.api.servekit import Serve, cancel_all

aiplatform = pytest.importorskip("google.cloud.aiplatform", reason="google-cloud-aiplatform is not installed")
hpt = pytest.importorskip("google.cloud.aiplatform.hyperparameter_tuning")
pytest.importorskip("gcp_storage_emulator", reason="the gcs extra is not installed")
from google.cloud.aiplatform import jobs as sdk_jobs  # noqa: E402
from google.oauth2.credentials import Credentials  # noqa: E402

PREBUILT = "us-docker.pkg.dev/vertex-ai/training/sklearn-cpu.1-0:latest"  # never pulled on the host runtime
SCRIPT = """\
import argparse, os, time, hypertune
p = argparse.ArgumentParser()
p.add_argument("--x", type=float, default=0.5)
p.add_argument("--epochs", type=int, default=2)
p.add_argument("--sleep", type=float, default=0.0)
a = p.parse_args()
ht = hypertune.HyperTune()
for e in range(1, a.epochs + 1):
    time.sleep(a.sleep)
    ht.report_hyperparameter_tuning_metric(hyperparameter_metric_tag="loss", metric_value=(a.x - 0.3) ** 2 + 1 / e,
                                           global_step=e)
print("the staged script ran from", __file__)
"""


@pytest.fixture
def serve(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    root = tmp_path / "jobs"
    s = Serve(root, env={k: v for k, v in os.environ.items() if k != "TRIALS_GCS_EMULATOR"})  # (the tests' off)
    host = next(line for line in s.lines if "Cloud Storage" in line).rsplit("STORAGE_EMULATOR_HOST=", 1)[-1].strip()
    assert host.startswith("http://"), s.lines
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", host)
    for bucket in ("stage", "out"):  # a bucket is a folder of ROOT/gcs (they exist on Vertex too)
        (root / "gcs" / bucket).mkdir(parents=True)
    monkeypatch.setattr(sdk_jobs, "_JOB_WAIT_TIME", 0.2)  # the SDK polls every 5 s otherwise
    aiplatform.init(project="my-project", location="us-central1", api_endpoint=s.url, api_transport="rest",
                    credentials=Credentials(token=s.token), staging_bucket="gs://stage")
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "task.py").write_text(SCRIPT)
    yield s
    cancel_all(root)
    s.stop()


def test_from_local_script_with_a_prebuilt_image_runs_on_the_host_runtime(serve: Serve, tmp_path: Path) -> None:
    # as Google's system test test_from_local_script_prebuilt_container does, then as a tuning job's trial
    custom = aiplatform.CustomJob.from_local_script(
        display_name="staged", script_path=str(tmp_path / "src" / "task.py"), container_uri=PREBUILT,
        args=["--epochs=2"], base_output_dir="gs://out/base")
    package = custom.job_spec.worker_pool_specs[0].python_package_spec
    assert package.package_uris[0].startswith("gs://stage/") and package.python_module
    custom.run(sync=True)
    assert custom.state.name == "JOB_STATE_SUCCEEDED", custom.error
    job = aiplatform.HyperparameterTuningJob(
        display_name="packaged", custom_job=aiplatform.CustomJob.from_local_script(
            display_name="staged", script_path=str(tmp_path / "src" / "task.py"), container_uri=PREBUILT,
            args=["--epochs=2"], base_output_dir="gs://out/base"),
        metric_spec={"loss": "minimize"}, parameter_spec={"x": hpt.DoubleParameterSpec(min=0, max=1, scale="linear")},
        max_trial_count=3, parallel_trial_count=2)
    job.run(sync=True)
    assert job.state.name == "JOB_STATE_SUCCEEDED", job.error
    assert [t.state.name for t in job.trials] == ["SUCCEEDED"] * 3
    for t in job.trials:
        x = t.parameters[0].value
        assert t.final_measurement.metrics[0].value == pytest.approx((x - 0.3) ** 2 + 0.5)
    job_dir = serve.root / job.resource_name.rsplit("/", 1)[1]
    out = (job_dir / "1" / "workerpool0-0.stdout.log").read_text()
    assert f"the staged script ran from {serve.root}/.packages/{job_dir.name}/" in out  # the job's own venv
    assert len([p for p in (serve.root / ".packages" / job_dir.name).iterdir() if p.is_dir()]) == 1  # installed once


def test_a_cancelled_jobs_trials_keep_their_start_end_and_measurements(serve: Serve, tmp_path: Path) -> None:
    custom = aiplatform.CustomJob.from_local_script(
        display_name="slow", script_path=str(tmp_path / "src" / "task.py"), container_uri=PREBUILT,
        args=["--epochs=100", "--sleep=0.3"])
    job = aiplatform.HyperparameterTuningJob(
        display_name="to-cancel", custom_job=custom, metric_spec={"loss": "minimize"},
        parameter_spec={"x": hpt.DoubleParameterSpec(min=0, max=1, scale="linear")},
        max_trial_count=4, parallel_trial_count=2)
    job.run(sync=False)
    job.wait_for_resource_creation()
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:  # two trials ACTIVE, each with a measurement
        active = [t for t in job.trials if t.state.name == "ACTIVE" and t.measurements]
        if len(active) == 2:
            break
        time.sleep(0.3)
    assert len(active) == 2, job.trials
    job.cancel()
    with pytest.raises(RuntimeError, match="The job was cancelled"):  # what the SDK's wait does on Vertex too
        job.wait()
    assert job.state.name == "JOB_STATE_CANCELLED"
    trials = {t.id: t for t in job.trials}
    assert set(trials) == {t.id for t in active}  # the two that never started are not shown
    for t in trials.values():
        assert t.state.name == "SUCCEEDED", t  # never REQUESTED: they ran
        assert t.start_time and t.end_time and t.end_time >= t.start_time
        assert len(t.measurements) >= 1 and t.final_measurement.step_count == t.measurements[-1].step_count
    assert not os.environ.get("TRIALS_SERVE_TOKEN")  # (the token came from what serve printed)
