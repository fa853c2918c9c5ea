"""trials sweep --warm-start end to end: a trial that fails warm runs again fresh, both attempts recorded."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the host sandbox needs Linux")

SPEC = """
display_name: warm
metrics: {loss: minimize}
parameters:
  x: {type: double, min: 0.0, max: 1.0}
max_trial_count: 4
parallel_trial_count: 1
"""

TRAINER = """
import gc, sys
import hypertune
if gc.get_freeze_count() > 0:  # started warm: this trainer cannot run so
    sys.exit(1)
hypertune.HyperTune().report_hyperparameter_tuning_metric(
    hyperparameter_metric_tag="loss", metric_value=1.0, global_step=1)
"""


def sweep(tmp_path, *args):
    (tmp_path / "spec.yaml").write_text(SPEC)
    (tmp_path / "train.py").write_text(textwrap.dedent(TRAINER))
    env = {**os.environ, "PATH": f"{os.path.dirname(sys.executable)}:{os.environ.get('PATH', '')}"}
    return subprocess.run([sys.executable, "-m", "trials", "sweep", "spec.yaml", "--json-logs", *args, "--",
                           "python", "train.py"], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=300, check=False)


def test_a_trial_failing_warm_is_retried_fresh_and_both_attempts_are_recorded(tmp_path):
    proc = sweep(tmp_path, "--warm-start")
    events = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    done = [e for e in events if e.get("event") == "trial_done"]
    assert [e["state"] for e in done] == ["SUCCEEDED"] * 4, proc.stdout + proc.stderr
    restarts = [e for e in events if e.get("event") == "replica_restart"]
    assert restarts, proc.stdout  # trials 2..4 failed warm once (the first is the fresh survey)
    from trials.controller.jobs import registry

    job_id = os.listdir(tmp_path / "trials-jobs")[0]
    h = registry.open_job(job_id, root=str(tmp_path / "trials-jobs"), storage=None)
    attempts = [a["attempts"] for _, a in sorted(h.store.trial_attrs("attempts").items())]
    assert [a["exitStatus"] for a in attempts[-1]] == [1, 0], attempts


def test_warm_start_is_the_host_runtimes_only(tmp_path):
    from trials.controller.process.host import HostBackend
    from trials.controller.warm.backend import warm_backend
    from trials.errors import ConfigError

    host = HostBackend(launch_dir=str(tmp_path), job_dir=str(tmp_path / "job"), gcs_root=str(tmp_path / "gcs"))
    with pytest.raises(ConfigError, match="--warm-start: expected the host runtime, got --runtime podman"):
        warm_backend(host, runtime="podman", job_dir=str(tmp_path / "job"))
