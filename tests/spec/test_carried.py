"""Every field a Vertex v1 HyperparameterTuningJob may carry survives load -> export unchanged."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path

import pytest
import yaml

from trials.cli import main
from trials.spec.carried import CARRIED_KEYS, OUTPUT_KEYS
from trials.spec.export import export_text, to_gcloud, to_rest
from trials.spec.load import load_spec, loads_spec, parse_spec

types = pytest.importorskip("google.cloud.aiplatform_v1.types",
                            reason="google-cloud-aiplatform is not installed")
ROOT = Path(__file__).parents[2]
SAME_JOB = sorted((ROOT / "tests" / "data" / "specs").glob("same_job.*"))
IMAGE = "us-docker.pkg.dev/p/r/trainer:1"

# Every input field of the v1 types, in the canonical REST form export writes.
FULL = {
    "displayName": "carry-all",
    "studySpec": {
        "metrics": [
            {"metricId": "latency", "goal": "MINIMIZE",
             "safetyConfig": {"safetyThreshold": 0.2, "desiredMinSafeTrialsFraction": 0.9}},
            {"metricId": "acc", "goal": "MAXIMIZE"},
        ],
        "parameters": [
            {"parameterId": "lr", "doubleValueSpec": {"minValue": 0.001, "maxValue": 0.1,
                                                      "defaultValue": 0.01},
             "scaleType": "UNIT_LOG_SCALE"},
            {"parameterId": "layers",
             "integerValueSpec": {"minValue": "1", "maxValue": "4", "defaultValue": "2"},
             "conditionalParameterSpecs": [{
                 "parentIntValues": {"values": ["2"]},
                 "parameterSpec": {"parameterId": "width",
                                   "discreteValueSpec": {"values": [32, 64],
                                                         "defaultValue": 32}}}]},
            {"parameterId": "opt",
             "categoricalValueSpec": {"values": ["adam", "sgd"], "defaultValue": "adam"}},
        ],
        "algorithm": "RANDOM_SEARCH",
        "measurementSelectionType": "BEST_MEASUREMENT",
        "medianAutomatedStoppingSpec": {"useElapsedDuration": True},
        "observationNoise": "HIGH",
        "studyStoppingConfig": {
            "shouldStopAsap": False, "minimumRuntimeConstraint": {"maxDuration": "60s"},
            "maximumRuntimeConstraint": {"endTime": "2030-01-01T00:00:00Z"},
            "minNumTrials": 2, "maxNumTrials": 10, "maxNumTrialsNoProgress": 3,
            "maxDurationNoProgress": "600s"},
    },
    "maxTrialCount": 4,
    "parallelTrialCount": 2,
    "maxFailedTrialCount": 1,
    "trialJobSpec": {
        "workerPoolSpecs": [
            {"machineSpec": {"machineType": "a2-highgpu-1g",
                             "acceleratorType": "NVIDIA_TESLA_A100",
                             "acceleratorCount": 1, "gpuPartitionSize": "1g.5gb",
                             "tpuTopology": "2x2",
                             "reservationAffinity": {"reservationAffinityType": "ANY_RESERVATION"}},
             "replicaCount": "1",
             "containerSpec": {"imageUri": IMAGE, "command": ["python3", "-m", "t"],
                               "args": ["--job-dir=gs://b/j"], "env": [{"name": "A", "value": "b"}]},
             "diskSpec": {"bootDiskType": "pd-ssd", "bootDiskSizeGb": 100},
             "nfsMounts": [{"server": "10.0.0.2", "path": "/exports", "mountPoint": "nfs"}],
             "lustreMounts": [{"instanceIp": "10.0.0.3", "volumeHandle": "v", "filesystem": "fs",
                               "mountPoint": "lustre"}]},
            {},
            {"machineSpec": {"machineType": "n1-standard-4"}, "replicaCount": "2",
             "pythonPackageSpec": {"executorImageUri": IMAGE, "packageUris": ["gs://b/p.tar.gz"],
                                   "pythonModule": "t.task"}},
        ],
        "baseOutputDirectory": {"outputUriPrefix": "gs://b/out/"},
        "scheduling": {"timeout": "3600s", "restartJobOnWorkerRestart": True, "strategy": "SPOT",
                       "disableRetries": True, "maxWaitDuration": "1800s"},
        "enableDashboardAccess": True,
        "enableWebAccess": True,
        "experiment": "projects/1/locations/us-central1/metadataStores/default/contexts/e",
        "experimentRun": "projects/1/locations/us-central1/metadataStores/default/contexts/r",
        "models": ["projects/1/locations/us-central1/models/m"],
        "network": "projects/1/global/networks/vpc",
        "persistentResourceId": "pr-1",
        "protectedArtifactLocationId": "us-central1",
        "pscInterfaceConfig": {"networkAttachment": "na"},
        "reservedIpRanges": ["range-a"],
        "serviceAccount": "trainer@p.iam.gserviceaccount.com",
        "tensorboard": "projects/1/locations/us-central1/tensorboards/2",
    },
    "labels": {"team": "ml"},
    "encryptionSpec": {"kmsKeyName": "projects/p/locations/l/keyRings/r/cryptoKeys/k"},
}


def _camel(name: str) -> str:
    return re.sub(r"_([a-z0-9])", lambda m: m.group(1).upper(), name)


def _fields(message: type) -> set[str]:
    return {_camel(n) for n in message.meta.fields}


def _oneof_alternatives(message: type, present: set[str]) -> set[str]:
    """Fields of a oneof group whose other member is present (only one can be given)."""
    groups: dict[str, set[str]] = {}
    for name, f in message.meta.fields.items():
        if f.oneof:
            groups.setdefault(f.oneof, set()).add(_camel(name))
    return {n for g in groups.values() if g & present for n in g - present}


@pytest.mark.parametrize(("message", "docs"), [
    ("HyperparameterTuningJob", lambda: [FULL]),
    ("StudySpec", lambda: [FULL["studySpec"]]),
    ("CustomJobSpec", lambda: [FULL["trialJobSpec"]]),
    ("WorkerPoolSpec", lambda: FULL["trialJobSpec"]["workerPoolSpecs"]),
    ("MachineSpec", lambda: [FULL["trialJobSpec"]["workerPoolSpecs"][0]["machineSpec"]]),
    ("Scheduling", lambda: [FULL["trialJobSpec"]["scheduling"]]),
    ("StudySpec.MetricSpec", lambda: FULL["studySpec"]["metrics"]),
    ("StudySpec.ParameterSpec", lambda: FULL["studySpec"]["parameters"]),
])
def test_the_full_document_uses_every_input_field_of_the_v1_types(message, docs) -> None:
    cls = types
    for part in message.split("."):
        cls = getattr(cls, part)
    present = set().union(*(set(d) for d in docs()))
    expected = _fields(cls) - _oneof_alternatives(cls, present)
    if message == "HyperparameterTuningJob":
        expected -= OUTPUT_KEYS
    if message == "StudySpec":  # the other stopping specs of the oneof
        expected -= {"decayCurveStoppingSpec", "convexAutomatedStoppingSpec"}
    assert present == expected


def test_carried_keys_are_v1_fields() -> None:
    owners = {"job": types.HyperparameterTuningJob, "studySpec": types.StudySpec,
              "trialJobSpec": types.CustomJobSpec, "workerPoolSpec": types.WorkerPoolSpec,
              "machineSpec": types.MachineSpec, "scheduling": types.Scheduling,
              "valueSpec": types.StudySpec.ParameterSpec.DoubleValueSpec}
    for kind, keys in CARRIED_KEYS.items():
        assert keys <= _fields(owners[kind]), kind


def test_every_field_survives_load_then_export_unchanged() -> None:
    types.HyperparameterTuningJob.from_json(json.dumps(FULL))  # the document is a valid job
    job = parse_spec(copy.deepcopy(FULL), source="full.json")
    assert to_rest(job) == FULL
    text = export_text(job, "rest-json")
    assert json.loads(text) == FULL
    types.HyperparameterTuningJob.from_json(text)  # strict: unknown fields are errors
    gcloud = yaml.safe_load(export_text(job, "gcloud-yaml"))
    assert parse_spec(gcloud, source="gcloud") == job
    assert gcloud["trialJobSpec"]["scheduling"]["strategy"] == "SPOT"
    assert to_gcloud(job)["encryptionSpec"] == FULL["encryptionSpec"]


def test_safety_metric_is_kept_but_never_an_objective() -> None:
    job = parse_spec(copy.deepcopy(FULL), source="full.json")
    assert job.study.metric_ids == ("acc",)  # the only objective
    assert [m.metric_id for m in job.study.safety_metrics] == ["latency"]
    assert job.study.reported_metric_ids == ("acc", "latency")
    exported = to_rest(job)["studySpec"]["metrics"]
    assert exported == FULL["studySpec"]["metrics"]  # in the order they came


def test_only_safety_metrics_is_an_error() -> None:
    doc = copy.deepcopy(FULL)
    doc["studySpec"]["metrics"] = [doc["studySpec"]["metrics"][0]]
    with pytest.raises(ValueError, match="objective metric"):
        parse_spec(doc, source="s.json")


def test_validate_lists_carried_fields_and_safety_metrics(tmp_path, capsys) -> None:
    path = tmp_path / "full.json"
    path.write_text(json.dumps(FULL))
    assert main(["validate", str(path)]) == 0
    out = capsys.readouterr().out
    assert "latency" in out and "safety metric: reported, not optimised" in out
    carried_line = next(line for line in out.splitlines() if line.startswith("carried"))
    for key in ("trialJobSpec.serviceAccount", "trialJobSpec.scheduling.strategy",
                "encryptionSpec", "trialJobSpec.workerPoolSpecs[0].nfsMounts",
                "studySpec.parameters[1].conditionalParameterSpecs[0].parameterSpec"
                ".discreteValueSpec.defaultValue"):
        assert key in carried_line
    assert "studyStoppingConfig" not in carried_line  # emulated: on its own line
    assert any(line.startswith("study stopping: {") for line in out.splitlines())


def test_legacy_fields_map_to_vertex_fields_or_are_listed(tmp_path, capsys) -> None:
    legacy = ROOT / "tests" / "data" / "specs" / "same_job.legacy.yaml"
    text = legacy.read_text().replace(
        "  region: us-central1\n",
        "  region: us-central1\n  network: projects/1/global/networks/vpc\n"
        "  encryptionConfig: {kmsKeyName: k1}\n")
    path = tmp_path / "legacy.yaml"
    path.write_text(text)
    assert main(["export", str(path), "--format", "rest-json"]) == 0
    body = json.loads(capsys.readouterr().out)
    types.HyperparameterTuningJob.from_json(json.dumps(body))
    assert body["trialJobSpec"]["network"] == "projects/1/global/networks/vpc"
    assert body["trialJobSpec"]["serviceAccount"].startswith("trainer@")
    assert body["encryptionSpec"] == {"kmsKeyName": "k1"}
    assert main(["validate", str(path)]) == 0
    out = capsys.readouterr().out
    assert "no Vertex field, not exported: trainingInput.pythonVersion, trainingInput.region" in out


@pytest.mark.parametrize("path", SAME_JOB, ids=[p.name for p in SAME_JOB])
@pytest.mark.parametrize("fmt", ["rest-json", "gcloud-yaml"])
def test_every_spec_form_exports_a_strict_v1_job(path: Path, fmt: str, capsys) -> None:
    argv = ["export", str(path), "--format", fmt]
    if path.name.endswith(".short.yaml"):
        argv += ["--image-uri", IMAGE]  # the short form runs a local command
    assert main(argv) == 0
    out = capsys.readouterr().out
    body = json.loads(out) if fmt == "rest-json" else yaml.safe_load(out)
    message = types.HyperparameterTuningJob.from_json(json.dumps(body))
    assert message.display_name  # required by Vertex; legacy and short forms get one too
    assert message.trial_job_spec.worker_pool_specs[0].machine_spec.machine_type
    assert loads_spec(out) == load_spec(path) or path.name.endswith(".short.yaml")


def test_legacy_without_job_id_gets_a_display_name(tmp_path, capsys) -> None:
    legacy = (ROOT / "tests" / "data" / "specs" / "same_job.legacy.yaml").read_text()
    path = tmp_path / "hptuning_config.yaml"
    path.write_text(legacy.replace("jobId: digits-mlp\n", ""))
    assert main(["export", str(path), "--format", "rest-json"]) == 0
    body = json.loads(capsys.readouterr().out)
    assert body["displayName"] == "hptuning_config"
    types.HyperparameterTuningJob.from_json(json.dumps(body))


def test_an_export_vertex_would_reject_is_refused_unless_draft(tmp_path, capsys) -> None:
    spec = ROOT / "search_spaces" / "mlp.yaml"  # a local command, no image, no machine type
    assert main(["export", str(spec)]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1
    assert "ImageUri (--image-uri IMAGE)" in err and "machineType" in err
    assert "--draft" in err
    assert main(["export", str(spec), "--draft"]) == 0
    assert "ImageUri: local" in capsys.readouterr().out


def test_image_uri_replaces_the_executor_image_of_python_package_pools(capsys) -> None:
    spec = ROOT / "tests" / "data" / "specs" / "same_job.rest.json"
    assert main(["export", str(spec), "--format", "rest-json", "--image-uri", "gcr.io/p/x:2"]) == 0
    pool = json.loads(capsys.readouterr().out)["trialJobSpec"]["workerPoolSpecs"][0]
    assert pool["pythonPackageSpec"]["executorImageUri"] == "gcr.io/p/x:2"
    assert pool["pythonPackageSpec"]["packageUris"] == ["gs://my-bucket/trainer-0.1.tar.gz"]


def test_a_local_base_output_directory_needs_a_gs_uri(tmp_path, capsys) -> None:
    doc = copy.deepcopy(FULL)
    doc["trialJobSpec"]["baseOutputDirectory"] = {"outputUriPrefix": str(tmp_path / "out")}
    path = tmp_path / "job.json"
    path.write_text(json.dumps(doc))
    assert main(["export", str(path)]) == 2
    assert "--base-output-dir gs://" in capsys.readouterr().err
    assert main(["export", str(path), "--format", "rest-json",
                 "--base-output-dir", "gs://b/run"]) == 0
    body = json.loads(capsys.readouterr().out)
    assert body["trialJobSpec"]["baseOutputDirectory"] == {"outputUriPrefix": "gs://b/run"}
