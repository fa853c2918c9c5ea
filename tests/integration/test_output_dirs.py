"""AIP_* directories follow the spec's baseOutputDirectory, as on Vertex: set only when the job has a
base (the spec's or --base-output-dir's, written into its spec: describe and export show it), and
CLUSTER_SPEC.job matches what the trial gets."""

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


def test_without_a_base_trials_get_no_aip_outputs_and_export_keeps_it_so(tmp_path: Path) -> None:
    """v1 CustomJobSpec: AIP_MODEL_DIR & co. are "passed … when this field is set": no base, none."""
    (tmp_path / "trainer.py").write_text(TRAINER)
    (tmp_path / "dflt.yaml").write_text(SHORT)
    root = str(tmp_path / "jobs")
    run = _run(tmp_path, "sweep", "dflt.yaml", "--root", root, "--job-id", "dflt", "--", "python", "trainer.py")
    assert run.returncode == 0, run.stdout + run.stderr
    assert "the job has no baseOutputDirectory, so trials get no AIP_MODEL_DIR" in run.stdout
    seen = json.loads((tmp_path / "jobs" / "dflt" / "1" / "seen.json").read_text())
    assert seen["AIP_MODEL_DIR"] is None and seen["AIP_CHECKPOINT_DIR"] is None
    assert seen["AIP_TENSORBOARD_LOG_DIR"] is None
    assert "baseOutputDirectory" not in json.loads(seen["CLUSTER_SPEC"])["job"]
    body = json.loads(_run(tmp_path, "describe", "dflt", "--root", root, "--format", "json").stdout)
    assert "baseOutputDirectory" not in body.get("trialJobSpec", {})
    # export exports what was given: no base, and no refusal of a local one
    run = _run(tmp_path, "export", "dflt", "--root", root, "--image-uri", "gcr.io/p/t:1", "--format", "rest-json")
    assert run.returncode == 0, run.stderr
    assert "baseOutputDirectory" not in json.loads(run.stdout)["trialJobSpec"]
    run = _run(tmp_path, "export", "dflt", "--root", root, "--image-uri", "gcr.io/p/t:1",
               "--base-output-dir", "gs://b/run/", "--format", "rest-json")
    assert json.loads(run.stdout)["trialJobSpec"]["baseOutputDirectory"] == {
        "outputUriPrefix": "gs://b/run/"}
    best = _run(tmp_path, "best", "dflt", "--root", root)
    assert "model: no AIP_MODEL_DIR (the job has no baseOutputDirectory)" in best.stdout, best.stdout


def test_a_gs_base_in_the_spec_gives_aip_outputs_in_the_local_bucket(tmp_path: Path) -> None:
    seen, body = _sweep(tmp_path, SHORT + "command: [python, trainer.py]\nbase_output_dir: gs://bucket/run\n", "gs")
    assert body["trialJobSpec"]["baseOutputDirectory"] == {"outputUriPrefix": "gs://bucket/run"}
    assert seen["AIP_MODEL_DIR"] == "gs://bucket/run/1/model/"
    assert (tmp_path / "jobs" / "gs" / "gcs" / "bucket" / "run" / "1" / "model").is_dir()


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
    assert cluster_job["workerPoolSpecs"] and "baseOutputDirectory" not in cluster_job  # no jobDir: no base
    seen, body = _sweep(tmp_path, LEGACY, "leg-dir", "--base-output-dir", "gs://b/legacy")
    cluster_job = json.loads(seen["CLUSTER_SPEC"])["job"]
    assert cluster_job["baseOutputDirectory"] == {"outputUriPrefix": "gs://b/legacy/1/"}
    assert seen["AIP_MODEL_DIR"] == "gs://b/legacy/1/model/"
