"""Parameter ids that look like the adapter's internal Optuna names (`x#2`, `x:reverse_log`) stay apart."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "faults"))
from faultkit import Jobs  # noqa: E402

pytestmark = [pytest.mark.faults]

CONDITIONAL = """\
metrics: {loss: minimize}
parameters:
  opt:
    type: categorical
    values: [a, b]
    when:
      - values: [a]
        parameters:
          x: {type: double, min: 0.0, max: 1.0}
      - values: [b]
        parameters:
          x: {type: double, min: 5.0, max: 6.0}
  "x#2": {type: double, min: 100.0, max: 200.0}
max_trial_count: 6
parallel_trial_count: 2
"""

REVERSE_LOG = """\
metrics: {loss: minimize}
parameters:
  x: {type: double, min: 0.1, max: 1.0, scale: reverse_log}
  "x:reverse_log": {type: double, min: 100.0, max: 200.0}
  "y%3A": {type: integer, min: 7, max: 9}
  "y:": {type: integer, min: 70, max: 90}
max_trial_count: 4
parallel_trial_count: 2
"""


def _value(v: object) -> object:
    try:
        return float(v)  # type: ignore[arg-type]
    except ValueError:
        return v


@pytest.fixture
def jobs(tmp_path: Path):
    j = Jobs(tmp_path)
    yield j
    j.cleanup()


@pytest.mark.parametrize("spec", [CONDITIONAL, REVERSE_LOG], ids=["conditional", "reverse_log"])
def test_ids_shaped_like_internal_names_run_with_their_own_values(jobs: Jobs, spec: str) -> None:
    path = jobs.root / "spec.yaml"
    path.write_text(spec)
    job_id = jobs.job_id("ids")
    out = jobs.sweep(str(path), job_id, "--fault=argv", "--epochs=1", timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    rest = jobs.describe(job_id)
    assert len(rest["trials"]) == int(spec.split("max_trial_count: ")[1].split()[0])
    for trial in rest["trials"]:
        assert trial["state"] == "SUCCEEDED", trial
        shown = {p["parameterId"]: p["value"] for p in trial["parameters"]}
        argv = json.loads((jobs.job_dir(job_id) / trial["id"] / "argv.json").read_text())
        ran = dict(arg[2:].split("=", 1) for arg in argv if arg.startswith("--") and "=" in arg
                   and not arg.startswith(("--fault=", "--epochs=")))
        assert {k: _value(v) for k, v in ran.items()} == {k: _value(v) for k, v in shown.items()}
        if "x#2" in shown:
            assert 100.0 <= float(shown["x#2"]) <= 200.0
            assert float(shown["x"]) <= 1.0 if shown["opt"] == "a" else float(shown["x"]) >= 5.0
        if "x:reverse_log" in shown:
            assert 100.0 <= float(shown["x:reverse_log"]) <= 200.0
            assert 0.1 <= float(shown["x"]) <= 1.0
            assert 7 <= int(shown["y%3A"]) <= 9 and 70 <= int(shown["y:"]) <= 90


@pytest.mark.parametrize("pid", ["x", "x#2", "x:reverse_log", "%3A", "y%3A", "y:", "%%23#:", "a%b"])
def test_optuna_names_map_ids_injectively_and_back(pid: str) -> None:
    from trials.study.space import escape_id, parameter_id_of

    name = escape_id(pid)
    assert "#" not in name and ":" not in name
    assert parameter_id_of(name) == parameter_id_of(f"{name}#3:reverse_log") == pid
