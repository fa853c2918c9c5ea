"""``trials validate`` and ``trials export`` through the CLI, plus the import-weight guarantee."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from trials.cli import main
from trials.spec.load import loads_spec
from trials.spec.text import sample_trial, sample_value, summary

ROOT = Path(__file__).parents[2]
MLP = str(ROOT / "search_spaces" / "mlp.yaml")
FULL = str(ROOT / "tests" / "data" / "specs" / "full.gcloud.yaml")


def test_validate_prints_the_summary(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", MLP]) == 0
    out = capsys.readouterr().out
    assert "learning_rate" in out and "[0.001, 0.5]" in out and "log" in out
    assert "accuracy  maximize" in out
    assert "max 20, parallel 2, max failed 2" in out
    assert ("A sample trial gets: --learning_rate=0.0224 --hidden_units=16 --alpha=0.0001 "
            "--batch_size=16") in out


def test_export_rest_json_and_gcloud_yaml(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["export", FULL, "--format", "rest-json", "--image-uri", "gcr.io/p/t:1"]) == 0
    body = json.loads(capsys.readouterr().out)
    assert body["displayName"] == "full-featured"
    assert main(["export", FULL, "--draft"]) == 0  # gcloud-yaml is the default
    text = capsys.readouterr().out
    assert text.startswith("displayName: full-featured\nstudySpec:\n")
    assert main(["export", MLP, "--format", "rest-json", "--image-uri", "gcr.io/p/mlp:1"]) == 0
    body = json.loads(capsys.readouterr().out)
    assert body["trialJobSpec"]["workerPoolSpecs"][0]["containerSpec"]["imageUri"] == "gcr.io/p/mlp:1"


def test_bad_spec_exits_2_with_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("metrics: {acc: maximize}\nparameters:\n  lr: {type: double, min: 1, max: 0}\n")
    for argv in (["validate", str(bad)], ["export", str(bad)]):
        assert main(argv) == 2
        captured = capsys.readouterr()
        assert captured.out == ""
        lines = captured.err.splitlines()
        assert len(lines) == 1, captured.err
        assert str(bad) in lines[0] and "parameters.lr.max" in lines[0]
        assert "Traceback" not in captured.err


def test_export_search_space_without_image_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["export", str(ROOT / "search_spaces" / "conditional.yaml")]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "--image-uri" in err


def test_debug_shows_the_exception(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("[1, 2]")
    assert main(["--debug", "validate", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "Traceback" in err and "SpecError" in err


def test_python_m_trials_validate_in_a_subprocess() -> None:
    proc = subprocess.run([sys.executable, "-m", "trials", "validate", FULL],
                          capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    assert "A sample trial gets: --lr=0.997 --depth=4 --width=32 --optimizer=adam" in proc.stdout
    bad = subprocess.run([sys.executable, "-m", "trials", "validate", "no/such/spec.yaml"],
                         capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert bad.returncode == 2 and len(bad.stderr.splitlines()) == 1


def test_import_trials_loads_no_heavy_modules() -> None:
    code = ("import sys, trials, trials.spec, trials.protocol, trials.spec.load, "
            "trials.spec.export, trials.spec.text\n"
            "trials.spec.load.parse_spec({'metrics': {'m': 'maximize'}, 'parameters': "
            "{'x': {'type': 'integer', 'min': 1, 'max': 2}}}, source='x')\n"
            "print(sorted(m for m in ('optuna', 'yaml', 'numpy', 'sqlalchemy') "
            "if m in sys.modules))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


def test_summary_says_unset_goal_and_selection() -> None:
    job = loads_spec('{"studySpec": {"metrics": [{"metricId": "m"}], "parameters": '
                     '[{"parameterId": "x", "doubleValueSpec": {"minValue": 0, "maxValue": 1}}]}}')
    text = summary(job)
    assert "m  maximize (unset)" in text
    assert "selection: LAST (unset)" in text
    assert "stopping: none" in text
    assert "trial command: none" in text
    assert text.endswith("A sample trial gets: --x=0.5")


def test_sample_values_are_deterministic_and_feasible() -> None:
    study = loads_spec("""
metrics: {m: maximize}
parameters:
  lr: {type: double, min: 0.0001, max: 0.1, scale: log}
  n: {type: integer, min: 1, max: 100, scale: log}
  r: {type: double, min: 0.5, max: 0.999, scale: reverse_log}
  d: {type: discrete, values: [3, 5]}
  c:
    type: categorical
    values: [b, a]
    when:
    - {values: [a], parameters: {hidden: {type: integer, min: 1, max: 2}}}
    - {values: [b], parameters: {shown: {type: integer, min: 4, max: 6}}}
""").study
    values = {p.parameter_id: v for p, v in sample_trial(study)}
    assert values == {"lr": 0.00316, "n": 10, "r": sample_value(study.parameter("r")), "d": 3.0,
                      "c": "b", "shown": 5}
    assert 0.75 < values["r"] < 0.999  # reverse log leans toward the top of the range


def test_sample_uses_the_active_one_of_same_id_children() -> None:
    study = loads_spec("""
metrics: {m: maximize}
parameters:
  depth:
    type: integer
    min: 1
    max: 2
    when:
    - {values: [2], parameters: {width: {type: discrete, values: [64, 128]}}}
    - {values: [1], parameters: {width: {type: discrete, values: [8, 16]}}}
""").study
    assert [(p.parameter_id, v) for p, v in sample_trial(study)] == [("depth", 2), ("width", 64.0)]
    for p, v in sample_trial(study):
        assert p.contains(v)
