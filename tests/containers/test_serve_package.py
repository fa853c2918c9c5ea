"""`trials serve --runtime podman` with its Cloud Storage endpoint: the SDK's
`CustomJob.from_local_script` packages the script, uploads it to the staging bucket, and the tuning
job's trials pip-install it into the executor image and run it; `base_output_dir=gs://…` is the trials'
base."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from containerkit import HYPERTUNE

aiplatform = pytest.importorskip("google.cloud.aiplatform", reason="google-cloud-aiplatform is not installed")
hpt = pytest.importorskip("google.cloud.aiplatform.hyperparameter_tuning")
pytest.importorskip("gcp_storage_emulator", reason="the gcs extra is not installed")
from google.cloud.aiplatform import jobs as sdk_jobs  # noqa: E402
from google.oauth2.credentials import Credentials  # noqa: E402

EXECUTOR = "us-docker.pkg.dev/vertex-ai/training/sklearn-cpu.1-0:latest"
SCRIPT = """\
import argparse, os, hypertune
p = argparse.ArgumentParser()
p.add_argument("--x", type=float, required=True)
p.add_argument("--epochs", type=int, default=2)
a = p.parse_args()
os.makedirs(os.environ["AIP_MODEL_DIR"].replace("gs://", "/gcs/"), exist_ok=True)
with open(os.path.join(os.environ["AIP_MODEL_DIR"].replace("gs://", "/gcs/"), "model.txt"), "w") as f:
    f.write(str(a.x))
ht = hypertune.HyperTune()
for e in range(1, a.epochs + 1):
    ht.report_hyperparameter_tuning_metric(hyperparameter_metric_tag="loss", metric_value=(a.x - 0.3) ** 2 + 1 / e,
                                           global_step=e)
"""


def test_a_script_the_sdk_staged_runs_as_a_python_package_in_the_executor_image(
        container_env, tmp_path: Path, monkeypatch) -> None:
    root = tmp_path / "jobs"
    proc = subprocess.Popen([sys.executable, "-m", "trials", "serve", "--port", "0", "--root", str(root),
                             "--runtime", "podman", "--image", f"{EXECUTOR}={HYPERTUNE}"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=container_env)
    try:
        assert proc.stdout is not None
        lines = [proc.stdout.readline() for _ in range(4)]
        url = lines[0].split(" on ", 1)[1].split(" ")[0]
        token = lines[1].split('Credentials(token="', 1)[1].split('"', 1)[0]  # the aiplatform.init line it printed
        assert "STORAGE_EMULATOR_HOST=" in lines[3], lines
        monkeypatch.setenv("STORAGE_EMULATOR_HOST", lines[3].rsplit("=", 1)[1].strip())
        for bucket in ("stage", "out"):  # a bucket is a folder of ROOT/gcs (they exist on Vertex too)
            (root / "gcs" / bucket).mkdir(parents=True)
        monkeypatch.setattr(sdk_jobs, "_JOB_WAIT_TIME", 0.2)
        aiplatform.init(project="my-project", location="us-central1", api_endpoint=url, api_transport="rest",
                        credentials=Credentials(token=token), staging_bucket="gs://stage")
        (tmp_path / "src").mkdir()
        (tmp_path / "src" / "task.py").write_text(SCRIPT)
        custom = aiplatform.CustomJob.from_local_script(
            display_name="staged", script_path=str(tmp_path / "src" / "task.py"), container_uri=EXECUTOR,
            args=["--epochs=2"], base_output_dir="gs://out/base")
        package = custom.job_spec.worker_pool_specs[0].python_package_spec
        assert package.package_uris[0].startswith("gs://stage/")
        staged = root / "gcs" / package.package_uris[0][len("gs://"):]
        assert staged.is_file()  # uploaded through the server's Cloud Storage endpoint
        job = aiplatform.HyperparameterTuningJob(
            display_name="packaged", custom_job=custom, metric_spec={"loss": "minimize"},
            parameter_spec={"x": hpt.DoubleParameterSpec(min=0, max=1, scale="linear")},
            max_trial_count=2, parallel_trial_count=1)
        job.run(sync=True)
        assert job.state.name == "JOB_STATE_SUCCEEDED", job.error
        assert [t.state.name for t in job.trials] == ["SUCCEEDED", "SUCCEEDED"]
        for t in job.trials:
            x = t.parameters[0].value
            assert (root / "gcs" / "out" / "base" / t.id / "model" / "model.txt").read_text() == str(x)
            assert t.final_measurement.metrics[0].value == pytest.approx((x - 0.3) ** 2 + 0.5)
    finally:
        proc.terminate()
        proc.communicate(timeout=30)
