"""`trials export` never changes what runs on Vertex silently: the local command goes in only when asked, and
every field the export sets, changes or drops against the stored spec is said on stderr."""

from __future__ import annotations

import sys

import yaml

from trials.cli import main

CONFIG = """\
studySpec:
  metrics: [{metricId: score, goal: MAXIMIZE}]
  parameters:
  - parameterId: x
    doubleValueSpec: {minValue: 0, maxValue: 1}
maxTrialCount: 3
trialJobSpec:
  workerPoolSpecs:
  - machineSpec: {machineType: n1-standard-4}
    replicaCount: 1
    containerSpec: {imageUri: gcr.io/p/trainer:1}
"""
TRAIN = """\
import hypertune
hypertune.HyperTune().report_hyperparameter_tuning_metric(hyperparameter_metric_tag="score", metric_value=0.5,
                                                          global_step=1)
"""


def _job(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "config.yaml").write_text(CONFIG)
    (tmp_path / "train.py").write_text(TRAIN)
    assert main(["sweep", "config.yaml", "--job-id", "j", "--max-trial-count", "2", "--quiet", "--",
                 sys.executable, "train.py"]) == 0


def test_the_local_command_stays_out_unless_asked_and_the_export_says_so(tmp_path, monkeypatch, capsys):
    _job(tmp_path, monkeypatch)
    capsys.readouterr()
    assert main(["export", "j"]) == 0
    out, err = capsys.readouterr()
    pool = yaml.safe_load(out)["trialJobSpec"]["workerPoolSpecs"][0]
    assert pool["containerSpec"] == {"imageUri": "gcr.io/p/trainer:1"}  # the image's ENTRYPOINT runs, as given
    assert err.splitlines() == [
        "trials export: set displayName: \"j\"",
        f"trials export: note: the job ran locally with `{sys.executable} train.py` (after --); the export leaves "
        "it out, so on Vertex the image's ENTRYPOINT runs (--with-local-command puts it in containerSpec.command)"]
    assert main(["export", "j", "--with-local-command"]) == 0
    out, err = capsys.readouterr()
    pool = yaml.safe_load(out)["trialJobSpec"]["workerPoolSpecs"][0]
    assert pool["containerSpec"]["command"] == [sys.executable, "train.py"]
    assert (f"trials export: set trialJobSpec.workerPoolSpecs[0].containerSpec.command: "
            f"[\"{sys.executable}\", \"train.py\"]") in err.splitlines()


def test_what_image_uri_fills_in_is_said_and_a_spec_has_no_local_command(tmp_path, capsys):
    spec = tmp_path / "space.yaml"
    spec.write_text("display_name: s\nmetrics: {score: maximize}\nparameters:\n  x: {type: double, min: 0, max: 1}\n")
    assert main(["export", str(spec), "--image-uri", "gcr.io/p/t:2"]) == 0
    err = capsys.readouterr().err.splitlines()
    assert "trials export: set trialJobSpec.workerPoolSpecs[0].containerSpec.imageUri: \"gcr.io/p/t:2\"" in err
    assert "trials export: set trialJobSpec.workerPoolSpecs[0].machineSpec.machineType: \"n1-standard-4\"" in err
    assert main(["export", str(spec), "--image-uri", "gcr.io/p/t:2", "--with-local-command"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and "--with-local-command" in err[0] and "has no local command" in err[0]


def test_an_unchanged_export_says_nothing(tmp_path, capsys):
    spec = tmp_path / "config.yaml"
    spec.write_text("displayName: d\n" + CONFIG)
    assert main(["export", str(spec)]) == 0
    assert capsys.readouterr().err == ""
