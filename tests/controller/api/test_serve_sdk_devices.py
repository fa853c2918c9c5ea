"""A job that asks for GPUs, through the real google-cloud-aiplatform SDK, on this GPU-less machine:
`trials serve --ignore-accelerators` runs it on CPU, `--gpus` hands out the devices named, and a server
with fewer GPUs than a trial asks for refuses the create as Vertex refuses one beyond its GPU quota."""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import pytest

from tests.controller.api.servekit import Serve, cancel_all, job_folders

aiplatform = pytest.importorskip("google.cloud.aiplatform", reason="google-cloud-aiplatform is not installed")
hpt = pytest.importorskip("google.cloud.aiplatform.hyperparameter_tuning")
from google.api_core import exceptions as gexc  # noqa: E402
from google.cloud.aiplatform import jobs as sdk_jobs  # noqa: E402
from google.oauth2.credentials import Credentials  # noqa: E402

TRAINER = """\
import argparse, os, hypertune
p = argparse.ArgumentParser()
p.add_argument("--x", type=float, required=True)
a = p.parse_args()
print("CUDA_VISIBLE_DEVICES=" + repr(os.environ.get("CUDA_VISIBLE_DEVICES")), flush=True)
hypertune.HyperTune().report_hyperparameter_tuning_metric(hyperparameter_metric_tag="loss", metric_value=a.x,
                                                          global_step=1)
"""


def environ() -> dict[str, str]:
    """This machine's environment without a token or a GPU allocation (the server finds its GPUs itself)."""
    return {k: v for k, v in os.environ.items() if k not in ("TRIALS_SERVE_TOKEN", "CUDA_VISIBLE_DEVICES")}


@pytest.fixture
def sdk(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """Start `trials serve ARGS` and point the SDK at it: ``sdk(*args) -> Serve``."""
    (tmp_path / "task.py").write_text(TRAINER)
    monkeypatch.setattr(sdk_jobs, "_JOB_WAIT_TIME", 0.2)  # the SDK polls every 5 s otherwise
    servers: list[Serve] = []

    def start(*args: str) -> Serve:
        s = Serve(tmp_path / f"jobs{len(servers)}", *args, env=environ())
        servers.append(s)
        aiplatform.init(project="my-project", location="us-central1", api_endpoint=s.url, api_transport="rest",
                        credentials=Credentials(token=s.token))
        return s

    yield start
    for s in servers:
        cancel_all(s.root)
        s.stop()


def gpu_job(tmp_path: Path, *, replicas: int = 1, n: int = 2, parallel: int = 2) -> aiplatform.HyperparameterTuningJob:
    """A tuning job whose every replica asks for one T4, as the pipeline step of issue 47 did."""
    custom = aiplatform.CustomJob(
        display_name="gpu-trial", staging_bucket="gs://stage",
        worker_pool_specs=[{"machine_spec": {"machine_type": "n1-standard-4", "accelerator_type": "NVIDIA_TESLA_T4",
                                             "accelerator_count": 1},
                            "replica_count": replicas,
                            "container_spec": {"image_uri": "gcr.io/p/trainer:1",
                                               "command": ["python", str(tmp_path / "task.py")]}}])
    return aiplatform.HyperparameterTuningJob(
        display_name="gpu", custom_job=custom, metric_spec={"loss": "minimize"},
        parameter_spec={"x": hpt.DoubleParameterSpec(min=0, max=1, scale="linear")},
        max_trial_count=n, parallel_trial_count=parallel)


def devices_seen(serve: Serve, job: aiplatform.HyperparameterTuningJob) -> list[str]:
    job_dir = serve.root / job.resource_name.rsplit("/", 1)[1]
    return [re.search(r"CUDA_VISIBLE_DEVICES=(.*)", (job_dir / t.id / "workerpool0-0.stdout.log").read_text())[1]
            for t in job.trials]


@pytest.mark.skipif(shutil.which("nvidia-smi") is not None, reason="this machine has nvidia-smi (a GPU)")
def test_a_gpu_job_runs_on_cpu_under_ignore_accelerators_and_is_refused_without(sdk, tmp_path: Path) -> None:
    serve = sdk("--ignore-accelerators")
    job = gpu_job(tmp_path)
    job.run(sync=True)
    assert job.state.name == "JOB_STATE_SUCCEEDED", job.error
    assert [t.state.name for t in job.trials] == ["SUCCEEDED", "SUCCEEDED"]
    assert devices_seen(serve, job) == ["''", "''"]  # every replica on CPU, as `trials sweep --ignore-accelerators`

    plain = sdk()
    with pytest.raises(gexc.TooManyRequests) as refused:  # as Vertex refuses a create beyond the GPU quota
        gpu_job(tmp_path).run(sync=True)
    said = refused.value.message
    assert "a trial asks for 1 accelerator (workerPoolSpecs[0]: 1 × 1 NVIDIA_TESLA_T4)" in said
    assert "this server has no GPU (nvidia-smi -L lists none)" in said
    assert "trials serve --ignore-accelerators" in said and "trials serve --gpus" in said
    assert job_folders(plain.root) == []  # nothing made


def test_gpus_are_the_devices_a_servers_jobs_hand_out(sdk, tmp_path: Path) -> None:
    serve = sdk("--gpus", "0,1")
    job = gpu_job(tmp_path)
    job.run(sync=True)
    assert job.state.name == "JOB_STATE_SUCCEEDED", job.error
    assert set(devices_seen(serve, job)) <= {"'0'", "'1'"}
    with pytest.raises(gexc.TooManyRequests, match=r"a trial asks for 3 accelerators .* this server has 2 GPUs "
                                                   r"\(0, 1, from --gpus\)"):
        gpu_job(tmp_path, replicas=3).run(sync=True)


