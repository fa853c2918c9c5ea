"""Export to REST JSON and gcloud YAML: load(export(job)) == job, and Vertex's own types accept it."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from trials.errors import ConfigError
from trials.spec import JobSpec, LocalOptions
from trials.spec.export import export_text, to_gcloud, to_rest, with_image
from trials.spec.load import load_spec, loads_spec, parse_spec
from trials.timefmt import duration

ROOT = Path(__file__).parents[2]
ALL_SPECS = (sorted((ROOT / "tests" / "data" / "specs").glob("*"))
             + sorted((ROOT / "search_spaces").glob("*.yaml"))
             + sorted(p for p in (ROOT / "examples").glob("*/*.yaml")  # the examples' specs too (not the
                      if p.parent.name != "kubernetes"))  # Kubernetes manifests: tests/cli/test_cluster_examples.py)
IDS = [str(p.relative_to(ROOT)) for p in ALL_SPECS]


def _without_local(job: JobSpec) -> JobSpec:
    return replace(job, local=LocalOptions())  # trialsLocal is never exported


@pytest.mark.parametrize("path", ALL_SPECS, ids=IDS)
def test_export_then_load_is_the_identity(path: Path) -> None:
    import yaml

    job = load_spec(path)
    expected = _without_local(job)
    assert parse_spec(json.loads(json.dumps(to_rest(job))), source="rest") == expected
    assert parse_spec(yaml.safe_load(yaml.safe_dump(to_gcloud(job), sort_keys=False)),
                      source="gcloud") == expected
    if job.trial_job is not None:
        for fmt in ("rest-json", "gcloud-yaml"):
            assert loads_spec(export_text(job, fmt, draft=True)) == expected


@pytest.mark.parametrize("path", ALL_SPECS, ids=IDS)
def test_vertex_v1_type_accepts_the_rest_export(path: Path) -> None:
    types = pytest.importorskip("google.cloud.aiplatform_v1.types",
                                reason="google-cloud-aiplatform is not installed")
    job = load_spec(path)
    text = export_text(job, "rest-json", image_uri="us-docker.pkg.dev/p/r/trainer:1",
                       display_name=path.stem)
    message = types.HyperparameterTuningJob.from_json(text)  # rejects unknown fields and bad types
    assert message.max_trial_count == job.max_trial_count
    assert len(message.study_spec.parameters) == len(job.study.parameters)
    assert message.trial_job_spec.worker_pool_specs[0].machine_spec.machine_type


def test_vertex_type_parses_nested_values_exactly() -> None:
    types = pytest.importorskip("google.cloud.aiplatform_v1.types",
                                reason="google-cloud-aiplatform is not installed")
    job = load_spec(ROOT / "tests" / "data" / "specs" / "full.gcloud.yaml")
    message = types.HyperparameterTuningJob.from_json(
        export_text(job, "rest-json", image_uri="gcr.io/p/t:1"))
    depth = message.study_spec.parameters[1]
    assert list(depth.conditional_parameter_specs[1].parent_int_values.values) == [3, 4, 5, 6]
    assert message.study_spec.convex_automated_stopping_spec.max_step_count == 100
    assert message.trial_job_spec.scheduling.timeout.total_seconds() == 1.5
    assert message.trial_job_spec.worker_pool_specs[2].replica_count == 2


def test_rest_writes_int64_as_strings_and_gcloud_as_ints() -> None:
    job = load_spec(ROOT / "tests" / "data" / "specs" / "full.gcloud.yaml")
    rest, gcloud = to_rest(job), to_gcloud(job)
    depth_rest, depth_gcloud = rest["studySpec"]["parameters"][1], gcloud["studySpec"]["parameters"][1]
    assert depth_rest["integerValueSpec"] == {"minValue": "1", "maxValue": "6"}
    assert depth_gcloud["integerValueSpec"] == {"minValue": 1, "maxValue": 6}
    assert depth_rest["conditionalParameterSpecs"][0]["parentIntValues"] == {"values": ["1", "2"]}
    assert rest["trialJobSpec"]["workerPoolSpecs"][0]["replicaCount"] == "1"
    assert rest["trialJobSpec"]["workerPoolSpecs"][1] == {}
    assert rest["studySpec"]["convexAutomatedStoppingSpec"]["maxStepCount"] == "100"
    assert rest["maxTrialCount"] == 40  # int32 stays a number
    assert rest["trialJobSpec"]["scheduling"] == {"timeout": "1.5s",
                                                  "restartJobOnWorkerRestart": True,
                                                  "strategy": "STANDARD"}  # carried as given
    assert "trialsLocal" not in rest and "trialsLocal" not in gcloud


def test_gcloud_yaml_text_keeps_key_order_and_quotes_ambiguous_strings() -> None:
    job = loads_spec("metrics: {acc: maximize}\nparameters:\n  flag: {type: categorical, "
                     "values: ['true', 'no', '1']}\ncommand: [python, t.py]\n")
    text = export_text(job, "gcloud-yaml", draft=True)
    assert text.index("studySpec") < text.index("maxTrialCount") < text.index("trialJobSpec")
    assert "- 'true'" in text and "- 'no'" in text and "- '1'" in text
    assert loads_spec(text) == job


def test_duration_format() -> None:
    assert duration(3600.0) == "3600s"
    assert duration(1.5) == "1.5s"
    assert duration(0.000000001) == "0.000000001s"


def test_export_without_trial_job_needs_an_image() -> None:
    job = load_spec(ROOT / "search_spaces" / "conditional.yaml")
    with pytest.raises(ConfigError, match="--image-uri"):
        export_text(job, "rest-json")
    exported = json.loads(export_text(job, "rest-json", image_uri="gcr.io/p/gbdt:1"))
    pool = exported["trialJobSpec"]["workerPoolSpecs"][0]
    assert pool["containerSpec"] == {"imageUri": "gcr.io/p/gbdt:1"}
    assert pool["machineSpec"] == {"machineType": "n1-standard-4"}


def test_image_uri_replaces_container_images_and_keeps_commands() -> None:
    job = load_spec(ROOT / "tests" / "data" / "specs" / "full.gcloud.yaml")
    pools = with_image(job, "gcr.io/p/t:2").trial_job.worker_pools
    assert pools[0].container.image_uri == "gcr.io/p/t:2"
    assert pools[0].container.command == ("python", "-m", "trainer.task")
    assert pools[0].machine_spec.machine_type == "n1-standard-8"  # kept
    assert pools[1] is None and pools[2].container.image_uri == "gcr.io/p/t:2"


def test_image_uri_turns_a_local_python_module_into_a_container() -> None:
    job = load_spec(ROOT / "search_spaces" / "legacy_hptuning_config.yaml")
    pool = with_image(job, "gcr.io/p/mlp:1").trial_job.worker_pools[0]
    assert pool.python_package is None
    assert pool.container.command == ("python3", "-m", "examples.digits_mlp.train")
    assert pool.container.args == ("--epochs=20",)
    # a python package spec with packages keeps them; the image becomes its executor image
    same = load_spec(ROOT / "tests" / "data" / "specs" / "same_job.gcloud.yaml")
    kept = with_image(same, "gcr.io/p/x:1").trial_job.worker_pools[0]
    assert kept.python_package == replace(same.trial_job.worker_pools[0].python_package,
                                          executor_image_uri="gcr.io/p/x:1")


def test_unknown_format_and_empty_image_are_config_errors() -> None:
    job = load_spec(ROOT / "tests" / "data" / "specs" / "same_job.rest.json")
    with pytest.raises(ConfigError, match="rest-json, gcloud-yaml"):
        export_text(job, "xml")
    with pytest.raises(ConfigError, match="empty"):
        export_text(job, "rest-json", image_uri="")
