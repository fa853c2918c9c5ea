"""Each trial in its real image (`--runtime podman`): real podman, real images, real `trials` processes."""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from containerkit import SPEC_URI, TRAINER, podman_ps, run_trials

pytestmark = pytest.mark.integration

IMAGE_FLAGS = ("--runtime", "podman", "--image", f"{SPEC_URI}={TRAINER}")


def spec(tmp_path: Path, *, args=("--epochs=3",), trials=2, parallel=2, base="gs://bucket/run", pool=None) -> Path:
    container = pool or {"imageUri": SPEC_URI, "args": list(args)}
    body = {
        "studySpec": {"metrics": [{"metricId": "score", "goal": "MAXIMIZE"}],
                      "parameters": [{"parameterId": "x", "doubleValueSpec": {"minValue": 0.1, "maxValue": 0.9}}]},
        "maxTrialCount": trials, "parallelTrialCount": parallel,
        "trialJobSpec": {"workerPoolSpecs": [{"machineSpec": {"machineType": "n1-standard-4"}, "replicaCount": 1,
                                              **({"pythonPackageSpec": pool} if "pythonModule" in (pool or {})
                                                 else {"containerSpec": container})}],
                         **({"baseOutputDirectory": {"outputUriPrefix": base}} if base else {})},
    }
    path = tmp_path / "spec.json"
    path.write_text(json.dumps(body))
    return path


def two_pools(tmp_path: Path, *args: str, trials: int) -> Path:
    """A spec whose trials have two pools of one replica each, every replica running the image with ``args``."""
    pool = {"machineSpec": {"machineType": "n1-standard-4"}, "replicaCount": 1,
            "containerSpec": {"imageUri": SPEC_URI, "args": list(args)}}
    body = json.loads(spec(tmp_path, trials=trials, parallel=trials).read_text())
    body["trialJobSpec"]["workerPoolSpecs"] = [pool, pool]
    path = tmp_path / "two.json"
    path.write_text(json.dumps(body))
    return path


def describe(tmp_path: Path, env, job: str) -> dict:
    out = run_trials("describe", job, "--root", str(tmp_path / "jobs"), "--format", "json", cwd=tmp_path, env=env)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_a_trial_runs_in_its_image_with_its_entrypoint_and_nothing_of_the_host(tmp_path, container_env):
    assert importlib.util.find_spec("onlyhere") is None  # the trainer's dependency is only in the image
    env = {**container_env, "HOST_ONLY_SENTINEL": "1", "GOOGLE_APPLICATION_CREDENTIALS": "/nowhere.json"}
    run = run_trials("sweep", str(spec(tmp_path)), "--root", str(tmp_path / "jobs"), "--job-id", "img",
                     *IMAGE_FLAGS, cwd=tmp_path, env=env)
    assert run.returncode == 0, run.stdout + run.stderr
    job = describe(tmp_path, env, "img")
    assert [t["state"] for t in job["trials"]] == ["SUCCEEDED", "SUCCEEDED"]
    for t in job["trials"]:
        # /gcs in the container is the job's bucket folder on the host
        model = json.loads((tmp_path / "jobs" / "img" / "gcs" / "bucket" / "run" / t["id"] / "model" / "model.json")
                           .read_text())
        x = next(p["value"] for p in t["parameters"])
        assert model["argv"] == ["--epochs=3", f"--x={x!r}"]  # the ENTRYPOINT got the args, then the flags
        assert model["cwd"] == "/app" and model["executable"] == "/opt/venv/bin/python"  # the image's
        assert model["python"] != sys.version
        inside = model["env"]
        assert "HOST_ONLY_SENTINEL" not in inside and "GOOGLE_APPLICATION_CREDENTIALS" not in inside
        assert inside["CLOUD_ML_TRIAL_ID"] == t["id"] and inside["AIP_MODEL_DIR"] == f"gs://bucket/run/{t['id']}/model/"
        assert inside["PATH"].startswith("/opt/venv/bin")  # the image's PATH, not the host's
        assert json.loads(inside["CLUSTER_SPEC"])["task"]["type"] == "workerpool0"
        assert t["finalMeasurement"]["metrics"][0]["value"] == pytest.approx(x * 3 + 0.25)
    assert podman_ps(env, f"trials.job_dir={tmp_path / 'jobs' / 'img'}") == []  # every container removed


def test_docker_runs_the_same_job(tmp_path, docker_env):
    env = {**docker_env, "HOST_ONLY_SENTINEL": "1"}
    run = run_trials("sweep", str(spec(tmp_path)), "--root", str(tmp_path / "jobs"), "--job-id", "dk",
                     "--runtime", "docker", "--image", f"{SPEC_URI}={TRAINER}", cwd=tmp_path, env=env)
    assert run.returncode == 0, run.stdout + run.stderr
    for t in describe(tmp_path, env, "dk")["trials"]:
        assert t["state"] == "SUCCEEDED"
        model = json.loads((tmp_path / "jobs" / "dk" / "gcs" / "bucket" / "run" / t["id"] / "model" / "model.json")
                           .read_text())
        assert model["cwd"] == "/app" and "HOST_ONLY_SENTINEL" not in model["env"]
    listed = subprocess.run(["docker", "ps", "--all", "--filter", f"label=trials.job_dir={tmp_path / 'jobs' / 'dk'}",
                             "--format", "{{.Names}}"], capture_output=True, text=True, env=env)
    assert listed.stdout.split() == []


def test_the_jobs_cloud_storage_endpoint_is_reachable_from_the_container(tmp_path, container_env):
    gcs = tmp_path / "gcs"
    (gcs / "bucket" / "data").mkdir(parents=True)
    for name in ("a.txt", "b.txt"):
        (gcs / "bucket" / "data" / name).write_text(name)
    env = {**container_env, "TRIALS_GCS_EMULATOR": "on"}
    run = run_trials("sweep", str(spec(tmp_path, args=("--mode=gcs",), trials=1, parallel=1)), "--root",
                     str(tmp_path / "jobs"), "--job-id", "gcs", "--gcs-root", str(gcs), "--echo", *IMAGE_FLAGS,
                     cwd=tmp_path, env=env)
    assert run.returncode == 0, run.stdout + run.stderr
    out = (tmp_path / "jobs" / "gcs" / "1" / "workerpool0-0.stdout.log").read_text()
    assert "objects: data/a.txt data/b.txt" in out, out
    assert "[1/workerpool0-0] objects: data/a.txt data/b.txt" in run.stdout  # --echo: the container's output
    # a trial of two replicas, on its own network: the endpoint answers there too (on its gateway)
    run = run_trials("sweep", str(two_pools(tmp_path, "--mode=gcs", trials=1)), "--root", str(tmp_path / "jobs"),
                     "--job-id", "gcs2",
                     "--gcs-root", str(gcs), *IMAGE_FLAGS, cwd=tmp_path, env=env)
    assert run.returncode == 0, run.stdout + run.stderr
    for replica in ("workerpool0-0", "workerpool1-0"):
        out = (tmp_path / "jobs" / "gcs2" / "1" / f"{replica}.stdout.log").read_text()
        assert "objects: data/a.txt data/b.txt" in out, (replica, out)


def test_a_missing_image_or_runtime_is_one_line_before_a_job_folder(tmp_path, container_env):
    run = run_trials("sweep", str(spec(tmp_path)), "--root", str(tmp_path / "jobs"), "--job-id", "none",
                     "--runtime", "podman", cwd=tmp_path, env=container_env)
    assert run.returncode == 2 and not (tmp_path / "jobs").exists()
    assert f"image {SPEC_URI} is not among podman's local images" in run.stderr
    assert f"--image {SPEC_URI}=LOCAL" in run.stderr and len(run.stderr.strip().splitlines()) == 1
    no_path = {**container_env, "PATH": str(Path(sys.executable).parent)}
    run = run_trials("sweep", str(spec(tmp_path)), "--root", str(tmp_path / "jobs"), "--job-id", "none",
                     *IMAGE_FLAGS, cwd=tmp_path, env=no_path)
    assert run.returncode == 2 and "podman is not installed on this machine" in run.stderr
    assert not (tmp_path / "jobs").exists()


def _wait_for(predicate, timeout_s=60.0):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.2)
    return False


def test_cancel_stops_a_container_that_ignores_sigterm_after_the_grace_period(tmp_path, container_env):
    job_dir = tmp_path / "jobs" / "term"
    sweep = subprocess.Popen(
        [sys.executable, "-m", "trials", "sweep", str(spec(tmp_path, args=("--mode=ignore-term", "--sleep=120"),
                                                            trials=1, parallel=1)),
         "--root", str(tmp_path / "jobs"), "--job-id", "term", "--grace-period", "2", *IMAGE_FLAGS],
        cwd=tmp_path, env=container_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert _wait_for(lambda: (job_dir / "1" / "hypertune.metrics").exists()), "the trial never reported"
        started = time.monotonic()
        sweep.send_signal(signal.SIGINT)  # Ctrl-C: the job is cancelled, its trial stopped
        out, err = sweep.communicate(timeout=90)
        took = time.monotonic() - started
    finally:
        sweep.kill()
    assert sweep.returncode == 130, out + err
    assert took >= 2.0  # SIGTERM was ignored: killed after the grace period, not before
    assert podman_ps(container_env, f"trials.job_dir={job_dir}") == []


def test_over_the_memory_limit_the_trial_fails_as_out_of_memory(tmp_path, container_env):
    run = run_trials("sweep", str(spec(tmp_path, args=("--mode=oom",), trials=1, parallel=1)),
                     "--root", str(tmp_path / "jobs"), "--job-id", "oom", "--memory-limit", "96", *IMAGE_FLAGS,
                     cwd=tmp_path, env=container_env)
    (trial,) = describe(tmp_path, container_env, "oom")["trials"]
    assert trial["state"] == "INFEASIBLE", run.stdout + run.stderr
    local = json.loads(run_trials("describe", "oom", "--root", str(tmp_path / "jobs"), "--format", "local-json",
                                  cwd=tmp_path, env=container_env).stdout)["trials"]
    assert "memory" in json.dumps(local).lower(), local


def test_a_killed_controller_leaves_containers_the_resume_removes(tmp_path, container_env):
    job_dir = tmp_path / "jobs" / "kill"
    sweep = subprocess.Popen(
        [sys.executable, "-m", "trials", "sweep", str(spec(tmp_path, args=("--mode=sleep", "--sleep=12"),
                                                            trials=1, parallel=1)),
         "--root", str(tmp_path / "jobs"), "--job-id", "kill", *IMAGE_FLAGS],
        cwd=tmp_path, env=container_env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    label = f"trials.job_dir={job_dir}"
    try:
        assert _wait_for(lambda: (job_dir / "1" / "hypertune.metrics").exists()), "the trial never reported"
    finally:
        sweep.kill()  # SIGKILL: no clean-up of its own
        sweep.wait()
    assert podman_ps(container_env, label)  # its container outlived it (the runtime keeps it; 12 s of sleep)
    run = run_trials("resume", "kill", "--root", str(tmp_path / "jobs"), cwd=tmp_path, env=container_env)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "removed 1 container(s) an earlier controller of this job left" in run.stdout
    (trial,) = describe(tmp_path, container_env, "kill")["trials"]
    assert trial["state"] == "SUCCEEDED"
    assert podman_ps(container_env, label) == []


def test_cancel_of_a_job_whose_controller_was_killed_removes_its_containers_and_networks(tmp_path, container_env):
    job_dir = tmp_path / "jobs" / "dead"
    sweep = subprocess.Popen(  # two pools: each trial on a network of its own, with its keeper container
        [sys.executable, "-m", "trials", "sweep", str(two_pools(tmp_path, "--mode=sleep", "--sleep=120", trials=1)),
         "--root", str(tmp_path / "jobs"), "--job-id", "dead", *IMAGE_FLAGS],
        cwd=tmp_path, env=container_env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    label = f"trials.job_dir={job_dir}"
    try:
        assert _wait_for(lambda: len(podman_ps(container_env, label)) >= 2), "the replicas never started"
    finally:
        sweep.kill()  # SIGKILL: no clean-up of its own
        sweep.wait()
    assert podman_ps(container_env, label)  # they outlived it (120 s of sleep)
    assert _networks(container_env, label)
    run = run_trials("cancel", "dead", "--root", str(tmp_path / "jobs"), cwd=tmp_path, env=container_env)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "JOB_STATE_CANCELLED" in run.stdout
    assert podman_ps(container_env, label) == []  # removed now, not when a later controller opens the job
    assert _networks(container_env, label) == []
    (trial,) = describe(tmp_path, container_env, "dead")["trials"]
    assert trial["state"] != "ACTIVE"


def _networks(env, label: str) -> list[str]:
    out = subprocess.run(["podman", "network", "ls", "--filter", f"label={label}", "--format", "{{.Name}}"],
                         capture_output=True, text=True, env=env)
    return out.stdout.split()


def test_a_python_package_is_installed_from_the_jobs_bucket_into_its_executor_image(tmp_path, container_env, sdist):
    gcs = tmp_path / "gcs"
    (gcs / "bucket" / "pkgs").mkdir(parents=True)
    (gcs / "bucket" / "pkgs" / sdist.name).write_bytes(sdist.read_bytes())
    pool = {"executorImageUri": SPEC_URI, "packageUris": [f"gs://bucket/pkgs/{sdist.name}"],
            "pythonModule": "trainerpkg.task"}
    run = run_trials("sweep", str(spec(tmp_path, trials=1, parallel=1, pool=pool)), "--root", str(tmp_path / "jobs"),
                     "--job-id", "pkg", "--gcs-root", str(gcs), *IMAGE_FLAGS, cwd=tmp_path, env=container_env)
    assert run.returncode == 0, run.stdout + run.stderr
    (trial,) = describe(tmp_path, container_env, "pkg")["trials"]
    x = next(p["value"] for p in trial["parameters"])
    assert trial["state"] == "SUCCEEDED" and trial["finalMeasurement"]["metrics"][0]["value"] == pytest.approx(2 * x)
    out = (tmp_path / "jobs" / "pkg" / "1" / "workerpool0-0.stdout.log").read_text()
    assert "trainerpkg ran from /opt/venv/lib/" in out  # installed into the image's Python, not the host's
    assert os.listdir(gcs / "bucket" / "pkgs") == [sdist.name]


def test_the_replicas_of_a_two_pool_trial_find_each_other_at_their_cluster_spec_addresses(tmp_path, container_env):
    run = run_trials("sweep", str(two_pools(tmp_path, "--mode=handshake", trials=2)), "--root",
                     str(tmp_path / "jobs"), "--job-id", "two",
                     *IMAGE_FLAGS, cwd=tmp_path, env=container_env)
    assert run.returncode == 0, run.stdout + run.stderr
    for t in describe(tmp_path, container_env, "two")["trials"]:  # two trials at once never mix their replicas
        x = next(p["value"] for p in t["parameters"])
        assert t["state"] == "SUCCEEDED" and t["finalMeasurement"]["metrics"][0]["value"] == pytest.approx(x + 0.25)
        env = json.loads((tmp_path / "jobs" / "two" / t["id"] / "env.json").read_text())["workerpool1-0"]
        cluster = json.loads(env["CLUSTER_SPEC"])["cluster"]  # Vertex's host names, on its own network
        assert cluster == {"workerpool0": ["workerpool0-0:2222"], "workerpool1": ["workerpool1-0:2222"]}
        assert env["MASTER_ADDR"] == "workerpool0-0" and env["MASTER_PORT"] == "2222"
        assert json.loads(env["TF_CONFIG"])["cluster"] == {"chief": ["workerpool0-0:2222"],
                                                          "worker": ["workerpool1-0:2222"]}
    assert podman_ps(container_env, f"trials.job_dir={tmp_path / 'jobs' / 'two'}") == []
    label = f"label=trials.job_dir={tmp_path / 'jobs' / 'two'}"
    networks = subprocess.run(["podman", "network", "ls", "--filter", label, "--format", "{{.Name}}"],
                              capture_output=True, text=True, env=container_env)
    assert networks.stdout.split() == []  # the trials' networks went with them


def test_check_runs_its_probes_as_containers_of_the_image(tmp_path, container_env):
    """`trials check --runtime podman`: the clean run and the SIGTERM probe in the image. A Python trainer
    without a SIGTERM handler is PID 1 in its container and so ignores SIGTERM, on Vertex as here."""
    run = run_trials("check", str(spec(tmp_path, args=("--epochs=6",))), "--format", "json", "--grace-period", "2",
                     *IMAGE_FLAGS, cwd=tmp_path, env=container_env)
    card = json.loads(run.stdout)
    verdicts = {c["check"]: c for c in card["checks"]}
    assert verdicts["runs"]["verdict"] == "pass" and verdicts["metric tag"]["verdict"] == "pass", card
    assert verdicts["model in AIP_MODEL_DIR"]["verdict"] == "pass"  # written through /gcs
    assert verdicts["writes outside AIP dirs"]["verdict"] == "skip" and "dies with its container" in \
        verdicts["writes outside AIP dirs"]["seen"]
    assert verdicts["SIGTERM"]["verdict"] in ("fail", "warn"), card  # PID 1 without a handler: ignored
    assert verdicts["host cloud identity"]["verdict"] == "pass"
    from trials.controller.check.check import CHECK_JOB_ID

    assert podman_ps(container_env, f"trials.job={CHECK_JOB_ID}") == []  # every probe's container is gone


ROOTLESS_USER = "trials-rootless"  # .ci/containers.sh makes it (subuid/subgid ranges come with useradd)


@pytest.mark.long
def test_an_ordinary_user_runs_the_job_in_rootless_podman(tmp_path_factory, container_env):
    """Rootless podman: the same sweep as an ordinary user, with its own image store (the image copied in)."""
    import pwd
    import shlex
    import shutil

    from containerkit import HERE

    if os.geteuid() != 0:
        pytest.skip("the rootless test switches to an ordinary user, which only root can do; this run is not "
                    "root (its own sweeps already run unprivileged)")
    try:
        user = pwd.getpwnam(ROOTLESS_USER)
    except KeyError:
        if os.environ.get("TRIALS_REQUIRE_CONTAINERS") == "1":
            pytest.fail(f"no user {ROOTLESS_USER} (.ci/containers.sh makes it)")
        pytest.skip(f"no user {ROOTLESS_USER} (.ci/containers.sh makes it)")
    python = shutil.which("python3", path="/usr/bin:/bin")  # the test venv's Python may be unreadable to users
    if python is None:
        pytest.skip("no system python3 for the ordinary user")
    work = Path(tempfile.mkdtemp(prefix="trials-rootless-"))
    try:
        os.chmod(work, 0o777)
        spec_path = spec(work, trials=1, parallel=1)
        os.chmod(spec_path, 0o644)
        conf = work / "containers.conf"
        conf.write_text(Path(container_env["CONTAINERS_CONF"]).read_text() if "CONTAINERS_CONF" in container_env
                         else "[containers]\n")
        os.chmod(conf, 0o644)
        user_env = (f"HOME={shlex.quote(user.pw_dir)} CONTAINERS_CONF={shlex.quote(str(conf))} TRIALS_GCS_EMULATOR=on "
                    f"TRIALS_CONTAINER_ARGS={shlex.quote(container_env.get('TRIALS_CONTAINER_ARGS', ''))} "
                    f"PYTHONPATH={shlex.quote(str(HERE.parent.parent))}:{shlex.quote(_site_packages())}")
        save = subprocess.Popen(["podman", "save", TRAINER], stdout=subprocess.PIPE, env=container_env)
        load = subprocess.run(["su", ROOTLESS_USER, "-c", f"cd /tmp && {user_env} podman load -q"], stdin=save.stdout,
                              capture_output=True, text=True, timeout=300)
        save.wait()
        assert load.returncode == 0, load.stderr
        command = (f"cd {shlex.quote(str(work))} && {user_env} {python} -m trials sweep spec.json --job-id rl "
                   f"--runtime podman --image {SPEC_URI}={TRAINER}")
        run = subprocess.run(["su", ROOTLESS_USER, "-c", command], capture_output=True, text=True, timeout=400)
        assert run.returncode == 0, run.stdout + run.stderr
        assert "trial 1 SUCCEEDED after 3 steps" in run.stdout
        if importlib.util.find_spec("gcp_storage_emulator") is not None:  # its networks are not the host's
            assert "no local Cloud Storage endpoint for container trials: rootless podman" in run.stdout, run.stdout
        info = subprocess.run(["su", ROOTLESS_USER, "-c", f"cd /tmp && {user_env} podman info --format "
                               "'{{.Host.Security.Rootless}}'"], capture_output=True, text=True, timeout=60)
        assert info.stdout.strip() == "true"
        owner = (work / "trials-jobs" / "rl" / "1" / "hypertune.metrics").stat().st_uid
        assert owner == user.pw_uid  # the metric file is the user's, read by the user's controller
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _site_packages() -> str:
    import sysconfig

    return sysconfig.get_paths()["purelib"]
