"""The package ships ``py.typed``: a user's code that uses the records and the spec model type-checks strictly."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("mypy")

USER_CODE = '''
from trials.records import Measurement
from trials.spec import ParameterSpec, ParameterType, StudySpec, MetricSpec

m = Measurement(step=3, metrics={"loss": 0.5}, timestamp=1.0)
step: int = m.step
loss: float = m.metrics["loss"]
when: float | None = m.timestamp
p = ParameterSpec(parameter_id="lr", type=ParameterType.DOUBLE, min_value=1e-4, max_value=0.1)
low, high = p.bounds()
width: float = high - low
study = StudySpec(metrics=(MetricSpec(metric_id="loss"),), parameters=(p,))
values: dict[str, float | int | str] = study.choose(lambda q: q.bounds()[0])
'''


def test_user_code_on_records_and_the_spec_model_passes_mypy_strict(tmp_path):
    (tmp_path / "user.py").write_text(USER_CODE)
    out = subprocess.run([sys.executable, "-m", "mypy", "--strict", "--no-incremental", "--follow-imports=silent",
                          "--python-version", "3.10", str(tmp_path / "user.py")],
                         capture_output=True, text=True, cwd=tmp_path,
                         env={**os.environ, "MYPYPATH": str(Path(__file__).resolve().parent.parent)})
    assert out.returncode == 0, out.stdout + out.stderr
