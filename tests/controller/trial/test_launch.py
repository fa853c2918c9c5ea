"""What a trial's replicas get: flags, env contract, $(VAR) expansion, cluster variables."""

import json
import sys

import pytest

from trials.controller.trial import launch
from trials.errors import ConfigError
from trials.spec import (
    ConditionalParameterSpec,
    ContainerSpec,
    EnvVar,
    JobSpec,
    MetricSpec,
    ParameterSpec,
    ParameterType,
    PythonPackageSpec,
    StudySpec,
    TrialJobSpec,
    WorkerPoolSpec,
)

OPT = ParameterSpec(
    parameter_id="optimizer", type=ParameterType.CATEGORICAL, values=("adam", "sgd"),
    conditionals=(ConditionalParameterSpec(
        parent_values=("sgd",),
        parameter=ParameterSpec(parameter_id="momentum", type=ParameterType.DOUBLE, min_value=0.0, max_value=0.9)),),
)
STUDY = StudySpec(metrics=(MetricSpec(metric_id="acc"),), parameters=(
    ParameterSpec(parameter_id="lr", type=ParameterType.DOUBLE, min_value=1e-5, max_value=0.1),
    ParameterSpec(parameter_id="units", type=ParameterType.DISCRETE, values=(32.0, 64.0)),
    OPT,
))


def test_flags_in_spec_order_integral_without_dot_and_only_active():
    flags = launch.trial_flags(STUDY, {"lr": 1e-05, "units": 64.0, "optimizer": "adam"})
    assert flags == ["--lr=1e-05", "--units=64", "--optimizer=adam"]
    flags = launch.trial_flags(STUDY, {"lr": 0.5, "units": 32, "optimizer": "sgd", "momentum": 0.9})
    assert flags == ["--lr=0.5", "--units=32", "--optimizer=sgd", "--momentum=0.9"]


def test_env_expansion_rules():
    entries = (EnvVar(name="A", value="x"), EnvVar(name="B", value="$(A)-$(CLOUD_ML_TRIAL_ID)"),
               EnvVar(name="C", value="$$(A) $(NOPE)"))
    out = launch.expand_env(entries, {"CLOUD_ML_TRIAL_ID": "7"})
    assert out == {"A": "x", "B": "x-7", "C": "$(A) $(NOPE)"}


def _job(pools, study=STUDY, base="/out"):
    return JobSpec(study=study, trial_job=TrialJobSpec(worker_pools=pools, base_output_directory=base))


def _build(job, local=None, n=1):
    paths = launch.trial_paths("/jobs/j", job.trial_job.base_output_directory, "3")
    return launch.build_replicas(job=job, job_id="j", trial_id="3",
                                 params={"lr": 0.01, "units": 32.0, "optimizer": "adam"},
                                 paths=paths, project_number="123", local_command=local,
                                 base_env={"PATH": "/bin", "HOME": "/h"}, ports=list(range(5000, 5000 + n)),
                                 gcs_root="/g")


def test_single_replica_env_contract():
    pool = WorkerPoolSpec(container=ContainerSpec(image_uri="img", command=("python", "t.py"), args=("--epochs=3",),
                                                  env=(EnvVar(name="DATA", value="$(AIP_MODEL_DIR)data"),)))
    (r,) = _build(_job((pool,)))
    assert r.argv == (sys.executable, "t.py", "--epochs=3", "--lr=0.01", "--units=32", "--optimizer=adam")
    env = r.env
    assert env["CLOUD_ML_TRIAL_ID"] == "3" and env["CLOUD_ML_JOB_ID"] == "j" and env["CLOUD_ML_PROJECT_ID"] == "123"
    assert env["AIP_MODEL_DIR"] == "/out/3/model/" and env["AIP_CHECKPOINT_DIR"] == "/out/3/checkpoints/"
    assert env["AIP_TENSORBOARD_LOG_DIR"] == "/out/3/logs/"
    assert env["CLOUD_ML_HP_METRIC_FILE"].startswith("/jobs/j/3/")
    assert env["DATA"] == "/out/3/model/data"
    assert "TF_CONFIG" not in env and "MASTER_ADDR" not in env  # single replica: not set (as on Vertex)
    spec = json.loads(env["CLUSTER_SPEC"])
    assert spec["task"] == {"type": "workerpool0", "index": 0, "trial": "3"}
    assert env["PATH"] == "/bin"


def test_aip_dirs_only_with_a_base_output_directory_and_cluster_spec_job_shows_the_trial_base():
    pool = WorkerPoolSpec(container=ContainerSpec(image_uri="img", command=("t",),
                                                  env=(EnvVar(name="DATA", value="$(AIP_MODEL_DIR)data"),)))
    (r,) = _build(_job((pool,), base=None))
    assert not {"AIP_MODEL_DIR", "AIP_CHECKPOINT_DIR", "AIP_TENSORBOARD_LOG_DIR"} & set(r.env)  # as on Vertex
    assert r.env["DATA"] == "$(AIP_MODEL_DIR)data"  # unresolved: stays as written
    paths = launch.trial_paths("/jobs/j", "/out", "3")
    (r,) = launch.build_replicas(job=_job((pool,)), job_id="j", trial_id="3", params={}, paths=paths,
                                 project_number="1", local_command=None, base_env={}, ports=[5000],
                                 gcs_root="/g", job_spec_rest={"workerPoolSpecs": [{}],
                                                               "baseOutputDirectory": {"outputUriPrefix": "/out"}})
    job = json.loads(r.env["CLUSTER_SPEC"])["job"]
    # the trial's CustomJob has <base>/<trial id>/ as its base: the AIP_* dirs are under it
    assert job["baseOutputDirectory"] == {"outputUriPrefix": "/out/3/"}
    assert r.env["AIP_MODEL_DIR"] == "/out/3/model/"


def test_multi_replica_cluster_vars():
    pools = (WorkerPoolSpec(container=ContainerSpec(image_uri="i", command=("t",))), None,
             WorkerPoolSpec(replica_count=2, container=ContainerSpec(image_uri="i", command=("t",))))
    job = _job((pools[0], WorkerPoolSpec(replica_count=2, container=ContainerSpec(image_uri="i", command=("t",)))))
    replicas = _build(job, n=3)
    assert [r.name for r in replicas] == ["workerpool0-0", "workerpool1-0", "workerpool1-1"]
    assert [r.env["RANK"] for r in replicas] == ["0", "1", "2"]
    assert {r.env["WORLD_SIZE"] for r in replicas} == {"3"}
    assert {r.env["MASTER_PORT"] for r in replicas} == {"5000"}
    tf = json.loads(replicas[2].env["TF_CONFIG"])
    assert tf["cluster"] == {"chief": ["127.0.0.1:5000"], "worker": ["127.0.0.1:5001", "127.0.0.1:5002"]}
    assert tf["task"] == {"type": "worker", "index": 1, "trial": "3"}
    assert replicas[0].is_primary and not replicas[1].is_primary
    assert replicas[1].metric_file != replicas[0].metric_file


def test_skipped_pool_keeps_pool_numbers():
    pools = (WorkerPoolSpec(container=ContainerSpec(image_uri="i", command=("t",))), None,
             WorkerPoolSpec(container=ContainerSpec(image_uri="i", command=("t",))))
    replicas = _build(_job(pools), n=2)
    assert [r.name for r in replicas] == ["workerpool0-0", "workerpool2-0"]
    assert json.loads(replicas[1].env["TF_CONFIG"])["task"]["type"] == "ps"


def test_python_package_runs_module_and_local_command_overrides():
    pool = WorkerPoolSpec(python_package=PythonPackageSpec(executor_image_uri="e", python_module="pkg.train",
                                                           args=("--a=1",)))
    (r,) = _build(_job((pool,)))
    assert r.argv[:3] == (sys.executable, "-m", "pkg.train")
    (r,) = _build(_job((pool,)), local=["./run.sh", "x"])
    assert r.argv[:3] == ("./run.sh", "x", "--a=1")


def test_image_without_command_needs_a_local_command():
    pool = WorkerPoolSpec(container=ContainerSpec(image_uri="gcr.io/p/t"))
    with pytest.raises(ConfigError, match="give the command after --"):
        _build(_job((pool,)))


def test_inherited_vertex_vars_are_scrubbed():
    env = launch.clean_base_env({"PATH": "/bin", "CLOUD_ML_TRIAL_ID": "9", "AIP_MODEL_DIR": "x", "TF_CONFIG": "{}",
                                 "TRIALS_STOP_FILE": "s", "HOME": "/h"})
    assert env == {"PATH": "/bin", "HOME": "/h"}


def test_values_pass_verbatim_as_one_token():
    study = StudySpec(metrics=(MetricSpec(metric_id="a"),), parameters=(
        ParameterSpec(parameter_id="name", type=ParameterType.CATEGORICAL, values=("$(rm -rf ~); reboot\nx",)),))
    assert launch.trial_flags(study, {"name": "$(rm -rf ~); reboot\nx"}) == ["--name=$(rm -rf ~); reboot\nx"]


def test_the_host_cloud_identity_is_withheld_unless_passed():
    host = {"PATH": "/bin", "GOOGLE_CLOUD_PROJECT": "p", "GOOGLE_APPLICATION_CREDENTIALS": "/k.json",
            "CLOUDSDK_CONFIG": "/c", "AWS_PROFILE": "a", "BOTO_CONFIG": "/b", "SSH_AUTH_SOCK": "/s",
            "AWS_CA_BUNDLE": "/ca.pem", "LC_ALL": "C", "CUDA_HOME": "/cuda"}
    assert launch.clean_base_env(host) == {"PATH": "/bin", "AWS_CA_BUNDLE": "/ca.pem", "LC_ALL": "C",
                                           "CUDA_HOME": "/cuda"}
    assert launch.clean_base_env(host, ["GOOGLE_CLOUD_PROJECT"])["GOOGLE_CLOUD_PROJECT"] == "p"
    assert launch.withheld_env(host, ["AWS_PROFILE"]) == [
        "BOTO_CONFIG", "CLOUDSDK_CONFIG", "GOOGLE_APPLICATION_CREDENTIALS", "GOOGLE_CLOUD_PROJECT",
        "SSH_AUTH_SOCK"]


def test_pass_env_is_on_every_command_that_starts_trials(monkeypatch, tmp_path):
    from trials.cli import build_parser
    from trials.controller.check import check

    parser = build_parser()
    for argv in (["sweep", "s.yaml"], ["resume", "j"], ["worker", "j"], ["check", "s.yaml"], ["validate", "s.yaml"]):
        args = parser.parse_args([*argv, "--pass-env", "GOOGLE_CLOUD_PROJECT", "--pass-env", "AWS_PROFILE"])
        assert args.pass_env == ["GOOGLE_CLOUD_PROJECT", "AWS_PROFILE"], argv
    monkeypatch.setenv("GOOGLE_CLOUD_PROJECT", "p")
    monkeypatch.setenv("AWS_PROFILE", "a")
    seen = {}
    real = launch.clean_base_env

    def spy(environ, pass_env=()):
        seen["pass_env"] = tuple(pass_env)
        return real(environ, pass_env)

    monkeypatch.setattr(check.launch, "clean_base_env", spy)
    job = _job((WorkerPoolSpec(),))
    started = []

    class Refusing:  # a replica backend that keeps what it was asked to start, and starts nothing
        def open(self, say): pass
        def check_memory(self): pass
        def close(self): pass

        def start(self, request):
            started.append(request)
            raise ConfigError("not started")

    with pytest.raises(ConfigError, match="not started"):
        check.run_check(job, check.CheckOptions(local_command=["python", "t.py"], pass_env=("AWS_PROFILE",),
                                                cwd=str(tmp_path), folder=str(tmp_path / "runs")),
                        backend=Refusing())
    assert seen["pass_env"] == ("AWS_PROFILE",)
    assert started[0].env["AWS_PROFILE"] == "a" and "GOOGLE_CLOUD_PROJECT" not in started[0].env
