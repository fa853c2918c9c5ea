"""A failed API job's error speaks the API's words: `maxFailedTrialCount` as the SDK and REST spell it (not the
CLI's flag), and where the trainer's output is."""

from __future__ import annotations

import sys
import time

from servekit import TUNING_JOBS, Serve

BODY = {
    "displayName": "fails",
    "studySpec": {"metrics": [{"metricId": "loss", "goal": "MINIMIZE"}],
                  "parameters": [{"parameterId": "x", "doubleValueSpec": {"minValue": 0, "maxValue": 1}}]},
    "maxTrialCount": 2, "parallelTrialCount": 1,
    "trialJobSpec": {"workerPoolSpecs": [{
        "machineSpec": {"machineType": "n1-standard-4"}, "replicaCount": "1",
        "containerSpec": {"imageUri": "gcr.io/p/t:1",
                          "command": [sys.executable, "-c", "import sys; sys.exit('no data here')"]}}]},
}


def test_a_failed_api_jobs_error_names_the_sdk_field_and_the_trainers_output(tmp_path):
    serve = Serve(tmp_path / "root")
    try:
        job = serve.ok("POST", TUNING_JOBS, BODY)
        path = "/v1/" + job["name"]
        deadline = time.monotonic() + 60
        while (got := serve.ok("GET", path))["state"] not in ("JOB_STATE_FAILED", "JOB_STATE_SUCCEEDED"):
            assert time.monotonic() < deadline, got
            time.sleep(0.3)
        message = got["error"]["message"]
        assert got["state"] == "JOB_STATE_FAILED"
        assert "--max-failed-trial-count" not in message
        assert "maxFailedTrialCount (the SDK's max_failed_trial_count)" in message, message
        job_dir = tmp_path / "root" / job["name"].rsplit("/", 1)[-1]
        assert f"The trainer's output: {job_dir}/1/workerpool0-0.stderr.log" in message, message
        assert "no data here" in (job_dir / "1" / "workerpool0-0.stderr.log").read_text()
        listed = serve.ok("GET", TUNING_JOBS)["hyperparameterTuningJobs"]
        assert [j["error"]["message"] for j in listed] == [message]  # the list says the same
        # delete takes the job's packages' environments (ROOT/.packages/JOB) with it
        kept = tmp_path / "root" / ".packages" / job_dir.name / "abc"
        kept.mkdir(parents=True)
        serve.ok("DELETE", path)
        assert not job_dir.exists() and not kept.parent.exists()
    finally:
        serve.stop()
