"""A trial cannot have the controller make folders elsewhere on the host through the bucket folder.

Every trial writes the job's bucket folder (``/gcs``), and a gs:// base output directory lives there: the
controller makes each trial's ``model``, ``checkpoints`` and ``logs`` folders under it on the host, as its own
user (root here). Before, it made them with ``os.makedirs``, which goes through a link: a trainer that planted
``/gcs/b/out/2 -> /some/host/folder`` had the controller make folders there when trial 2 started."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration]

TRAINER = """
import argparse, os
import hypertune
parser = argparse.ArgumentParser()
parser.add_argument("--x", type=float)
args = parser.parse_args()
gcs = os.environ.get("TRIALS_GCS_ROOT", "/gcs")
if os.environ["CLOUD_ML_TRIAL_ID"] == "1":
    os.symlink(os.environ["VICTIM"], os.path.join(gcs, "b", "out", "2"))
hypertune.HyperTune().report_hyperparameter_tuning_metric(hyperparameter_metric_tag="loss",
                                                          metric_value=args.x)
"""


def test_a_link_planted_in_the_bucket_folder_makes_no_folder_on_the_host(tmp_path: Path) -> None:
    work, victim = tmp_path / "work", tmp_path / "victim"
    work.mkdir()
    victim.mkdir()
    (work / "train.py").write_text(TRAINER)
    (work / "spec.yaml").write_text("metrics: {loss: minimize}\nparameters:\n  x: {type: double, min: 0, max: 1}\n"
                                    "max_trial_count: 2\nparallel_trial_count: 1\nmax_failed_trial_count: 2\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CLOUD_ML_", "AIP_", "TRIALS_"))}
    env["VICTIM"] = str(victim)
    out = subprocess.run([sys.executable, "-m", "trials", "sweep", "spec.yaml", "--job-id", "plant", "--root",
                          str(tmp_path / "jobs"), "--base-output-dir", "gs://b/out", "--pass-env", "VICTIM", "--",
                          sys.executable, "train.py"], cwd=work, env=env, capture_output=True, text=True,
                         timeout=180)
    assert "Traceback" not in out.stderr, out.stderr[-2000:]
    assert list(victim.iterdir()) == [], "the controller made folders through the planted link"
    described = subprocess.run([sys.executable, "-m", "trials", "describe", "plant", "--root", str(tmp_path / "jobs"),
                                "--format", "json"], cwd=work, env=env, capture_output=True, text=True, timeout=60)
    trials = {t["id"]: t for t in json.loads(described.stdout)["trials"]}
    assert trials["1"]["state"] == "SUCCEEDED", trials["1"]
    assert trials["2"]["state"] == "INFEASIBLE", trials["2"]
    reason = trials["2"]["infeasibleReason"]
    assert reason.startswith("The trial could not be started: ") and "refusing a symlink where a folder was " \
        "expected" in reason and "b/out/2" in reason, reason
