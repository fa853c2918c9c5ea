"""`trials export JOB|SPEC`: a job exports the spec it stored; both formats parse as Vertex v1 types."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from trials.cli import main
from trials.controller.jobs import admin as job_admin
from trials.controller.jobs import registry
from trials.spec.load import load_spec, loads_spec

ROOT = Path(__file__).resolve().parents[3]
ARGPARSE_CONFIG = ROOT / "examples" / "argparse_hypertune" / "config.yaml"
IMAGE = "us-docker.pkg.dev/my-project/trainers/demo:1"
SEARCH_SPACE = """
display_name: space-only
metrics: {accuracy: maximize}
parameters:
  lr: {type: double, min: 0.001, max: 0.1, scale: log}
  opt:
    type: categorical
    values: [adam, sgd]
    when:
      - values: [sgd]
        parameters:
          momentum: {type: discrete, values: [0.0, 0.9]}
max_trial_count: 3
"""


def _vertex_job(text: str, fmt: str):
    types = pytest.importorskip("google.cloud.aiplatform_v1.types",
                                reason="google-cloud-aiplatform is not installed")
    body = json.loads(text) if fmt == "rest-json" else yaml.safe_load(text)
    # from_json refuses unknown fields and wrong types: the check gcloud and the REST API make
    return types.HyperparameterTuningJob.from_json(json.dumps(body)), body


def _create(tmp_path, job, **kw):
    return registry.create_job(job, root=str(tmp_path), job_id="exp", spec_path=None, storage=kw.get("storage"),
                                 base_output_dir=kw.get("base"), project_number=None,
                                 local_command=kw.get("command"), seed=0)


@pytest.mark.parametrize("fmt", ["rest-json", "gcloud-yaml"])
def test_a_job_exports_its_stored_spec_with_its_trial_count(tmp_path, capsys, fmt):
    h = _create(tmp_path, load_spec(ARGPARSE_CONFIG),
                command=["python", "train.py", "--job-dir", "gs://b/run"])
    job_admin.extend(h, 15)  # the job now has more trials than its spec file says
    assert main(["export", "exp", "--root", str(tmp_path), "--format", fmt, "--image-uri", IMAGE]) == 0
    message, body = _vertex_job(capsys.readouterr().out, fmt)  # the spec's own gs:// base, as given
    assert message.trial_job_spec.base_output_directory.output_uri_prefix == "gs://my-bucket/argparse-hypertune"
    assert main(["export", "exp", "--root", str(tmp_path), "--format", fmt, "--image-uri", IMAGE,
                 "--base-output-dir", "gs://b/out/", "--with-local-command"]) == 0
    out = capsys.readouterr().out
    message, body = _vertex_job(out, fmt)
    assert message.trial_job_spec.base_output_directory.output_uri_prefix == "gs://b/out/"
    assert message.max_trial_count == 15
    assert message.display_name == "argparse-hypertune"
    pool = message.trial_job_spec.worker_pool_specs[0]
    assert pool.container_spec.image_uri == IMAGE
    assert list(pool.container_spec.args) == ["--epochs=10"]
    assert [p.parameter_id for p in message.study_spec.parameters] == ["learning_rate", "l2", "batch_size"]
    assert message.study_spec.median_automated_stopping_spec is not None
    # asked for, the command after -- is what the trial ran: it replaces the ENTRYPOINT, arguments included
    assert list(pool.container_spec.command) == ["python", "train.py", "--job-dir", "gs://b/run"]
    assert "trialsLocal" not in body


def test_a_job_run_with_a_local_base_asks_for_a_gs_one_and_one_without_a_base_exports_none(tmp_path, capsys):
    _create(tmp_path, loads_spec(SEARCH_SPACE, source="space.yaml"), command=["python", "train.py"],
            base=str(tmp_path / "out"))
    assert main(["export", "exp", "--root", str(tmp_path), "--image-uri", IMAGE]) == 2  # a local folder
    assert "--base-output-dir gs://" in capsys.readouterr().err
    none = tmp_path / "none"
    registry.create_job(loads_spec(SEARCH_SPACE, source="space.yaml"), root=str(none), job_id="exp", spec_path=None,
                        storage=None, base_output_dir=None, project_number=None, local_command=["python", "t.py"])
    assert main(["export", "exp", "--root", str(none), "--image-uri", IMAGE, "--format", "rest-json"]) == 0
    assert "baseOutputDirectory" not in json.loads(capsys.readouterr().out)["trialJobSpec"]


def test_a_job_from_a_search_space_needs_an_image_and_then_gets_one_pool(tmp_path, capsys):
    _create(tmp_path, loads_spec(SEARCH_SPACE, source="space.yaml"), command=["python", "train.py"])
    assert main(["export", "exp", "--root", str(tmp_path)]) == 2
    assert "--image-uri" in capsys.readouterr().err
    assert main(["export", "exp", "--root", str(tmp_path), "--format", "rest-json", "--image-uri", IMAGE,
                 "--base-output-dir", "gs://b/out/"]) == 0
    message, body = _vertex_job(capsys.readouterr().out, "rest-json")
    assert [p.container_spec.image_uri for p in message.trial_job_spec.worker_pool_specs] == [IMAGE]
    assert message.trial_job_spec.worker_pool_specs[0].machine_spec.machine_type
    cond = message.study_spec.parameters[1].conditional_parameter_specs[0]
    assert list(cond.parent_categorical_values.values) == ["sgd"]
    assert body["maxTrialCount"] == 3 and body["trialJobSpec"]["workerPoolSpecs"][0]["replicaCount"] == "1"


def test_a_job_in_a_database_storage(tmp_path, capsys):
    url = f"sqlite:///{tmp_path / 'jobs.db'}"
    _create(tmp_path, load_spec(ARGPARSE_CONFIG), storage=url, command=["python", "train.py"])
    assert main(["export", "exp", "--storage", url, "--format", "gcloud-yaml",
                 "--base-output-dir", "gs://b/out/"]) == 0
    message, _ = _vertex_job(capsys.readouterr().out, "gcloud-yaml")
    assert message.max_trial_count == 12
    # the spec's own image: nothing to replace
    assert message.trial_job_spec.worker_pool_specs[0].container_spec.image_uri.endswith("argparse-hypertune:latest")


def test_a_path_exports_the_file_and_an_unknown_name_says_both(tmp_path, capsys):
    assert main(["export", str(ARGPARSE_CONFIG), "--format", "rest-json"]) == 0
    message, _ = _vertex_job(capsys.readouterr().out, "rest-json")
    assert message.max_trial_count == 12
    assert main(["export", "no-such-job", "--root", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "expected a spec file or a job id" in err and "no-such-job" in err
