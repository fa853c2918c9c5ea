"""A job's error as an API user reads it: SDK/REST field names, and where the trainer's output is."""

from __future__ import annotations

from trials.controller.jobs.api_words import api_error, api_message
from trials.controller.policy import exits
from trials.spec.load import loads_spec

SPEC = """\
metrics: {loss: minimize}
parameters:
  x: {type: double, min: 0.0, max: 1.0}
command: [python, train.py]
max_trial_count: 4
"""
FAILURE = "The replica workerpool0-0 exited with a non-zero status of 1. Termination reason: Error."


def test_a_failed_jobs_error_names_the_sdks_field_and_the_trainers_output() -> None:
    job = loads_spec(SPEC, source="t.yaml")
    message = exits.job_failure(job, n_failed=1, n_succeeded=0, first_failure=f"Trial 3: {FAILURE}")
    assert message is not None and "--max-failed-trial-count" in message  # the CLI's words, for the CLI
    said = api_message(message, job_dir="/r/123")
    assert "--" not in said.replace("--keep-going", "")
    assert "maxFailedTrialCount (the SDK's max_failed_trial_count) N allows N failed trials" in said
    assert said.endswith("The trainer's output: /r/123/3/workerpool0-0.stderr.log (and workerpool0-0.stdout.log "
                         "beside it).")


def test_the_replica_named_by_the_failure_is_the_log_named() -> None:
    said = api_message("Trial 2: The replica workerpool1-0 exited with a non-zero status of 1.", job_dir="/j")
    assert "/j/2/workerpool1-0.stderr.log" in said


def test_a_cancel_or_no_error_is_left_as_it_is() -> None:
    assert api_error(None, job_dir="/j") is None
    assert api_error({"code": 1, "message": "The job was cancelled."}, job_dir="/j") == {
        "code": 1, "message": "The job was cancelled."}
