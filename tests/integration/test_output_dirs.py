"""AIP_* directories follow the spec's baseOutputDirectory, as on Vertex: the base a job uses is
written into its spec (describe and export show it), and CLUSTER_SPEC.job matches what the trial gets."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TRAINER = """
import json, os, sys, hypertune
keep = ("AIP_MODEL_DIR", "AIP_CHECKPOINT_DIR", "AIP_TENSORBOARD_LOG_DIR", "CLUSTER_SPEC")
with open(os.path.join(os.environ["TRIALS_TRIAL_DIR"], "seen.json"), "w") as f:
    json.dump({k: os.environ.get(k) for k in keep}, f)
hypertune.HyperTune().report_hyperparameter_tuning_metric(
    hyperparameter_metric_tag="loss", metric_value=1.0, global_step=1)
"""
SHORT = """
metrics: {loss: minimize}
parameters: {x: {type: double, min: 0.1, max: 0.9}}
"""
LEGACY = """
trainingInput:
  hyperparameters:
    goal: MINIMIZE
    hyperparameterMetricTag: loss
    params:
    - {parameterName: x, type: DOUBLE, minValue: 0.1, maxValue: 0.9}
"""


def _run(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "trials", *args], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)


def _sweep(tmp_path: Path, spec_text: str, job_id: str, *opts: str) -> tuple[dict, dict]:
    (tmp_path / "trainer.py").write_text(TRAINER)
    spec = tmp_path / f"{job_id}.yaml"
    spec.write_text(spec_text)
    root = str(tmp_path / "jobs")
    run = _run(tmp_path, "sweep", str(spec), "--root", root, "--job-id", job_id, *opts,
               "--", "python", "trainer.py")
    assert run.returncode == 0, run.stdout + run.stderr
    seen = json.loads((tmp_path / "jobs" / job_id / "1" / "seen.json").read_text())
    body = json.loads(_run(tmp_path, "describe", job_id, "--root", root, "--format", "json").stdout)
    return seen, body


def test_the_local_default_base_is_written_into_the_spec(tmp_path: Path) -> None:
    seen, body = _sweep(tmp_path, SHORT, "dflt")
    job_dir = str(tmp_path / "jobs" / "dflt")
    assert body["trialJobSpec"]["baseOutputDirectory"] == {"outputUriPrefix": job_dir}
    assert seen["AIP_MODEL_DIR"] == f"{job_dir}/1/model/"
    cluster_job = json.loads(seen["CLUSTER_SPEC"])["job"]
    assert cluster_job["baseOutputDirectory"] == {"outputUriPrefix": f"{job_dir}/1/"}
    # export asks for a gs:// base instead of the local one
    root = str(tmp_path / "jobs")
    run = _run(tmp_path, "export", "dflt", "--root", root, "--image-uri", "gcr.io/p/t:1")
    assert run.returncode == 2 and "--base-output-dir gs://" in run.stderr
    run = _run(tmp_path, "export", "dflt", "--root", root, "--image-uri", "gcr.io/p/t:1",
               "--base-output-dir", "gs://b/run/", "--format", "rest-json")
    assert json.loads(run.stdout)["trialJobSpec"]["baseOutputDirectory"] == {
        "outputUriPrefix": "gs://b/run/"}


def test_base_output_dir_flag_is_what_the_spec_and_cluster_spec_show(tmp_path: Path) -> None:
    out = tmp_path / "out"
    spec = SHORT + "command: [python, trainer.py]\nbase_output_dir: gs://bucket/run\n"
    seen, body = _sweep(tmp_path, spec, "flag", "--base-output-dir", str(out))
    assert body["trialJobSpec"]["baseOutputDirectory"] == {"outputUriPrefix": str(out)}
    assert seen["AIP_MODEL_DIR"] == f"{out}/1/model/"
    cluster_job = json.loads(seen["CLUSTER_SPEC"])["job"]
    assert cluster_job["baseOutputDirectory"] == {"outputUriPrefix": f"{out}/1/"}


def test_a_legacy_job_gets_its_custom_job_in_cluster_spec(tmp_path: Path) -> None:
    seen, body = _sweep(tmp_path, LEGACY, "leg")
    cluster_job = json.loads(seen["CLUSTER_SPEC"])["job"]
    assert cluster_job["workerPoolSpecs"] and cluster_job["baseOutputDirectory"]
    assert cluster_job["baseOutputDirectory"]["outputUriPrefix"] == os.path.dirname(
        seen["AIP_MODEL_DIR"].rstrip("/")) + "/"
