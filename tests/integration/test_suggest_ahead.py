"""A real sweep with the GP: its suggestions are made in the sampler's own process (NumPy and SciPy; torch in
neither process), SciPy never in the controller."""

import os
import subprocess
import sys

import pytest

from tests.integration import test_sampler_choice as sampler_choice
from trials.study.samplers import gp_available

pytestmark = pytest.mark.skipif(not gp_available(), reason="the GP sampler needs scipy")

SPEC = sampler_choice.SPEC.replace("maxTrialCount: 2\nparallelTrialCount: 1",
                                   "maxTrialCount: 13\nparallelTrialCount: 2")
TRAIN = sampler_choice.TRAIN


def test_the_gp_suggests_in_its_own_process_and_the_job_runs_to_its_end(tmp_path):
    assert "maxTrialCount: 13" in SPEC
    (tmp_path / "spec.yaml").write_text(SPEC)
    (tmp_path / "train.py").write_text(TRAIN)
    env = {**os.environ, "PYTHONPROFILEIMPORTTIME": "1"}  # every Python process logs its imports on stderr
    env.pop("TRIALS_SUGGEST", None)
    out = subprocess.run([sys.executable, "-m", "trials", "sweep", "spec.yaml", "--job-id", "gp", "--seed", "1",
                          "--", sys.executable, "train.py"], capture_output=True, text=True, cwd=tmp_path,
                         env=env, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "job gp JOB_STATE_SUCCEEDED: 13 succeeded" in out.stdout
    imported = {line.rsplit("|", 1)[-1].strip() for line in out.stderr.splitlines() if line.startswith("import time:")}
    assert "optuna" in imported and not imported & {"torch", "scipy"}  # the controller's own imports
    worker_log = (tmp_path / "trials-jobs" / "gp" / "sampler.log").read_text()
    in_worker = {line.rsplit("|", 1)[-1].strip() for line in worker_log.splitlines() if line.startswith("import time:")}
    assert {"trials.study.npgp", "scipy.linalg", "optuna._gp.batched_lbfgsb"} <= in_worker  # the worker's
    assert not in_worker & {"torch", "scipy.stats"}  # (seconds of CPU, that the trials would have lost)
    described = subprocess.run([sys.executable, "-m", "trials", "describe", "gp", "--format", "json"],
                               capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert described.returncode == 0, described.stderr
    assert described.stdout.count('"state": "SUCCEEDED"') == 13
