"""Each trial runs as in its Vertex container (issue 13): environment, command, legacy contract.

Real `trials` processes and real trainers (tests/scripts/container_trainer.py).
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from jobkit import write_meta

from trials.controller.process.groups import read_stat

pytestmark = pytest.mark.integration

TRAINER = str(Path(__file__).resolve().parent.parent / "scripts" / "container_trainer.py")
IDENTITY = {"GOOGLE_CLOUD_PROJECT": "host-project", "GOOGLE_APPLICATION_CREDENTIALS": "/host/key.json",
            "CLOUDSDK_CORE_PROJECT": "host-project", "AWS_ACCESS_KEY_ID": "AKIA-host"}


def write_spec(path: Path, *, trials: int = 1, parallel: int = 1, args: tuple[str, ...] = (),
               command: bool = True, env: str = "") -> Path:
    container = f"imageUri: gcr.io/p/t, args: {json.dumps(list(args))}"
    if command:
        container += f", command: [python, {json.dumps(TRAINER)}]"
    if env:
        container += f", env: [{env}]"
    path.write_text(
        "studySpec:\n"
        "  metrics: [{metricId: score, goal: MAXIMIZE}]\n"
        "  parameters: [{parameterId: x, doubleValueSpec: {minValue: 0.0, maxValue: 1.0}}]\n"
        f"maxTrialCount: {trials}\nparallelTrialCount: {parallel}\n"
        "trialJobSpec:\n  workerPoolSpecs:\n"
        f"  - {{machineSpec: {{machineType: n1-standard-4}}, replicaCount: 1, containerSpec: {{{container}}}}}\n"
    )
    return path


def trials_cli(*argv: str, cwd: Path, env: dict[str, str] | None = None, check: bool = True):
    full_env = {**os.environ, **(env or {})}
    proc = subprocess.run([sys.executable, "-m", "trials", *argv], cwd=cwd, capture_output=True,
                          text=True, timeout=120, env=full_env)
    if check and proc.returncode != 0:
        raise AssertionError(f"exit {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}")
    return proc


def seen(tmp_path: Path, job: str, trial: str = "1") -> dict:
    return json.loads((tmp_path / "trials-jobs" / job / trial / "seen.json").read_text())


def test_host_cloud_identity_is_withheld_unless_passed(tmp_path):
    spec = write_spec(tmp_path / "spec.yaml", env='{name: FROM_SPEC, value: "$(CLOUD_ML_TRIAL_ID)-x"}')
    trials_cli("sweep", str(spec), "--job-id", "env", cwd=tmp_path, env={**IDENTITY, "KEEP_ME": "1"})
    env = seen(tmp_path, "env")["env"]
    assert not [k for k in env if k.startswith(("GOOGLE_", "CLOUDSDK_", "AWS_")) and "CA_" not in k]
    assert env["KEEP_ME"] == "1" and env["PATH"] == os.environ["PATH"]  # the toolchain stays
    assert env["FROM_SPEC"] == "1-x" and env["CLOUD_ML_PROJECT_ID"] == "000000000000"
    trials_cli("sweep", str(spec), "--job-id", "passed", "--pass-env", "GOOGLE_CLOUD_PROJECT",
               cwd=tmp_path, env=IDENTITY)
    env = seen(tmp_path, "passed")["env"]
    assert env["GOOGLE_CLOUD_PROJECT"] == "host-project"
    assert "GOOGLE_APPLICATION_CREDENTIALS" not in env and "CLOUDSDK_CORE_PROJECT" not in env


def test_validate_shows_what_a_trial_sees(tmp_path):
    spec = write_spec(tmp_path / "spec.yaml")
    out = trials_cli("validate", str(spec), "--pass-env", "AWS_ACCESS_KEY_ID", cwd=tmp_path,
                     env=IDENTITY).stdout
    assert "CLOUD_ML_TRIAL_ID=1" in out and f"{TRAINER} --x=" in out
    withheld = next(line for line in out.splitlines() if "withheld" in line)
    assert "GOOGLE_APPLICATION_CREDENTIALS" in withheld and "AWS_ACCESS_KEY_ID" not in withheld
    assert "passed on purpose (--pass-env): AWS_ACCESS_KEY_ID" in out
    assert "AIP_MODEL_DIR=" not in out and "(no AIP_MODEL_DIR, AIP_CHECKPOINT_DIR" in out  # no base: none
    spec.write_text(spec.read_text().replace("trialJobSpec:\n", "trialJobSpec:\n  baseOutputDirectory: "
                                                                 "{outputUriPrefix: gs://b/run}\n"))
    out = trials_cli("validate", str(spec), cwd=tmp_path).stdout
    assert "AIP_MODEL_DIR=gs://b/run/1/model/" in out and "(no AIP_MODEL_DIR" not in out


def test_an_image_without_command_is_refused_before_a_job_exists(tmp_path):
    spec = write_spec(tmp_path / "spec.yaml", command=False)
    proc = trials_cli("sweep", str(spec), "--job-id", "nocmd", cwd=tmp_path, check=False)
    assert proc.returncode == 2
    assert "has no command" in proc.stderr and "-- python train.py" in proc.stderr
    assert not (tmp_path / "trials-jobs").exists()  # no job folder, no job id used up
    out = trials_cli("validate", str(spec), cwd=tmp_path).stdout  # a valid Vertex spec: a note
    assert "note:" in out and "give the command after --" in out
    trials_cli("sweep", str(spec), "--job-id", "nocmd", "--", "python", TRAINER, cwd=tmp_path)
    assert seen(tmp_path, "nocmd")["found"] == "1"


def test_resume_can_give_the_command_a_job_lacks(tmp_path):
    from trials.cli import main
    from trials.controller.jobs import registry as jobs
    from trials.spec.load import load_spec

    spec = write_spec(tmp_path / "spec.yaml", command=False)
    h = jobs.create_job(load_spec(str(spec)), root=str(tmp_path / "trials-jobs"), job_id="old",
                        spec_path=str(spec), storage=None, base_output_dir=None, project_number=None,
                        local_command=["python", TRAINER], cwd=str(tmp_path))
    write_meta(h.store, local_command=None)  # as a job created before the check was
    proc = trials_cli("resume", "old", cwd=tmp_path, check=False)
    assert proc.returncode == 2 and "trials resume old -- python train.py" in proc.stderr
    trials_cli("resume", "old", "--", "python", TRAINER, cwd=tmp_path)
    assert seen(tmp_path, "old")["found"] == "1"
    assert main(["resume", "old", "--root", str(tmp_path / "trials-jobs"), "--", "python", "other.py"]) == 2


def test_a_legacy_job_dir_reaches_the_trainer_as_job_dir(tmp_path):
    spec = tmp_path / "hptuning_config.yaml"
    spec.write_text(
        "trainingInput:\n"
        "  pythonModule: trainer.task\n"
        "  args: [--need-job-dir, --tag, Taxi Model Accuracy]\n"
        f"  jobDir: {tmp_path / 'out'}\n"
        "  hyperparameters:\n"
        "    goal: MAXIMIZE\n"
        "    hyperparameterMetricTag: Taxi Model Accuracy\n"
        "    maxTrials: 1\n"
        "    params: [{parameterName: x, type: DOUBLE, minValue: 0.0, maxValue: 1.0}]\n")
    trials_cli("sweep", str(spec), "--job-id", "legacy", "--", "python", TRAINER, cwd=tmp_path)
    got = seen(tmp_path, "legacy")
    assert got["job_dir"] == str(tmp_path / "out")
    assert got["env"]["AIP_MODEL_DIR"] == f"{tmp_path / 'out'}/1/model/"
    out = trials_cli("describe", "legacy", "--format", "json", cwd=tmp_path).stdout
    assert json.loads(out)["trials"][0]["finalMeasurement"]["metrics"][0]["metricId"] == "Taxi Model Accuracy"


# --- the container view: own working folder, /gcs, process tree, planted links (13.2, 13.3, 12.1, 12.8)
def sandbox_on() -> bool:
    from trials.controller.process import sandbox

    probe = Path(tempfile.mkdtemp(prefix="trials-probe-"))
    try:
        return sandbox.detect(launch_dir=str(probe), job_dir=str(probe / "job"), gcs_root=str(probe / "gcs"),
                              environ={}).on
    finally:
        shutil.rmtree(probe, ignore_errors=True)


needs_sandbox = pytest.mark.skipif(not sys.platform.startswith("linux") or not sandbox_on(),
                                   reason="no mount namespaces here (the fallback tests still run)")


@needs_sandbox
def test_parallel_trials_each_find_their_own_out_txt_and_the_launch_folder_is_untouched(tmp_path):
    spec = write_spec(tmp_path / "spec.yaml", trials=2, parallel=2, args=("--sleep=1.5",))
    before = sorted(p.name for p in tmp_path.iterdir())
    trials_cli("sweep", str(spec), "--job-id", "cow", cwd=tmp_path)
    for trial in ("1", "2"):
        got = seen(tmp_path, "cow", trial)
        assert got["found"] == trial and got["cwd"] == str(tmp_path)
        layer = tmp_path / "trials-jobs" / "cow" / trial / "sandbox" / "workerpool0-0.0"
        assert not layer.exists()  # thrown away with the attempt, as a container's layer is
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([*before, "trials-jobs"])
    assert not (tmp_path / "out.txt").exists()


@needs_sandbox
def test_a_trainer_writing_under_gcs_puts_its_model_where_best_says(tmp_path):
    spec = write_spec(tmp_path / "spec.yaml", trials=2, args=("--gcs-model",))
    trials_cli("sweep", str(spec), "--job-id", "fuse", "--base-output-dir", "gs://bucket/run", cwd=tmp_path)
    got = seen(tmp_path, "fuse")
    assert got["env"]["AIP_MODEL_DIR"] == "gs://bucket/run/1/model/"
    assert got["model"] == "/gcs/bucket/run/1/model/model.txt"
    out = trials_cli("best", "fuse", cwd=tmp_path).stdout
    model_dir = Path(next(line for line in out.splitlines() if "model:" in line).split("model:")[1].strip())
    assert model_dir.is_relative_to(tmp_path / "trials-jobs" / "fuse" / "gcs")
    assert (model_dir / "model.txt").read_text().startswith("model of trial")
    assert not Path("/gcs/bucket").exists()  # nothing created outside the job folder


@needs_sandbox
def test_the_journal_is_out_of_reach_and_a_planted_log_link_is_not_followed(tmp_path):
    trainer = tmp_path / "plant.py"
    trainer.write_text(
        "import os, sys\n"
        "trial = os.environ['TRIALS_TRIAL_DIR']\n"
        "reach = os.path.exists(os.path.join(trial, '..', 'journal.log'))\n"
        "open(os.path.join(trial, 'reach.txt'), 'w').write(str(reach))\n"
        "if os.environ['TRIALS_ATTEMPT'] == '0':\n"
        "    log = os.path.join(trial, 'workerpool0-0.stdout.log')\n"
        "    os.unlink(log)\n"
        "    os.symlink('../journal.log', log)\n"
        "    os.kill(os.getpid(), 11)\n"
        "import hypertune\n"
        "print('second attempt output')\n"
        "hypertune.HyperTune().report_hyperparameter_tuning_metric("
        "hyperparameter_metric_tag='score', metric_value=1.0, global_step=1)\n")
    spec = write_spec(tmp_path / "spec.yaml", command=False)
    journal = tmp_path / "trials-jobs" / "plant" / "journal.log"
    trials_cli("sweep", str(spec), "--job-id", "plant", "--", "python", str(trainer), cwd=tmp_path)
    rest = json.loads(trials_cli("describe", "plant", "--format", "json", cwd=tmp_path).stdout)
    assert rest["state"] == "JOB_STATE_SUCCEEDED"
    assert b"second attempt output" not in journal.read_bytes()
    log = tmp_path / "trials-jobs" / "plant" / "1" / "workerpool0-0.stdout.log"
    assert not log.is_symlink() and "second attempt output" in log.read_text()
    assert (tmp_path / "trials-jobs" / "plant" / "1" / "reach.txt").read_text() == "False"


def test_a_planted_log_link_is_not_followed_without_the_sandbox(tmp_path):
    from trials.controller.process.spawn import start_replica

    victim = tmp_path / "journal.log"
    victim.write_text("precious\n")
    log = tmp_path / "trial" / "workerpool0-0.stdout.log"
    log.parent.mkdir()
    log.symlink_to("../journal.log")
    r = start_replica([sys.executable, "-c", "print('out')"], env=dict(os.environ), cwd=str(tmp_path),
                      stdout_path=str(log), stderr_path=str(log), name="workerpool0-0")
    r._proc.wait(timeout=60)
    assert r.poll().status == 0
    assert victim.read_text() == "precious\n"
    assert not log.is_symlink() and log.read_text() == "out\n"


def test_grandchildren_that_call_setsid_die_with_the_trial_and_are_named(tmp_path):
    trainer = tmp_path / "daemon.py"
    trainer.write_text(
        "import os, subprocess, sys, hypertune\n"
        "p = subprocess.Popen(['sleep', '240'], start_new_session=True)\n"
        "open(os.path.join(os.environ['TRIALS_TRIAL_DIR'], 'orphan.pid'), 'w').write(str(p.pid))\n"
        "hypertune.HyperTune().report_hyperparameter_tuning_metric("
        "hyperparameter_metric_tag='score', metric_value=1.0, global_step=1)\n")
    spec = write_spec(tmp_path / "spec.yaml", command=False)
    proc = trials_cli("sweep", str(spec), "--job-id", "orphans", "--", "python", str(trainer), cwd=tmp_path)
    pid = int((tmp_path / "trials-jobs" / "orphans" / "1" / "orphan.pid").read_text())
    from trials.controller.process.tree import cgroup_parent

    if cgroup_parent() is None:
        pytest.skip("no writable cgroup v2 here: a replica is tracked by its process group only")
    # Its own PID namespace: the trainer saw pid 3 or so, the warning names the host's pid and that one
    named = re.search(r"left 1 processes running; killed them: (\d+) \(sleep, pid (\d+) in the trial\)",
                      proc.stdout)
    assert named, proc.stdout
    host, inner = (int(n) for n in named.groups())
    assert inner == pid, proc.stdout
    assert not _alive(host), f"the setsid() grandchild {host} survived the trial"


def _alive(pid: int) -> bool:
    """Running, not a zombie (this machine's PID 1 may never reap orphans)."""
    stat = read_stat(pid)
    return stat is not None and stat.state not in "ZX"


def test_without_namespaces_the_trials_run_as_before_and_it_is_said_once(tmp_path):
    spec = write_spec(tmp_path / "spec.yaml", trials=2, args=("--gcs-model",))
    proc = trials_cli("sweep", str(spec), "--job-id", "plain", cwd=tmp_path, check=False,
                      env={"TRIALS_SANDBOX": "off"})
    assert proc.stdout.count("the sandbox is off (TRIALS_SANDBOX=off)") == 1
    assert "--base-output-dir" in proc.stdout
    assert (tmp_path / "out.txt").exists()  # the shared launch folder, as before
    assert not (tmp_path / "trials-jobs" / "plain" / "1" / "sandbox").exists()


@needs_sandbox
@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None, reason="needs root to switch user")
def test_an_unprivileged_user_gets_the_same_view_through_a_user_namespace():
    tmp_path = Path(tempfile.mkdtemp(prefix="trials-nobody-"))  # pytest's folders are root-only
    try:
        _unprivileged_sweep(tmp_path)
    finally:
        shutil.rmtree(tmp_path, ignore_errors=True)


def _as_nobody(*argv: str) -> bool:
    return subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", *argv],
                          capture_output=True, timeout=60).returncode == 0


def _unprivileged_sweep(tmp_path: Path) -> None:
    if not (_as_nobody(sys.executable, "-c", "import trials, optuna") and _as_nobody("test", "-r", TRAINER)):
        pytest.skip("user nobody cannot run this interpreter or read the test trainer here")
    tmp_path.chmod(0o777)
    spec = write_spec(tmp_path / "spec.yaml", trials=2, parallel=2, args=("--sleep=1", "--gcs-model"),
                      command=False)
    spec.chmod(0o644)
    # The trainer runs under the system python: this test's interpreter may sit in a folder
    # (/root/...) that only the host's root may open once inside a user namespace.
    system_python = shutil.which("python3", path="/usr/bin:/bin") or "python3"
    argv = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
            sys.executable, "-m", "trials", "sweep", str(spec), "--job-id", "nobody",
            "--base-output-dir", "gs://b/r", "--", system_python, TRAINER]
    env = {**os.environ, "HOME": str(tmp_path), "XDG_CACHE_HOME": str(tmp_path / ".cache")}
    proc = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, timeout=180, env=env)
    if "the sandbox is off" in proc.stdout:
        pytest.skip(f"unprivileged user namespaces are refused here: {proc.stdout.splitlines()[1]}")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for trial in ("1", "2"):
        got = seen(tmp_path, "nobody", trial)
        assert got["found"] == trial and got["model"] == f"/gcs/b/r/{trial}/model/model.txt"
        assert (tmp_path / "trials-jobs" / "nobody" / "gcs" / "b" / "r" / trial / "model" / "model.txt").exists()
    assert not (tmp_path / "out.txt").exists()


# --- gs:// through google-cloud-storage (13.4): the trials[gcs] extra -----------------------------
GCS_TRAINER = '''
import os
from google.cloud import storage

bucket = storage.Client().bucket("b")
mine = "trial-" + os.environ["CLOUD_ML_TRIAL_ID"]
os.makedirs("/gcs/b/fuse", exist_ok=True)
with open(f"/gcs/b/fuse/{mine}.txt", "w") as f:  # the Cloud Storage FUSE idiom
    f.write("through /gcs")
bucket.blob(f"client/{mine}.txt").upload_from_string("through the client")  # the client idiom
got = {
    "client_reads_fuse": bucket.blob(f"fuse/{mine}.txt").download_as_text(),
    "fuse_reads_client": open(f"/gcs/b/client/{mine}.txt").read(),
    "data": bucket.blob("data/input.csv").download_as_text(),
    "listed": sorted(b.name for b in storage.Client().list_blobs("b", prefix="client/")),
}
import json, hypertune
with open(os.path.join(os.environ["TRIALS_TRIAL_DIR"], "gcs.json"), "w") as f:
    json.dump(got, f)
hypertune.HyperTune().report_hyperparameter_tuning_metric(
    hyperparameter_metric_tag="score", metric_value=1.0, global_step=1)
'''


@needs_sandbox
@pytest.mark.skipif(not all(importlib.util.find_spec(m) for m in ("gcp_storage_emulator", "google.cloud.storage")),
                    reason="the gcs extra is not installed (pip install 'trials[gcs]')")
def test_a_client_uploader_and_a_gcs_writer_see_each_others_objects(tmp_path):
    trainer = tmp_path / "gcs_trainer.py"
    trainer.write_text(GCS_TRAINER)
    data = tmp_path / "trials-jobs" / "both" / "gcs" / "b" / "data"
    data.mkdir(parents=True)
    (data / "input.csv").write_text("x,y\n1,2\n")  # the user put the data in the local bucket
    spec = write_spec(tmp_path / "spec.yaml", trials=2, command=False)
    trials_cli("sweep", str(spec), "--job-id", "both", "--", "python", str(trainer), cwd=tmp_path,
               env={"STORAGE_EMULATOR_HOST": "http://host-emulator:1", "TRIALS_GCS_EMULATOR": "on"})
    for trial in ("1", "2"):
        got = json.loads((tmp_path / "trials-jobs" / "both" / trial / "gcs.json").read_text())
        assert got["client_reads_fuse"] == "through /gcs" and got["fuse_reads_client"] == "through the client"
        assert got["data"] == "x,y\n1,2\n" and f"client/trial-{trial}.txt" in got["listed"]
    bucket = tmp_path / "trials-jobs" / "both" / "gcs" / "b"
    assert (bucket / "client" / "trial-2.txt").read_text() == "through the client"
    assert "trial-1.txt" in [p.name for p in (bucket / "client").iterdir()]
    servers = [pid for pid in os.listdir("/proc") if pid.isdigit() and _serves(pid, str(bucket.parent))]
    assert not servers, "the local Cloud Storage endpoint outlived its job"


USERS_EMULATOR_TRAINER = '''
import json, os, hypertune
from google.cloud import storage

got = storage.Client().bucket("theirs").blob("only-in-theirs.txt").download_as_text()
with open(os.path.join(os.environ["TRIALS_TRIAL_DIR"], "gcs.json"), "w") as f:
    json.dump({"got": got, "host": os.environ.get("STORAGE_EMULATOR_HOST")}, f)
hypertune.HyperTune().report_hyperparameter_tuning_metric(
    hyperparameter_metric_tag="score", metric_value=1.0, global_step=1)
'''


@pytest.mark.skipif(not all(importlib.util.find_spec(m) for m in ("gcp_storage_emulator", "google.cloud.storage")),
                    reason="the gcs extra is not installed (pip install 'trials[gcs]')")
def test_the_users_own_cloud_storage_emulator_wins_with_pass_env_and_is_named_without(tmp_path):
    from trials.controller.gcs import emulator

    theirs = tmp_path / "their-emulator"
    (theirs / "theirs").mkdir(parents=True)
    (theirs / "theirs" / "only-in-theirs.txt").write_text("their data")
    server, why = emulator.start(str(theirs), {})
    assert server is not None, why
    try:
        trainer = tmp_path / "their_trainer.py"
        trainer.write_text(USERS_EMULATOR_TRAINER)
        spec = write_spec(tmp_path / "spec.yaml", command=False)
        env = {"STORAGE_EMULATOR_HOST": server.host, "TRIALS_GCS_EMULATOR": "on"}
        done = trials_cli("sweep", str(spec), "--job-id", "kept", "--pass-env", "STORAGE_EMULATOR_HOST",
                          "--", "python", str(trainer), cwd=tmp_path, env=env)
        got = json.loads((tmp_path / "trials-jobs" / "kept" / "1" / "gcs.json").read_text())
        assert got == {"got": "their data", "host": server.host}
        assert "STORAGE_EMULATOR_HOST" not in done.stdout  # nothing replaced, nothing to say
        # without --pass-env the job's endpoint serves the job's buckets, and the start says so once
        done = trials_cli("sweep", str(spec), "--job-id", "replaced", "--", "python", str(trainer),
                          cwd=tmp_path, env=env, check=False)
        said = [line for line in done.stdout.splitlines() if f"STORAGE_EMULATOR_HOST={server.host}" in line]
        assert len(said) == 1 and "--pass-env STORAGE_EMULATOR_HOST" in said[0], done.stdout
    finally:
        server.stop()


def _serves(pid: str, root: str) -> bool:
    """An endpoint serving ``root``: named on its command line, or (started ahead of its job, given
    the folder on stdin) working in it."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            cmdline = f.read()
        cwd = os.readlink(f"/proc/{pid}/cwd")
    except OSError:
        return False
    return b"trials.controller.gcs.server" in cmdline and (root.encode() in cmdline or cwd == root)
