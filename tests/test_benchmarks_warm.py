"""The warm-start benchmark's pure parts: its spec, its comparison, its stamped trainer (no timing asserts)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from benchmarks import warm_start as ws
from trials.spec.load import loads_spec
from trials.study.space import grid_size


def test_the_spec_is_the_users_grid_of_16_with_its_args():
    job = loads_spec(ws.spec_text(ws.FULL))
    assert grid_size(job.study) == 16 == ws.FULL.n_trials
    pool = job.trial_job.worker_pools[0]
    assert pool.args == ("--epochs=12",) and job.parallel_trial_count == 2


def test_compare_names_the_first_step_that_differs_and_a_short_run():
    ref = {"a": [0.1, 0.2, 0.3], "b": [0.5, 0.6, 0.7]}
    assert ws.compare(ref, {"a": [0.1, 0.2, 0.3], "b": [0.5, 0.6, 0.7]}, 3) == []
    assert ws.compare(ref, {"a": [0.1, 0.25, 0.3], "b": [0.5, 0.6]}, 3) == ["a: step 2 0.25 != 0.2",
                                                                            "b: 2 steps, not 3"]
    assert ws.compare(ref, {"a": [0.1, 0.2, 0.3]}, 3) == ["parameter sets differ: ['b']"]


def test_the_stamped_trainer_runs_and_writes_its_three_stamps(tmp_path):
    pytest.importorskip("torch", reason="the warm benchmark's trainer needs torch (and scikit-learn)")
    pytest.importorskip("sklearn", reason="the warm benchmark's trainer needs scikit-learn")
    with open(ws.TRAINER, encoding="utf-8") as f:
        (tmp_path / "train.py").write_text(ws.probe_source(f.read()))
    env = {**os.environ, "TRIALS_PROBE_OUT": str(tmp_path / "probe"), "OMP_NUM_THREADS": "1",
           "CLOUD_ML_HP_METRIC_FILE": str(tmp_path / "metrics")}
    subprocess.run([sys.executable, "train.py", "--epochs=1", "--hidden=8"], cwd=tmp_path, env=env, check=True,
                   capture_output=True, timeout=300)
    first, imported, end = (float(x) for x in (tmp_path / "probe").read_text().split())
    assert first <= imported <= end
