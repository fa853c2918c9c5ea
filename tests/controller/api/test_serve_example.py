"""docs/API_SERVER.md's snippet, as written, with the trainer it names (examples/serve/task.py), through
`trials serve` and the real SDK."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.controller.api.servekit import Serve, cancel_all

aiplatform = pytest.importorskip("google.cloud.aiplatform", reason="google-cloud-aiplatform is not installed")
hpt = pytest.importorskip("google.cloud.aiplatform.hyperparameter_tuning")
from google.cloud.aiplatform import jobs as sdk_jobs  # noqa: E402
from google.oauth2.credentials import Credentials  # noqa: E402

REPO = Path(__file__).resolve().parents[3]


def test_the_documented_snippet_runs_the_shipped_example_trainer(tmp_path: Path, monkeypatch) -> None:
    assert '"command": ["python", "examples/serve/task.py"]' in (REPO / "docs" / "API_SERVER.md").read_text()
    s = Serve(tmp_path / "jobs", cwd=REPO)  # started in the repository's folder, as the doc says
    try:
        monkeypatch.setattr(sdk_jobs, "_JOB_WAIT_TIME", 0.2)
        aiplatform.init(project="my-project", location="us-central1", api_endpoint=s.url, api_transport="rest",
                        credentials=Credentials(token=s.token))
        trial_job = aiplatform.CustomJob(
            display_name="trainer", staging_bucket="gs://my-bucket/staging",
            worker_pool_specs=[{"machine_spec": {"machine_type": "n1-standard-4"}, "replica_count": 1,
                                "container_spec": {"image_uri": "europe-docker.pkg.dev/p/r/trainer:1",
                                                   "command": ["python", "examples/serve/task.py"],
                                                   "args": ["--epochs=3"]}}])
        job = aiplatform.HyperparameterTuningJob(
            display_name="lr-search", custom_job=trial_job, metric_spec={"accuracy": "maximize"},
            parameter_spec={"learning_rate": hpt.DoubleParameterSpec(min=1e-4, max=1e-1, scale="log")},
            max_trial_count=2, parallel_trial_count=2)
        job.run()
        best = max(job.trials, key=lambda t: t.final_measurement.metrics[0].value)
        assert job.state.name == "JOB_STATE_SUCCEEDED" and len(job.trials) == 2
        assert 0.5 < best.final_measurement.metrics[0].value <= 1.0  # (the SDK asks for BEST: any of the 3 steps)
        assert [len(t.measurements) for t in job.trials] == [3, 3]
    finally:
        cancel_all(tmp_path / "jobs")
        s.stop()
