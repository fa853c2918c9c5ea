"""What the container backend asks the runtime for (pure: no runtime runs), and its one-line errors."""

from __future__ import annotations

import pytest

from trials.controller.backend.protocol import ReplicaStart
from trials.controller.container import runtime as rt
from trials.controller.container.backend import ContainerBackend
from trials.errors import ConfigError

PODMAN = rt.Runtime(name="podman", program="/usr/bin/podman", global_args=("--runtime", "runc"))


def backend(tmp_path, **kw):
    return ContainerBackend(runtime=kw.pop("runtime", PODMAN), job_dir=str(tmp_path / "job"),
                            gcs_root=str(tmp_path / "gcs"), environ={"PATH": "/usr/bin", "SECRET": "s"}, **kw)


def request(tmp_path, **kw):
    base = dict(argv=(), env={"CLOUD_ML_TRIAL_ID": "3", "CLOUD_ML_JOB_ID": "j", "TRIALS_ATTEMPT": "1",
                              "AIP_MODEL_DIR": "gs://b/run/3/model/"},
                cwd="/launch", name="workerpool0-0", label="workerpool0-0", trial_dir=str(tmp_path / "job" / "3"),
                stdout_path="o", stderr_path="e", image="us-docker.pkg.dev/p/r/t:1", args=("--epochs=2", "--x=0.5"))
    base.update(kw)
    return ReplicaStart(**base)


def option(args, name):
    return [args[i + 1] for i, a in enumerate(args) if a == name]


def test_the_image_runs_its_entrypoint_with_the_args_then_the_flags(tmp_path):
    args = backend(tmp_path).run_args(request(tmp_path), "c1")
    assert args[:4] == ["run", "--rm", "--name", "c1"] and "--replace" in args and "--entrypoint" not in args
    assert args[-4:] == ["--", "us-docker.pkg.dev/p/r/t:1", "--epochs=2", "--x=0.5"]
    env = dict(e.split("=", 1) for e in option(args, "--env"))
    assert env["TRIALS_GCS_ROOT"] == "/gcs" and env["CLOUD_ML_TRIAL_ID"] == "3"
    assert "SECRET" not in env and "PATH" not in env  # nothing of the host's: the image's own PATH
    volumes = option(args, "--volume")
    assert f"{tmp_path / 'gcs'}:/gcs" in volumes and f"{tmp_path / 'job' / '3'}:{tmp_path / 'job' / '3'}" in volumes
    labels = dict(v.split("=", 1) for v in option(args, "--label"))
    assert labels["trials.trial"] == "3" and labels["trials.attempt"] == "1"
    assert labels["trials.replica"] == "workerpool0-0"
    assert labels["trials.job_dir"] == str(tmp_path / "job")


def test_a_command_replaces_the_entrypoint_and_a_local_image_stands_in(tmp_path):
    b = backend(tmp_path, images={"us-docker.pkg.dev/p/r/t:1": "localhost/t:1"}, pass_env=("SECRET",))
    args = b.run_args(request(tmp_path, entrypoint=("python", "-m", "task"), memory_limit_mb=64), "c1")
    i = args.index("--entrypoint=python")
    assert args[i:] == ["--entrypoint=python", "--", "localhost/t:1", "-m", "task", "--epochs=2", "--x=0.5"]
    assert option(args, "--memory") == ["64m"] and option(args, "--memory-swap") == ["64m"]
    assert "SECRET=s" in option(args, "--env")  # passed on purpose


def test_a_python_package_is_installed_before_its_module_runs(tmp_path):
    sdist = tmp_path / "pkg-1.tar.gz"
    args = backend(tmp_path).run_args(request(tmp_path, entrypoint=("python3", "-m", "pkg.task"),
                                              package_uris=("gs://b/pkg.tar.gz", str(sdist))), "c1")
    i = args.index("--entrypoint=python3")
    assert args[i + 1:i + 3] == ["--", "us-docker.pkg.dev/p/r/t:1"] and args[i + 3] == "-c"
    assert args[i + 5:] == ["2", "/gcs/b/pkg.tar.gz", "/trials-packages/1/pkg-1.tar.gz", "pkg.task", "--epochs=2",
                            "--x=0.5"]
    assert f"{sdist}:/trials-packages/1/pkg-1.tar.gz:ro" in option(args, "--volume")


def test_a_trial_runs_on_its_own_network_never_the_hosts(tmp_path):
    from trials.controller.container.network import TrialNetwork, endpoint_host

    net = TrialNetwork(name="trials-n-net0", gateway="10.89.3.1", keeper="trials-n-keeper0")
    one = backend(tmp_path).run_args(request(tmp_path), "c1", net)
    assert option(one, "--network") == [] and "--network=container:trials-n-keeper0" in one  # the keeper's
    assert not any("host" in a for a in one if a.startswith("--net"))
    cluster = '{"cluster": {"workerpool0": ["workerpool0-0:2222"], "workerpool1": ["workerpool1-0:2222"]}}'
    two = backend(tmp_path).run_args(request(tmp_path, name="workerpool1-0", env={
        "CLOUD_ML_TRIAL_ID": "3", "CLUSTER_SPEC": cluster}), "c2", net)
    assert [a for a in two if a.startswith(("--network", "--hostname"))] == \
        ["--network=trials-n-net0", "--network-alias=workerpool1-0", "--hostname=workerpool1-0"]
    without_keeper = TrialNetwork(name="trials-n-net0", gateway="10.89.3.1")
    assert "--network=trials-n-net0" in backend(tmp_path).run_args(request(tmp_path), "c1", without_keeper)
    assert "STORAGE_EMULATOR_HOST" not in "".join(option(one, "--env"))  # no endpoint on this one
    assert endpoint_host("10.89.3.1", 4443) == "http://10.89.3.1:4443"
    assert endpoint_host("fd00::1", 4443) == "http://[fd00::1]:4443"


def test_gpus_are_cdi_devices_for_podman_and_gpus_for_docker(tmp_path):
    args = backend(tmp_path).run_args(request(tmp_path, devices=("0", "2")), "c")
    assert option(args, "--device") == ["nvidia.com/gpu=0", "nvidia.com/gpu=2"]
    docker = rt.Runtime(name="docker", program="/usr/bin/docker")
    assert option(backend(tmp_path, runtime=docker).run_args(request(tmp_path, devices=("1",)), "c"),
                  "--gpus") == ['"device=1"']


def test_image_map_runtime_choice_and_known_failures():
    assert rt.parse_image_map(["a/b:1=localhost/b:1"]) == {"a/b:1": "localhost/b:1"}
    with pytest.raises(ConfigError, match="expected URI=LOCAL_IMAGE"):
        rt.parse_image_map(["a/b:1"])
    with pytest.raises(ConfigError, match="expected one of host, podman, docker"):
        rt.choose("kubernetes")
    assert rt.choose("host") == "host"
    fix = PODMAN.fix_for("Error: runc create failed: error setting rlimits for ready process: operation not permitted")
    assert fix is not None and "default_ulimits = []" in fix and "CONTAINERS_CONF" in fix
    fix = PODMAN.fix_for("crun: cgroups in hybrid mode not supported, drop all controllers from cgroupv2")
    assert fix is not None and "--runtime runc" in fix
    assert PODMAN.fix_for("some other error") is None
    with pytest.raises(ConfigError, match="expected one of host, podman, docker, got 'nosuch'"):
        rt.find("nosuch")
    with pytest.raises(rt.RuntimeUnavailable, match="podman is not installed on this machine"):
        rt.find("podman", {"PATH": "/nonexistent"})


def test_container_names_differ_per_job_trial_replica_and_attempt(tmp_path):
    names = {rt.container_name(str(tmp_path / j), t, r, a) for j in ("a", "b") for t in ("1", "2")
             for r in ("workerpool0-0", "workerpool1-0") for a in (0, 1)}
    assert len(names) == 16 and all(n.startswith("trials-") for n in names)


def test_validate_shows_the_container_a_trial_runs_as_and_no_host_variable(tmp_path, capsys, monkeypatch):
    from trials.cli import main

    monkeypatch.setenv("HOST_ONLY_SENTINEL", "1")
    spec = tmp_path / "spec.yaml"
    spec.write_text("studySpec:\n  metrics: [{metricId: m, goal: MAXIMIZE}]\n"
                    "  parameters: [{parameterId: x, doubleValueSpec: {minValue: 0.1, maxValue: 0.9}}]\n"
                    "trialJobSpec:\n  workerPoolSpecs:\n"
                    "  - {machineSpec: {machineType: n1-standard-4}, replicaCount: 1,"
                    " containerSpec: {imageUri: 'us-docker.pkg.dev/p/r/t:1', args: [--epochs=2]}}\n")
    image = ["--image", "us-docker.pkg.dev/p/r/t:1=localhost/t:1"]
    assert main(["validate", str(spec), "--runtime", "podman", *image]) == 0
    out = capsys.readouterr().out
    assert "runs as a podman container of us-docker.pkg.dev/p/r/t:1 (the local image localhost/t:1): its own " \
           "ENTRYPOINT, with --epochs=2 --x=0.5" in out
    assert "TRIALS_GCS_ROOT=/gcs" in out and "nothing of this host's environment" in out
    assert "HOST_ONLY_SENTINEL" not in out and "(no AIP_MODEL_DIR" in out
    assert main(["validate", str(spec)]) == 0  # the host runtime: an image without command is a note
    assert "note:" in capsys.readouterr().out


def test_a_runtime_that_fails_us_is_an_internal_error_not_the_trainers(tmp_path):
    from trials.controller.backend.protocol import BackendError

    for name in ("podman", "docker"):
        gone = rt.Runtime(name=name, program=str(tmp_path / "no-such-runtime"))
        with pytest.raises(BackendError, match="replica workerpool0-0"):
            backend(tmp_path, runtime=gone).start(request(tmp_path, stdout_path=str(tmp_path / "o"),
                                                          stderr_path=str(tmp_path / "e")))


def test_a_loopback_endpoint_passed_on_purpose_is_named_unreachable(tmp_path):
    from trials.controller.container.backend import is_loopback_url

    assert is_loopback_url("http://127.0.0.1:9023") and is_loopback_url("localhost:9023")
    assert is_loopback_url("http://[::1]:80") and not is_loopback_url("http://10.89.0.1:9023")
    assert not is_loopback_url("http://storage.example:443") and not is_loopback_url("::garbage")
    said = []
    b = ContainerBackend(runtime=rt.Runtime(name="podman", program=str(tmp_path / "none")), job_dir=str(tmp_path),
                         gcs_root=str(tmp_path / "gcs"), pass_env=("STORAGE_EMULATOR_HOST",),
                         environ={"STORAGE_EMULATOR_HOST": "http://127.0.0.1:9023"})
    assert b.endpoint_root(said.append) is None
    assert len(said) == 1 and "cannot reach from their own network" in said[0]
