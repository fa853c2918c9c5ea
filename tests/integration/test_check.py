"""`trials check` on real trainers: each small trainer breaks one Vertex rule and is flagged for exactly
that one; a trainer that follows them all, and the repository's examples, pass."""

import json
import os
import re
import sys
from pathlib import Path

import pytest

from trials.cli import main

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
TRAINER = str(ROOT / "tests" / "scripts" / "check_trainer.py")
SHORT = """
metrics:
  accuracy: maximize
parameters:
  learning_rate: {type: double, min: 0.01, max: 0.1}
  epochs: {type: integer, min: 4, max: 8}
"""
TWO_POOLS = """
studySpec:
  metrics: [{metricId: accuracy, goal: MAXIMIZE}]
  parameters:
  - {parameterId: learning_rate, doubleValueSpec: {minValue: 0.01, maxValue: 0.1}}
  - {parameterId: epochs, integerValueSpec: {minValue: 4, maxValue: 8}}
maxTrialCount: 1
trialJobSpec:
  workerPoolSpecs:
  - {machineSpec: {machineType: n1-standard-4}, replicaCount: 1, containerSpec: {imageUri: local}}
  - {machineSpec: {machineType: n1-standard-4}, replicaCount: 1, containerSpec: {imageUri: local}}
"""


def check(tmp_path, capsys, monkeypatch, spec_text, *command, extra=(), base=True):
    """``base``: the job has a base output directory (check_trainer saves to AIP_CHECKPOINT_DIR)."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "spec.yaml").write_text(spec_text)
    code = main(["check", "spec.yaml", "--format", "json", "--grace-period", "3",
                 *(["--base-output-dir", "gs://bucket/check"] if base else []), *extra, "--", *command])
    card = json.loads(capsys.readouterr().out)
    flagged = {c["check"]: c["verdict"] for c in card["checks"] if c["verdict"] in ("warn", "fail")}
    return code, flagged, card


@pytest.mark.parametrize(("rule", "spec", "check_name"), [
    ("no-checkpoint", SHORT, "resume after restart"),  # with --strict (else a warning: see below)
    ("ignores-sigterm", SHORT, "SIGTERM"),
    ("wrong-tag", SHORT, "metric tag"),
    ("no-global-step", SHORT, "global step"),
    ("every-replica-reports", TWO_POOLS, "primary replica only"),
    ("writes-workdir", SHORT, "writes outside AIP dirs"),
    ("implicit-project", SHORT, "host cloud identity"),
])
def test_a_trainer_that_breaks_one_rule_is_flagged_for_exactly_that_one(tmp_path, capsys, monkeypatch, rule, spec,
                                                                        check_name):
    strict = ("--strict",) if rule == "no-checkpoint" else ()  # Vertex recommends resuming, does not require it
    code, flagged, card = check(tmp_path, capsys, monkeypatch, spec, sys.executable, TRAINER, f"--break={rule}",
                                "--epoch_s=0.3", extra=strict)
    assert flagged == {check_name: "fail"}, card
    assert code == 1 and card["ready"] is False


def test_a_trainer_that_starts_over_after_a_restart_is_warned_and_still_ready(tmp_path, capsys, monkeypatch):
    code, flagged, card = check(tmp_path, capsys, monkeypatch, SHORT, sys.executable, TRAINER,
                                "--break=no-checkpoint", "--epoch_s=0.3")
    assert flagged == {"resume after restart": "warn"}, card
    assert code == 0 and card["ready"] is True


@pytest.mark.parametrize("spec", [SHORT, TWO_POOLS], ids=["one-replica", "two-pools"])
def test_a_trainer_that_follows_the_rules_passes(tmp_path, capsys, monkeypatch, spec):
    code, flagged, card = check(tmp_path, capsys, monkeypatch, spec, sys.executable, TRAINER, "--epoch_s=0.3")
    assert flagged == {}, card
    verdicts = {c["check"]: c["verdict"] for c in card["checks"]}
    assert verdicts["resume after restart"] == "pass" and verdicts["SIGTERM"] == "pass"
    assert code == 0
    assert sorted(os.listdir(tmp_path)) == ["spec.yaml"]  # nothing left behind in the working folder


FAST = """
metrics:
  accuracy: maximize
parameters:
  learning_rate: {type: double, min: 0.01, max: 0.1}
  epochs: {type: integer, min: 10, max: 40}
"""


def test_on_a_fast_trainer_sigterm_lands_halfway_and_the_restart_resumes_from_there(tmp_path, capsys, monkeypatch):
    """10 epochs with no pause between them: the run is held after 5 reports until SIGTERM landed."""
    code, flagged, card = check(tmp_path, capsys, monkeypatch, FAST, sys.executable, TRAINER, "--epoch_s=0")
    lines = {c["check"]: c for c in card["checks"]}
    assert re.search(r"SIGTERM at step (\d+)", lines["SIGTERM"]["seen"]).group(1) == "5", card  # not at the end
    assert lines["SIGTERM"]["seen"] == "exited {} s after SIGTERM at step 5 of 10 (status 0)".format(
        lines["SIGTERM"]["seen"].split()[1]), card
    # SIGTERM at step 5: it stopped after step 5, or after the step in hand (6)
    assert lines["resume after restart"]["seen"] in (
        "resumed at step 6 after a restart at step 5; none lost or twice",
        "resumed at step 7 after a restart at step 6; none lost or twice"), card
    assert flagged == {} and code == 0


def test_on_a_fast_trainer_a_restart_that_does_not_resume_fails(tmp_path, capsys, monkeypatch):
    """It takes its checkpoint for a finished training: the restart exits 0 with the last steps missing."""
    code, flagged, card = check(tmp_path, capsys, monkeypatch, FAST, sys.executable, TRAINER, "--epoch_s=0",
                                "--break=done-on-restart")
    resume = next(c for c in card["checks"] if c["check"] == "resume after restart")
    assert resume["seen"] in ("the restarted replica exited 0 without reporting steps 6…10 (restarted at step 5)",
                              "the restarted replica exited 0 without reporting steps 7…10 (restarted at step 6)"), card
    assert flagged == {"resume after restart": "fail"} and code == 1


def test_a_trainer_that_is_not_held_and_ends_first_is_inconclusive(tmp_path, capsys, monkeypatch):
    """Python in isolated mode (-I) ignores PYTHONPATH, so not the probe's sitecustomize: nothing holds it,
    and its two epochs end before the loop could interrupt them."""
    two_epochs = FAST.replace("min: 10", "min: 2")
    code, flagged, card = check(tmp_path, capsys, monkeypatch, two_epochs, sys.executable, "-I", TRAINER,
                                "--epoch_s=0")
    lines = {c["check"]: c for c in card["checks"]}
    assert lines["SIGTERM"]["verdict"] == "warn" and lines["SIGTERM"]["seen"].startswith("inconclusive: "), card
    assert lines["SIGTERM"]["fix"] == ("run more epochs or steps (--params epochs=8) so that the run can be "
                                       "interrupted halfway")
    assert lines["resume after restart"]["verdict"] == "warn" and code == 0


@pytest.mark.long
def test_the_repository_examples_pass(capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    for argv in (["check", "examples/argparse_hypertune/config.yaml", "--format", "json", "--",
                  sys.executable, "examples/argparse_hypertune/train.py"],
                 ["check", "search_spaces/digits_mlp.yaml", "--format", "json"]):
        code = main(argv)
        card = json.loads(capsys.readouterr().out)
        assert code == 0, card
        assert not [c for c in card["checks"] if c["verdict"] in ("warn", "fail")], card


@pytest.mark.parametrize("soft", [False, True], ids=["subscript", "get-then-crash"])
def test_without_a_base_a_trainer_reading_aip_dirs_fails_the_check(tmp_path, capsys, monkeypatch, soft):
    """Vertex sets AIP_* only with a baseOutputDirectory: os.environ["AIP_CHECKPOINT_DIR"] raises there."""
    code, flagged, card = check(tmp_path, capsys, monkeypatch, SHORT, sys.executable, TRAINER, "--epoch_s=0.1",
                                *(["--soft-aip"] if soft else []), base=False)
    line = next(c for c in card["checks"] if c["check"] == "AIP_* outputs")
    assert line["verdict"] == "fail" and "$AIP_CHECKPOINT_DIR" in line["seen"], card
    assert "no baseOutputDirectory" in line["seen"] and "baseOutputDirectory.outputUriPrefix" in line["fix"]
    assert code == 1 and card["ready"] is False


def test_without_a_base_a_trainer_that_does_without_aip_dirs_passes(tmp_path, capsys, monkeypatch):
    script = tmp_path.parent / f"{tmp_path.name}-optional.py"
    script.write_text(
        "import os, sys, hypertune\n"
        "model = os.environ.get('AIP_MODEL_DIR')  # unset without a base: nothing to save there\n"
        "ht = hypertune.HyperTune()\n"
        "for step in range(1, 4):\n"
        "    ht.report_hyperparameter_tuning_metric(hyperparameter_metric_tag='accuracy', metric_value=0.5,"
        " global_step=step)\n")
    code, flagged, card = check(tmp_path, capsys, monkeypatch, SHORT, sys.executable, str(script), base=False)
    verdicts = {c["check"]: c for c in card["checks"]}
    assert verdicts["AIP_* outputs"]["verdict"] == "info", card
    seen = verdicts["AIP_* outputs"]["seen"]
    assert "$AIP_MODEL_DIR" in seen and "did without it" in seen
    assert verdicts["model in AIP_MODEL_DIR"]["verdict"] == "skip"
    assert "AIP_* outputs" not in flagged


def test_the_text_scorecard_says_what_to_change(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "spec.yaml").write_text(SHORT)
    code = main(["check", "spec.yaml", "--base-output-dir", "gs://b/c", "--", sys.executable, TRAINER,
                 "--break=wrong-tag", "--epoch_s=0.1"])
    out = capsys.readouterr().out
    assert code == 1
    assert "FAIL  metric tag" in out and "reported val_acc" in out and "hyperparameter_metric_tag='accuracy'" in out
    assert out.rstrip().splitlines()[-1].endswith("failed, 6 not applicable") or "1 failed" in out


def test_bad_params_are_one_line_errors(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "spec.yaml").write_text(SHORT)
    assert main(["check", "spec.yaml", "--params", "learning_rate=5", "--", sys.executable, TRAINER]) == 2
    err = capsys.readouterr().err
    assert "--params: learning_rate" in err and len(err.strip().splitlines()) == 1
    assert main(["check", "spec.yaml", "--params", "lr=0.05", "--", sys.executable, TRAINER]) == 2
    assert "unknown parameter 'lr'" in capsys.readouterr().err


def test_without_the_sandbox_writes_are_still_seen_and_the_scorecard_says_why(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("TRIALS_SANDBOX", "off")
    code, flagged, card = check(tmp_path, capsys, monkeypatch, SHORT, sys.executable, TRAINER,
                                "--break=writes-workdir", "--epoch_s=0.2")
    assert flagged == {"writes outside AIP dirs": "fail"}, card
    assert any("the sandbox is off (TRIALS_SANDBOX=off)" in note for note in card["notes"])
    assert (tmp_path / "out.txt").exists()  # a plain child writes the real folder


def test_with_the_sandbox_a_trainers_writes_stay_out_of_the_working_folder(tmp_path, tmp_path_factory, capsys,
                                                                          monkeypatch):
    from trials.controller.process import sandbox

    aside = tmp_path_factory.mktemp("probe")
    if not sandbox.detect(launch_dir=str(tmp_path), job_dir=str(aside / "j"), gcs_root=str(aside / "g")).on:
        pytest.skip("no mount namespace here: the fallback is tested above")
    code, flagged, card = check(tmp_path, capsys, monkeypatch, SHORT, sys.executable, TRAINER,
                                "--break=writes-workdir", "--epoch_s=0.2")
    assert flagged == {"writes outside AIP dirs": "fail"}, card
    assert card["notes"] == [] and sorted(os.listdir(tmp_path)) == ["spec.yaml"]


@pytest.mark.parametrize("explicit", [False, True], ids=["implicit-project", "explicit-project"])
def test_a_cloud_storage_client_without_a_project_is_flagged_and_with_one_is_not(tmp_path, capsys, monkeypatch,
                                                                                 explicit):
    pytest.importorskip("google.cloud.storage")
    monkeypatch.setenv("GOOGLE_CLOUD_PROJECT", "the-host-project")  # withheld from the trial either way
    script = str(ROOT / "tests" / "scripts" / "gcs_client_trainer.py")
    spec = "metrics: {accuracy: maximize}\nparameters: {lr: {type: double, min: 0.1, max: 1}}\n"
    code, flagged, card = check(tmp_path, capsys, monkeypatch, spec, sys.executable, script,
                                *(["--explicit"] if explicit else []))
    verdicts = {c["check"]: c for c in card["checks"]}
    identity = verdicts["host cloud identity"]
    if explicit:
        assert identity["verdict"] == "pass", card
    else:
        assert identity["verdict"] == "fail" and "implicit project" in identity["seen"], card
