"""Jobs built with the real aiplatform_v1 types load as Vertex reads them, however they are written.

Each job is serialised as the SDK's REST transport sends it (``json_format.MessageToJson`` with
numeric enums, fields at their default left out), as proto-plus and protobuf print it (every field
spelled out, enum names or numbers, proto field names), and as gcloud ``--config`` YAML; every
text loads (``load_spec`` and ``trials validate``) to the model of the canonical text, and that
model exported back parses with ``HyperparameterTuningJob.from_json`` to the job it came from.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from trials.cli import main
from trials.spec import Algorithm, Goal, JobSpec, MeasurementSelection, ParameterType, ScaleType
from trials.spec import StoppingKind as Stop
from trials.spec.export import export_text
from trials.spec.load import load_spec

types = pytest.importorskip("google.cloud.aiplatform_v1.types",
                            reason="google-cloud-aiplatform is not installed")
json_format = pytest.importorskip("google.protobuf.json_format")

T = types
SS = T.StudySpec
PS = SS.ParameterSpec
CPS = PS.ConditionalParameterSpec
IMAGE = "us-docker.pkg.dev/p/r/trainer:1"
DURATION = "google.protobuf.duration_pb2"


def _seconds(n: int) -> object:
    return pytest.importorskip(DURATION).Duration(seconds=n)


def full_job() -> T.HyperparameterTuningJob:
    """Every input field of StudySpec and CustomJobSpec (one member of each oneof; the others in
    the jobs below), enums at values other than 0."""
    timestamp = pytest.importorskip("google.protobuf.timestamp_pb2").Timestamp(seconds=1893456000)
    return T.HyperparameterTuningJob(
        display_name="full", max_trial_count=8, parallel_trial_count=2, max_failed_trial_count=3,
        labels={"team": "ml"}, encryption_spec=T.EncryptionSpec(kms_key_name="projects/p/k"),
        study_spec=SS(
            metrics=[SS.MetricSpec(metric_id="acc", goal=SS.MetricSpec.GoalType.MAXIMIZE),
                     SS.MetricSpec(metric_id="latency", goal=SS.MetricSpec.GoalType.MINIMIZE,
                                   safety_config=SS.MetricSpec.SafetyMetricConfig(
                                       safety_threshold=0.2, desired_min_safe_trials_fraction=0.9))],
            parameters=[
                PS(parameter_id="lr", scale_type=PS.ScaleType.UNIT_LINEAR_SCALE,
                   double_value_spec=PS.DoubleValueSpec(min_value=0, max_value=0.1,
                                                        default_value=0.01)),
                PS(parameter_id="lr_log", scale_type=PS.ScaleType.UNIT_LOG_SCALE,
                   double_value_spec=PS.DoubleValueSpec(min_value=1e-4, max_value=0.1)),
                PS(parameter_id="layers",
                   integer_value_spec=PS.IntegerValueSpec(min_value=0, max_value=4, default_value=2),
                   conditional_parameter_specs=[CPS(
                       parent_int_values=CPS.IntValueCondition(values=[2, 3]),
                       parameter_spec=PS(
                           parameter_id="width",
                           discrete_value_spec=PS.DiscreteValueSpec(values=[32, 64], default_value=32),
                           conditional_parameter_specs=[CPS(
                               parent_discrete_values=CPS.DiscreteValueCondition(values=[64]),
                               parameter_spec=PS(parameter_id="dropout",
                                                 double_value_spec=PS.DoubleValueSpec(max_value=0.5)))]))]),
                PS(parameter_id="opt",
                   categorical_value_spec=PS.CategoricalValueSpec(values=["adam", "sgd"],
                                                                  default_value="adam"),
                   conditional_parameter_specs=[CPS(
                       parent_categorical_values=CPS.CategoricalValueCondition(values=["sgd"]),
                       parameter_spec=PS(parameter_id="momentum",
                                         scale_type=PS.ScaleType.UNIT_REVERSE_LOG_SCALE,
                                         double_value_spec=PS.DoubleValueSpec(min_value=0.5,
                                                                              max_value=0.99)))]),
                PS(parameter_id="batch", scale_type=PS.ScaleType.UNIT_LINEAR_SCALE,
                   discrete_value_spec=PS.DiscreteValueSpec(values=[16, 32, 64])),
            ],
            algorithm=SS.Algorithm.RANDOM_SEARCH, observation_noise=SS.ObservationNoise.HIGH,
            measurement_selection_type=SS.MeasurementSelectionType.BEST_MEASUREMENT,
            convex_automated_stopping_spec=SS.ConvexAutomatedStoppingSpec(
                max_step_count=100, min_step_count=10, min_measurement_count=5,
                learning_rate_parameter_name="lr", use_elapsed_duration=False,
                update_all_stopped_trials=True),
            study_stopping_config=SS.StudyStoppingConfig(
                should_stop_asap=False,
                minimum_runtime_constraint=T.StudyTimeConstraint(max_duration=_seconds(60)),
                maximum_runtime_constraint=T.StudyTimeConstraint(end_time=timestamp),
                min_num_trials=2, max_num_trials=10, max_num_trials_no_progress=3,
                max_duration_no_progress=_seconds(600))),
        trial_job_spec=T.CustomJobSpec(
            worker_pool_specs=[
                T.WorkerPoolSpec(
                    machine_spec=T.MachineSpec(
                        machine_type="a2-highgpu-1g", accelerator_type=T.AcceleratorType.NVIDIA_TESLA_T4,
                        accelerator_count=1, gpu_partition_size="1g.5gb", tpu_topology="2x2",
                        reservation_affinity=T.ReservationAffinity(
                            reservation_affinity_type=T.ReservationAffinity.Type.SPECIFIC_RESERVATION,
                            key="compute.googleapis.com/reservation-name", values=["r"])),
                    replica_count=1,
                    container_spec=T.ContainerSpec(image_uri=IMAGE, command=["python3", "-m", "t"],
                                                   args=["--epochs=3"],
                                                   env=[T.EnvVar(name="A", value="b")]),
                    disk_spec=T.DiskSpec(boot_disk_type="pd-ssd", boot_disk_size_gb=200),
                    nfs_mounts=[T.NfsMount(server="10.0.0.2", path="/exports", mount_point="nfs")],
                    lustre_mounts=[T.LustreMount(instance_ip="10.0.0.3", volume_handle="v",
                                                 filesystem="fs", mount_point="lustre")]),
                T.WorkerPoolSpec(),  # a skipped pool
                T.WorkerPoolSpec(
                    machine_spec=T.MachineSpec(machine_type="n1-standard-4"), replica_count=2,
                    python_package_spec=T.PythonPackageSpec(
                        executor_image_uri=IMAGE, package_uris=["gs://b/p.tar.gz"],
                        python_module="t.task", args=["--eval"],
                        env=[T.EnvVar(name="B", value="c")])),
            ],
            scheduling=T.Scheduling(timeout=_seconds(3600), restart_job_on_worker_restart=True,
                                    strategy=T.Scheduling.Strategy.SPOT, disable_retries=True,
                                    max_wait_duration=_seconds(1800)),
            service_account="trainer@p.iam.gserviceaccount.com",
            network="projects/1/global/networks/vpc", reserved_ip_ranges=["range-a"],
            psc_interface_config=T.PscInterfaceConfig(
                network_attachment="na", dns_peering_configs=[T.DnsPeeringConfig(
                    domain="example.com.", target_project="tp", target_network="tn")]),
            base_output_directory=T.GcsDestination(output_uri_prefix="gs://b/out/"),
            protected_artifact_location_id="us-central1", persistent_resource_id="pr",
            tensorboard="projects/1/locations/l/tensorboards/t", enable_web_access=True,
            enable_dashboard_access=True, experiment="projects/1/locations/l/metadataStores/d/contexts/e",
            experiment_run="projects/1/locations/l/metadataStores/d/contexts/r",
            models=["projects/1/locations/l/models/m"]))


def zeros_job() -> T.HyperparameterTuningJob:
    """Every value at its proto3 default that Vertex accepts: proto3 JSON leaves them all out."""
    return T.HyperparameterTuningJob(
        display_name="zeros",
        study_spec=SS(
            metrics=[SS.MetricSpec(metric_id="score")],  # goal 0: GOAL_TYPE_UNSPECIFIED
            parameters=[
                PS(parameter_id="x", double_value_spec=PS.DoubleValueSpec(min_value=0, max_value=0)),
                PS(parameter_id="n", integer_value_spec=PS.IntegerValueSpec(min_value=0, max_value=3)),
                PS(parameter_id="d", discrete_value_spec=PS.DiscreteValueSpec(values=[0, 1]),
                   conditional_parameter_specs=[CPS(
                       parent_discrete_values=CPS.DiscreteValueCondition(values=[0]),
                       parameter_spec=PS(parameter_id="y",
                                         double_value_spec=PS.DoubleValueSpec(max_value=1)))]),
            ],
            decay_curve_stopping_spec=SS.DecayCurveAutomatedStoppingSpec()),  # {}: set, all default
        trial_job_spec=T.CustomJobSpec(worker_pool_specs=[T.WorkerPoolSpec(
            machine_spec=T.MachineSpec(machine_type="n1-standard-4"),  # no accelerator: 0, 0
            container_spec=T.ContainerSpec(image_uri=IMAGE))]))  # replicaCount 0


def median_job() -> T.HyperparameterTuningJob:
    """The other members of the oneofs: median stopping, GRID_SEARCH, LAST_MEASUREMENT, a
    python-package pool, a minimum runtime given as an end time."""
    return T.HyperparameterTuningJob(
        display_name="median", max_trial_count=6, parallel_trial_count=3,
        study_spec=SS(
            metrics=[SS.MetricSpec(metric_id="loss", goal=SS.MetricSpec.GoalType.MINIMIZE)],
            parameters=[
                PS(parameter_id="units", scale_type=PS.ScaleType.UNIT_LOG_SCALE,
                   integer_value_spec=PS.IntegerValueSpec(min_value=1, max_value=64),
                   conditional_parameter_specs=[CPS(
                       parent_int_values=CPS.IntValueCondition(values=[1]),
                       parameter_spec=PS(parameter_id="act", categorical_value_spec=PS.CategoricalValueSpec(
                           values=["relu", "tanh"])))]),
            ],
            algorithm=SS.Algorithm.GRID_SEARCH,
            measurement_selection_type=SS.MeasurementSelectionType.LAST_MEASUREMENT,
            median_automated_stopping_spec=SS.MedianAutomatedStoppingSpec(use_elapsed_duration=True),
            study_stopping_config=SS.StudyStoppingConfig(should_stop_asap=True)),
        trial_job_spec=T.CustomJobSpec(
            worker_pool_specs=[T.WorkerPoolSpec(
                machine_spec=T.MachineSpec(machine_type="n1-standard-8",
                                           accelerator_type=T.AcceleratorType.NVIDIA_L4,
                                           accelerator_count=2),
                replica_count=1,
                python_package_spec=T.PythonPackageSpec(executor_image_uri=IMAGE,
                                                        python_module="trainer.task"))],
            base_output_directory=T.GcsDestination(output_uri_prefix="gs://b/median/")))


JOBS: dict[str, Callable[[], T.HyperparameterTuningJob]] = {
    "full": full_job, "zeros": zeros_job, "median": median_job}


def _ints(value: object) -> object:
    """int64 strings as YAML ints, as people write gcloud configs (no string field here is digits)."""
    if isinstance(value, dict):
        return {k: _ints(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_ints(v) for v in value]
    if isinstance(value, str) and re.fullmatch(r"-?\d+", value):
        return int(value)
    return value


# name -> (text of a message, file suffix)
FORMS: dict[str, tuple[Callable[[T.HyperparameterTuningJob], str], str]] = {
    # what the SDK's REST transport sends (rest_numeric_enums): numbers, fields at default omitted
    "sdk-rest": (lambda m: json_format.MessageToJson(m._pb, use_integers_for_enums=True), ".json"),
    # the canonical text: enum names, every field spelled out
    "canonical": (lambda m: json_format.MessageToJson(m._pb, always_print_fields_with_no_presence=True),
                  ".json"),
    # proto-plus's own to_json: numbers, every field spelled out; and with defaults left out (the
    # argument protobuf 5 renamed from including_default_value_fields)
    "proto-plus": (lambda m: type(m).to_json(m), ".json"),
    "proto-plus-sparse": (lambda m: type(m).to_json(m, use_integers_for_enums=True,
                                                    always_print_fields_with_no_presence=False), ".json"),
    # proto field names (snake_case), numbers
    "proto-names": (lambda m: json_format.MessageToJson(m._pb, preserving_proto_field_name=True,
                                                        use_integers_for_enums=True), ".json"),
    # the SDK's to_dict (snake_case, numbers, every field) dumped to YAML
    "sdk-dict-yaml": (lambda m: yaml.safe_dump(type(m).to_dict(m)), ".yaml"),
    # gcloud --config: the REST form in YAML, enum names, int64 as strings or as ints
    "gcloud-yaml": (lambda m: yaml.safe_dump(json_format.MessageToDict(m._pb)), ".yaml"),
    "gcloud-yaml-ints": (lambda m: yaml.safe_dump(_ints(json_format.MessageToDict(m._pb))), ".yaml"),
}


def _write(tmp_path: Path, job: str, form: str) -> Path:
    render, suffix = FORMS[form]
    path = tmp_path / f"{job}.{form}{suffix}"
    path.write_text(render(JOBS[job]()), encoding="utf-8")
    return path


def _as_message(text: str) -> T.HyperparameterTuningJob:
    """``from_json`` of a JSON or YAML text (YAML converted to JSON first, as gcloud reads it)."""
    data = json.loads(text) if text.lstrip().startswith("{") else yaml.safe_load(text)
    return T.HyperparameterTuningJob.from_json(json.dumps(data))


def _as_vertex_runs_it(message: T.HyperparameterTuningJob) -> T.HyperparameterTuningJob:
    """The job with the defaults the loader fills in where proto3 cannot tell 0 from unset:
    trial counts 0 are 1 (gcloud's rule) and a pool's replicaCount 0 is 1 (see the docs)."""
    out = T.HyperparameterTuningJob(message)
    out.max_trial_count = out.max_trial_count or 1
    out.parallel_trial_count = out.parallel_trial_count or 1
    for pool in out.trial_job_spec.worker_pool_specs:
        if pool != T.WorkerPoolSpec():
            pool.replica_count = pool.replica_count or 1
    return out


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("job", JOBS)
def test_every_serialisation_loads_to_the_model_of_the_canonical_text(
        tmp_path: Path, job: str, form: str, capsys: pytest.CaptureFixture[str]) -> None:
    path = _write(tmp_path, job, form)
    assert _as_message(path.read_text()) == JOBS[job]()  # the text is the job, for Vertex too
    expected = load_spec(_write(tmp_path, job, "canonical"))
    assert load_spec(path) == expected
    assert main(["validate", str(path)]) == 0, capsys.readouterr().err
    assert "A sample trial gets:" in capsys.readouterr().out


@pytest.mark.parametrize("fmt", ["rest-json", "gcloud-yaml"])
@pytest.mark.parametrize("job", JOBS)
def test_the_model_exported_back_is_the_same_v1_job(tmp_path: Path, job: str, fmt: str) -> None:
    model = load_spec(_write(tmp_path, job, "sdk-rest"))
    exported = _as_message(export_text(model, fmt))
    assert exported == _as_vertex_runs_it(JOBS[job]())


def test_proto3_defaults_are_read_as_vertex_reads_them(tmp_path: Path) -> None:
    sent = json.loads(FORMS["sdk-rest"][0](zeros_job()))
    params = sent["studySpec"]["parameters"]
    assert params[0]["doubleValueSpec"] == {} and params[1]["integerValueSpec"] == {"maxValue": "3"}
    assert "goal" not in sent["studySpec"]["metrics"][0]
    assert "replicaCount" not in sent["trialJobSpec"]["workerPoolSpecs"][0]
    assert "maxTrialCount" not in sent and sent["studySpec"]["decayCurveStoppingSpec"] == {}
    job = load_spec(_write(tmp_path, "zeros", "sdk-rest"))
    x, n, d = job.study.parameters
    assert (x.min_value, x.max_value, n.min_value, n.max_value) == (0.0, 0.0, 0, 3)
    assert isinstance(n.min_value, int) and isinstance(x.min_value, float)
    assert d.conditionals[0].parameter.bounds() == (0.0, 1.0)
    assert job.study.metrics[0].goal is Goal.GOAL_TYPE_UNSPECIFIED  # treated as MAXIMIZE
    assert job.study.algorithm is Algorithm.ALGORITHM_UNSPECIFIED
    assert job.study.measurement_selection is MeasurementSelection.MEASUREMENT_SELECTION_TYPE_UNSPECIFIED
    assert job.study.stopping is not None and job.study.stopping.kind is Stop.DECAY_CURVE
    assert (job.max_trial_count, job.parallel_trial_count, job.max_failed_trial_count) == (1, 1, 0)
    pool = job.trial_job.worker_pools[0]
    assert pool.replica_count == 1
    assert (pool.machine_spec.accelerator_type, pool.machine_spec.accelerator_count) == (None, 0)


def test_enums_given_as_numbers_are_the_named_values(tmp_path: Path) -> None:
    sent = json.loads(FORMS["sdk-rest"][0](full_job()))
    pool = sent["trialJobSpec"]["workerPoolSpecs"][0]
    assert pool["machineSpec"]["acceleratorType"] == 5 and sent["studySpec"]["metrics"][0]["goal"] == 1
    assert sent["studySpec"]["parameters"][1]["scaleType"] == 2
    assert "minValue" not in sent["studySpec"]["parameters"][0]["doubleValueSpec"]
    job: JobSpec = load_spec(_write(tmp_path, "full", "sdk-rest"))
    assert job.trial_job.worker_pools[0].machine_spec.accelerator_type == "NVIDIA_TESLA_T4"
    assert job.trial_job.worker_pools[1] is None  # the empty pool is skipped
    assert job.trial_job.worker_pools[2].replica_count == 2
    study = job.study
    assert [m.goal for m in study.spec_metrics()] == [Goal.MAXIMIZE, Goal.MINIMIZE]
    assert [p.scale_type for p in study.parameters] == [
        ScaleType.UNIT_LINEAR_SCALE, ScaleType.UNIT_LOG_SCALE, ScaleType.SCALE_TYPE_UNSPECIFIED,
        ScaleType.SCALE_TYPE_UNSPECIFIED, ScaleType.UNIT_LINEAR_SCALE]
    assert study.parameters[0].bounds() == (0.0, 0.1)
    assert study.algorithm is Algorithm.RANDOM_SEARCH
    assert study.measurement_selection is MeasurementSelection.BEST_MEASUREMENT
    assert (study.stopping.kind, study.stopping.max_step_count, study.stopping.update_all_stopped_trials) == (
        Stop.CONVEX, 100, True)
    assert [p.type for p in study.all_parameters()] == [
        ParameterType.DOUBLE, ParameterType.DOUBLE, ParameterType.INTEGER, ParameterType.DISCRETE,
        ParameterType.DOUBLE, ParameterType.CATEGORICAL, ParameterType.DOUBLE, ParameterType.DISCRETE]
    carried = dict(job.carried)  # enums by name, in the REST body's canonical form
    assert carried["trialJobSpec.scheduling.strategy"] == '"SPOT"'
    assert carried["studySpec.observationNoise"] == '"HIGH"'
    assert json.loads(carried["trialJobSpec.workerPoolSpecs[0].machineSpec.reservationAffinity"])[
        "reservationAffinityType"] == "SPECIFIC_RESERVATION"
    assert carried["studySpec.parameters[2].integerValueSpec.defaultValue"] == '"2"'


def test_the_sdk_built_job_of_the_distributed_notebook_validates(tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    """The high-level SDK (``aiplatform.HyperparameterTuningJob``) builds the request offline."""
    aiplatform = pytest.importorskip("google.cloud.aiplatform")
    hpt = pytest.importorskip("google.cloud.aiplatform.hyperparameter_tuning")
    credentials = pytest.importorskip("google.auth.credentials").AnonymousCredentials()
    where = {"project": "p", "location": "us-central1", "credentials": credentials}
    custom = aiplatform.CustomJob(
        display_name="trainer", base_output_dir="gs://b/out", staging_bucket="gs://b/staging",
        worker_pool_specs=[
            {"machine_spec": {"machine_type": "n1-standard-4", "accelerator_type": "NVIDIA_TESLA_T4",
                              "accelerator_count": 1},
             "replica_count": 1, "container_spec": {"image_uri": IMAGE, "args": ["--epochs=3"]}},
            {"machine_spec": {"machine_type": "n1-standard-4"}, "replica_count": 2,
             "container_spec": {"image_uri": IMAGE}}], **where)
    job = aiplatform.HyperparameterTuningJob(
        display_name="notebook", custom_job=custom, metric_spec={"accuracy": "maximize"},
        parameter_spec={"lr": hpt.DoubleParameterSpec(min=0, max=1, scale="linear"),
                        "units": hpt.IntegerParameterSpec(min=0, max=64, scale="linear")},
        max_trial_count=4, parallel_trial_count=2, **where)
    body = json_format.MessageToJson(job._gca_resource._pb, use_integers_for_enums=True)
    assert '"acceleratorType": 5' in body and '"minValue"' not in body
    path = tmp_path / "notebook.json"
    path.write_text(body)
    assert main(["validate", str(path)]) == 0, capsys.readouterr().err
    model = load_spec(path)
    assert model.study.parameters[0].bounds() == (0.0, 1.0)
    assert model.study.selects_best  # the SDK sends BEST_MEASUREMENT
    assert [p.replica_count for p in model.trial_job.worker_pools] == [1, 2]
    assert _as_message(export_text(model, "rest-json")) == _as_message(body)
