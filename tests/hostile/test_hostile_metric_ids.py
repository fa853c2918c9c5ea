"""Metric ids cloudml-hypertune writes itself (`global_step`, `timestamp`, ...) are refused at validation."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

FORMS = {
    "short": "metrics: {{{mid}: minimize}}\nparameters:\n  x: {{type: double, min: 0, max: 1}}\n",
    "gcloud": ("studySpec:\n  metrics: [{{metricId: {mid}, goal: MINIMIZE}}]\n"
               "  parameters: [{{parameterId: x, doubleValueSpec: {{minValue: 0, maxValue: 1}}}}]\n"),
    "legacy": ("trainingInput:\n  hyperparameters:\n    goal: MINIMIZE\n    hyperparameterMetricTag: {mid}\n"
               "    params: [{{parameterName: x, type: DOUBLE, minValue: 0, maxValue: 1}}]\n"),
}


@pytest.mark.parametrize("command", ["validate", "sweep"])
@pytest.mark.parametrize("form", sorted(FORMS))
@pytest.mark.parametrize("mid", ["global_step", "timestamp", "trial", "checkpoint_path"])
def test_reserved_hypertune_keys_are_refused_as_metric_ids(tmp_path: Path, mid: str, form: str,
                                                            command: str) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_text(FORMS[form].format(mid=mid))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TRIALS_", "CLOUD_ML_"))}
    out = subprocess.run([sys.executable, "-m", "trials", command, str(spec), "--", "true"],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 2, out.stdout + out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and f"got `{mid}`" in lines[0] and str(spec) in lines[0], out.stderr
    assert "cloudml-hypertune writes those keys itself" in lines[0]
    assert not (tmp_path / "trials-jobs").exists()
