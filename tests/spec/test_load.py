"""Loading the four spec forms into the job model."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from trials.errors import SpecError
from trials.spec import (
    Algorithm,
    ContainerSpec,
    EnvVar,
    Goal,
    LocalOptions,
    MeasurementSelection,
    ParameterType,
    PythonPackageSpec,
    ScaleType,
    StoppingKind,
    schema,
)
from trials.spec.carried import OUTPUT_KEYS
from trials.spec.legacy import DEFAULT_METRIC_TAG
from trials.spec.load import load_spec, loads_spec, parse_spec
from trials.spec.model import LOCAL_IMAGE_URI
from trials.spec.vertex import IGNORED_KEYS

SPECS = Path(__file__).parents[1] / "data" / "specs"
SAME_JOB = sorted(SPECS.glob("same_job.*"))


def test_the_four_forms_of_one_job_load_to_equal_models() -> None:
    assert {p.name.split(".")[1] for p in SAME_JOB} == {"gcloud", "rest", "legacy", "short"}
    jobs = {p.name: load_spec(p) for p in SAME_JOB}
    first = jobs["same_job.gcloud.yaml"]
    for name, job in jobs.items():
        if name == "same_job.short.yaml":  # the short form has no serviceAccount
            assert job.carried == ()
            job = replace(job, carried=first.carried)
        assert job == first, name
    assert first.carried == (("trialJobSpec.serviceAccount",
                              '"trainer@my-project.iam.gserviceaccount.com"'),)
    # and the model holds what the files say
    assert first.display_name == "digits-mlp"
    assert first.labels == (("purpose", "test"), ("team", "ml"))
    assert (first.max_trial_count, first.parallel_trial_count, first.max_failed_trial_count) == (
        12, 3, 2)
    study = first.study
    assert study.metrics[0].metric_id == "val_loss" and study.metrics[0].goal is Goal.MINIMIZE
    assert [p.type for p in study.parameters] == [
        ParameterType.DOUBLE, ParameterType.INTEGER, ParameterType.DISCRETE,
        ParameterType.CATEGORICAL]
    lr, n_layers, batch, act = study.parameters
    assert (lr.min_value, lr.max_value, lr.scale_type) == (0.0001, 0.1, ScaleType.UNIT_LOG_SCALE)
    assert isinstance(n_layers.min_value, int) and n_layers.max_value == 4
    assert batch.values == (16.0, 32.0, 64.0) and batch.scale_type is ScaleType.SCALE_TYPE_UNSPECIFIED
    assert act.values == ("relu", "tanh")
    assert study.algorithm is Algorithm.RANDOM_SEARCH
    assert study.stopping is not None and study.stopping.kind is StoppingKind.MEDIAN
    pool = first.trial_job.worker_pools[0]
    assert pool.machine_spec.machine_type == "n1-standard-4"
    assert pool.python_package == PythonPackageSpec(
        executor_image_uri="us-docker.pkg.dev/vertex-ai/training/sklearn-cpu.1-0:latest",
        python_module="trainer.task", package_uris=("gs://my-bucket/trainer-0.1.tar.gz",),
        args=("--epochs=5", "--data=gs://my-bucket/digits", "--job-dir", "gs://my-bucket/hpt/digits-mlp/"))
    assert first.trial_job.base_output_directory == "gs://my-bucket/hpt/digits-mlp/"


def test_full_gcloud_spec_maps_every_field() -> None:
    job = load_spec(SPECS / "full.gcloud.yaml")
    study = job.study
    assert study.metrics[0].goal is Goal.GOAL_TYPE_UNSPECIFIED and study.metrics[0].maximize
    assert study.measurement_selection is MeasurementSelection.LAST_MEASUREMENT
    depth = study.parameter("depth")
    assert [c.parent_values for c in depth.conditionals] == [(1, 2), (3, 4, 5, 6)]
    assert [c.parameter.values for c in depth.conditionals] == [(8.0, 16.0), (32.0, 64.0, 128.0)]
    momentum = study.parameter("momentum")
    assert momentum.conditionals[0].parent_values == (0.9, 0.99)
    assert momentum.conditionals[0].parameter.parameter_id == "dampening"
    assert [p.parameter_id for p in study.all_parameters()] == [
        "lr", "depth", "width", "width", "optimizer", "momentum", "dampening"]
    stop = study.stopping
    assert stop is not None and stop.kind is StoppingKind.CONVEX
    assert (stop.max_step_count, stop.min_step_count, stop.min_measurement_count) == (100, 10, 5)
    assert stop.learning_rate_parameter_name == "lr" and stop.update_all_stopped_trials is True
    pools = job.trial_job.worker_pools
    assert pools[1] is None and pools[2].replica_count == 2
    first = pools[0]
    assert first.machine_spec.accelerator_type == "NVIDIA_TESLA_T4"
    assert first.machine_spec.accelerator_count == 1
    assert first.disk_spec == (("bootDiskType", "pd-ssd"), ("bootDiskSizeGb", 200))
    assert first.container == ContainerSpec(
        image_uri=LOCAL_IMAGE_URI, command=("python", "-m", "trainer.task"), args=("--epochs=3",),
        env=(EnvVar(name="DATA_DIR", value="/gcs/my-bucket/data"), EnvVar(name="EMPTY", value="")))
    assert job.trial_job.scheduling.timeout_s == 1.5
    assert job.trial_job.scheduling.restart_job_on_worker_restart is True
    assert job.local == LocalOptions(inject_restarts=0.25, grace_period_s=30.0,
                                     memory_limit_mb=2048)


MINIMAL = {"studySpec": {"metrics": [{"metricId": "m"}],
                         "parameters": [{"parameterId": "n", "integerValueSpec": {
                             "minValue": "1", "maxValue": "9007199254740993"}}]}}


def test_rest_int64_strings_and_enum_numbers_are_accepted() -> None:
    doc = json.loads(json.dumps(MINIMAL))
    doc["studySpec"]["metrics"][0]["goal"] = 2
    doc["studySpec"]["algorithm"] = 3
    doc["studySpec"]["parameters"][0]["scaleType"] = 1
    job = parse_spec(doc, source="rest")
    p = job.study.parameters[0]
    assert (p.min_value, p.max_value) == (1, 9007199254740993)  # exact, no float rounding
    assert job.study.metrics[0].goal is Goal.MINIMIZE
    assert job.study.algorithm is Algorithm.RANDOM_SEARCH
    assert p.scale_type is ScaleType.UNIT_LINEAR_SCALE


def test_counts_default_to_one_as_gcloud_does_and_goal_stays_unspecified() -> None:
    job = parse_spec(MINIMAL, source="x")
    assert (job.max_trial_count, job.parallel_trial_count, job.max_failed_trial_count) == (1, 1, 0)
    assert job.study.metrics[0].goal is Goal.GOAL_TYPE_UNSPECIFIED
    assert job.trial_job is None and job.display_name is None


def _sample(field: schema.Field) -> object:
    """A value of the field's kind that is not its default (so proto3 JSON keeps it)."""
    one: object = {"string": "x", "bool": True, "int32": 2, "int64": "2", "double": 0.5,
                   "duration": "60s", "timestamp": "2030-01-01T00:00:00Z", "message": {},
                   "enum": next((n for n, v in schema.ENUMS.get(field.ref, {}).items() if v), "")
                   }[field.kind]
    return [one] if field.repeated else one


def _carry(keys: frozenset[str], message: str) -> dict[str, object]:
    return {key: _sample(schema.MESSAGES[message][key]) for key in keys}


def test_every_ignored_vertex_key_is_accepted_and_carried() -> None:
    doc = _carry(IGNORED_KEYS["job"] - OUTPUT_KEYS, "HyperparameterTuningJob")
    study = {"metrics": [{"metricId": "m"}, {"metricId": "s", "safetyConfig": {}}],
             "parameters": [{"parameterId": "x", "doubleValueSpec": {
                 "minValue": 0, "maxValue": 1,
                 **_carry(IGNORED_KEYS["valueSpec"], "StudySpec.ParameterSpec.DoubleValueSpec")}}],
             **_carry(IGNORED_KEYS["studySpec"], "StudySpec")}
    pool = {"containerSpec": {"imageUri": "img"},
            "machineSpec": {"machineType": "m", **_carry(IGNORED_KEYS["machineSpec"], "MachineSpec")},
            **_carry(IGNORED_KEYS["workerPoolSpec"], "WorkerPoolSpec")}
    trial = {"workerPoolSpecs": [pool],
             "scheduling": _carry(IGNORED_KEYS["scheduling"], "Scheduling"),
             **_carry(IGNORED_KEYS["trialJobSpec"], "CustomJobSpec")}
    outputs = {key: None for key in OUTPUT_KEYS}  # output-only fields are dropped
    job = parse_spec({**doc, **outputs, "studySpec": study, "trialJobSpec": trial}, source="x")
    assert job.trial_job.worker_pools[0].container == ContainerSpec(image_uri="img")
    n_carried = sum(len(IGNORED_KEYS[k]) for k in IGNORED_KEYS) - len(OUTPUT_KEYS)
    assert len(job.carried) == n_carried


def test_file_without_known_suffix_tries_json_then_yaml(tmp_path: Path) -> None:
    as_json = tmp_path / "spec.txt"
    as_json.write_text(json.dumps(MINIMAL))
    as_yaml = tmp_path / "spec.conf"
    as_yaml.write_text("metrics: {m: minimize}\nparameters: {x: {type: integer, min: 1, max: 2}}\n")
    assert load_spec(as_json).study.parameters[0].parameter_id == "n"
    assert load_spec(as_yaml).study.metrics[0].goal is Goal.MINIMIZE


def test_yaml_exponent_without_dot_is_a_number() -> None:
    job = loads_spec("metrics: {m: maximize}\nparameters:\n  lr: {type: double, min: 1e-5, "
                     "max: 1e-1, scale: log}\n")
    assert job.study.parameters[0].min_value == 1e-5


def test_durations() -> None:
    def timeout(text: str) -> float | None:
        doc = {**MINIMAL, "trialJobSpec": {"workerPoolSpecs": [{"containerSpec": {
            "imageUri": "i"}}], "scheduling": {"timeout": text}}}
        return parse_spec(doc, source="x").trial_job.scheduling.timeout_s

    assert timeout("3600s") == 3600.0
    assert timeout("1.5s") == 1.5
    assert timeout("0.000000001s") == 1e-9


def test_legacy_defaults_and_worker_pools() -> None:
    job = loads_spec("""
trainingInput:
  masterType: n1-highmem-8
  masterConfig: {imageUri: gcr.io/p/trainer, acceleratorConfig: {count: 2, type: NVIDIA_TESLA_V100}}
  workerType: n1-standard-4
  workerCount: 3
  evaluatorCount: 1
  args: [--x=1]
  hyperparameters:
    params:
    - {parameterName: n, type: INTEGER, minValue: 1, maxValue: 3, scaleType: NONE}
""")
    assert job.study.metrics[0].metric_id == DEFAULT_METRIC_TAG
    assert job.study.metrics[0].goal is Goal.GOAL_TYPE_UNSPECIFIED
    assert job.study.parameters[0].scale_type is ScaleType.SCALE_TYPE_UNSPECIFIED
    assert (job.max_trial_count, job.parallel_trial_count) == (1, 1)
    master, worker, ps, evaluator = job.trial_job.worker_pools
    assert master.container == ContainerSpec(image_uri="gcr.io/p/trainer", args=("--x=1",))
    assert master.machine_spec.accelerator_count == 2
    assert worker.replica_count == 3 and worker.machine_spec.machine_type == "n1-standard-4"
    assert ps is None and evaluator.replica_count == 1


def test_legacy_python_module_without_image_runs_locally() -> None:
    job = load_spec(Path(__file__).parents[2] / "search_spaces" / "legacy_hptuning_config.yaml")
    pkg = job.trial_job.worker_pools[0].python_package
    assert pkg.executor_image_uri == LOCAL_IMAGE_URI and pkg.python_module == "examples.digits_mlp.train"


def test_short_form_trial_job_env_timeout_and_local_options() -> None:
    job = loads_spec("""
metrics: {acc: maximize}
parameters:
  k: {type: integer, min: 1, max: 3}
command: [python, train.py]
args: [--epochs=2]
env: {OMP_NUM_THREADS: 1, MODE: fast}
timeout: 90
base_output_dir: out/
replica_count: 2
local: {inject_restarts: 0.5, grace_period: 5s, memory_limit_mb: 512}
""")
    pool = job.trial_job.worker_pools[0]
    assert pool.container == ContainerSpec(
        image_uri=LOCAL_IMAGE_URI, command=("python", "train.py"), args=("--epochs=2",),
        env=(EnvVar(name="OMP_NUM_THREADS", value="1"), EnvVar(name="MODE", value="fast")))
    assert pool.replica_count == 2
    assert job.trial_job.scheduling.timeout_s == 90.0
    assert job.trial_job.base_output_directory == "out/"
    assert job.local == LocalOptions(inject_restarts=0.5, grace_period_s=5.0, memory_limit_mb=512)


def test_short_form_conditionals_nest() -> None:
    job = load_spec(Path(__file__).parents[2] / "search_spaces" / "conditional.yaml")
    optimizer = job.study.parameter("optimizer")
    by_child = {c.parameter.parameter_id: c.parent_values for c in optimizer.conditionals}
    assert by_child == {"momentum": ("sgd",), "beta1": ("adam",)}
    momentum = job.study.parameter("momentum")
    assert momentum.conditionals[0].parent_values == (0.9, 0.99)
    active = job.study.active_parameters({"optimizer": "sgd", "momentum": 0.9})
    assert [p.parameter_id for p in active] == [
        "learning_rate", "n_layers", "optimizer", "momentum", "nesterov"]


def test_same_id_children_with_disjoint_conditions_are_allowed() -> None:
    job = loads_spec("""
metrics: {acc: maximize}
parameters:
  kind:
    type: categorical
    values: [a, b]
    when:
    - values: [a]
      parameters: {size: {type: integer, min: 1, max: 2}}
    - values: [b]
      parameters: {size: {type: integer, min: 10, max: 20}}
""")
    sizes = [c.parameter.max_value for c in job.study.parameter("kind").conditionals]
    assert sizes == [2, 20]


def test_a_legacy_metric_tag_may_hold_whitespace_and_job_dir_becomes_an_argument() -> None:
    job = loads_spec(
        "trainingInput:\n  pythonModule: trainer.task\n  args: [--epochs=1]\n  jobDir: gs://b/taxi\n"
        "  hyperparameters:\n    hyperparameterMetricTag: Taxi Model Accuracy\n"
        "    params: [{parameterName: x, type: DOUBLE, minValue: 0, maxValue: 1}]\n")
    assert job.study.metrics[0].metric_id == "Taxi Model Accuracy"
    pool = job.trial_job.worker_pools[0]
    assert pool.python_package.args == ("--epochs=1", "--job-dir", "gs://b/taxi")
    assert job.trial_job.base_output_directory == "gs://b/taxi"
    with pytest.raises(SpecError, match="without whitespace"):  # Vertex's metricId rule stays
        loads_spec("studySpec: {metrics: [{metricId: a b}], parameters: "
                   "[{parameterId: x, doubleValueSpec: {minValue: 0, maxValue: 1}}]}\n")
