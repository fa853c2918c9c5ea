"""Each trial runs as in its Vertex container (issue 13): environment, command, legacy contract.

Real `trials` processes and real trainers (tests/scripts/container_trainer.py).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

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
    from trials.controller import jobs
    from trials.spec.load import load_spec

    spec = write_spec(tmp_path / "spec.yaml", command=False)
    h = jobs.create_job(load_spec(str(spec)), root=str(tmp_path / "trials-jobs"), job_id="old",
                        spec_path=str(spec), storage=None, base_output_dir=None, project_number=None,
                        local_command=["python", TRAINER], cwd=str(tmp_path))
    h.store.set_meta(local_command=None)  # as a job created before the check was
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
