"""`trials validate SPEC --trainer` and the sweep's pre-flight: the spec checked against the trainer's Config."""

import os
import shutil
import subprocess
import sys

import pytest

from trials.controller.trial.preflight import is_trials_trainer
from trials.runtime.params import params_from_config
from trials.runtime.spec_check import check_params
from trials.spec.load import loads_spec

SCRIPTS = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "scripts")
GOOD = """metrics: {accuracy: maximize}
parameters:
  alpha: {type: double, min: 0.00001, max: 0.1, scale: log}
  optimizer: {type: categorical, values: [adam, sgd]}
  hidden: {type: integer, min: 16, max: 128}
max_trial_count: 2
command: [python, train.py]
args: [--epochs=1]
"""
BAD = """metrics: {accuracy: maximize}
parameters:
  alhpa: {type: double, min: 0.00001, max: 0.1, scale: log}
  optimizer: {type: categorical, values: [adam, rmsprop]}
  hidden: {type: double, min: 16, max: 128}
max_trial_count: 2
command: [python, train.py]
args: [--epochs=1, --epoch=3]
"""


def trials_cli(*argv, cwd):
    return subprocess.run([sys.executable, "-m", "trials", *argv], capture_output=True, text=True, cwd=cwd)


@pytest.fixture
def project(tmp_path):
    shutil.copy(os.path.join(SCRIPTS, "typed_trainer.py"), tmp_path / "train.py")
    (tmp_path / "good.yaml").write_text(GOOD)
    (tmp_path / "bad.yaml").write_text(BAD)
    return tmp_path


@pytest.mark.integration
def test_validate_trainer_names_every_mismatch_on_one_line(project):
    out = trials_cli("validate", "bad.yaml", "--trainer", "train.py:objective", cwd=project)
    assert out.returncode == 2
    (line,) = out.stderr.splitlines()
    assert line.startswith("trials: error: bad.yaml does not fit the trainer `trials-run train.py:objective "
                           "--epochs=1 --epoch=3` (4 problems): ")
    assert "--alhpa (a parameter of bad.yaml) is not a flag of the trainer: did you mean --alpha?" in line
    assert "--optimizer=rmsprop (in {adam, rmsprop} of bad.yaml) is refused by the trainer: --optimizer must " \
           "be one of {adam, sgd}, got 'rmsprop'" in line
    assert "spec parameter `hidden` is DOUBLE [16, 128] but the trainer's --hidden is int" in line
    assert "--epoch (in the trial's args) is not a flag of the trainer: did you mean --epochs?" in line
    assert not (project / "trials-output").exists()  # the objective never ran


@pytest.mark.integration
@pytest.mark.parametrize("how", [["--trainer"], ["--trainer", "--", "python", "train.py"]])
def test_validate_trainer_accepts_a_fitting_spec(project, how):
    out = trials_cli("validate", "good.yaml", *how, cwd=project)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[-1] == ("the trainer `python train.py --epochs=1` accepts every flag of "
                                           "good.yaml (7 values checked)")


@pytest.mark.integration
def test_validate_trainer_of_a_plain_script_reads_its_argparse_help(project):
    (project / "plain.py").write_text("import argparse\nargparse.ArgumentParser().parse_args()\n")
    out = trials_cli("validate", "good.yaml", "--trainer", "--", "python", "plain.py", cwd=project)
    assert out.returncode == 2 and out.stderr.count("\n") == 1
    # not a trials trainer: checked against the flags of its argparse --help (only -h)
    assert out.stderr.startswith("trials: error: good.yaml does not fit the argparse trainer `python plain.py "
                                 "--epochs=1` (4 problems, read from its --help): --alpha (a parameter of good.yaml) "
                                 "is not a flag of the trainer: its flags: none; "), out.stderr


@pytest.mark.integration
def test_sweep_refuses_a_spec_the_trainer_cannot_take_before_any_trial(project):
    out = trials_cli("sweep", "bad.yaml", "--job-id", "bad", cwd=project)
    assert out.returncode == 2 and out.stderr.count("\n") == 1, out.stderr
    assert "did you mean --alpha?" in out.stderr
    assert not (project / "trials-jobs").exists()
    out = trials_cli("sweep", "good.yaml", "--job-id", "good", "--quiet", cwd=project)
    assert out.returncode == 0, out.stderr
    assert (project / "trials-jobs" / "good" / "1" / "model" / "RAN").exists()


def test_conditional_parameters_and_required_fields():
    import dataclasses

    @dataclasses.dataclass
    class Config:
        must: int
        needed: str
        optimizer: str = "adam"

    study = loads_spec("""metrics: {loss: minimize}
parameters:
  optimizer:
    type: categorical
    values: [adam, sgd]
    when: [{values: [sgd], parameters: {must: {type: integer, min: 1, max: 3}}}]
""").study
    problems, n_values = check_params(params_from_config(Config), study, args=["--needed", "x"])
    assert problems == ["`must` is conditional in the spec, so some trials do not get --must, which the trainer "
                        "requires: give the field a default"]
    assert n_values == 2
    problems, _ = check_params(params_from_config(Config), study)
    assert problems[-1] == ("the trainer requires --needed (STR) but neither the spec nor the trial's args "
                            "give it")


def test_a_numeric_field_for_string_choices_says_to_make_it_a_str():
    """The trainer's message alone ("expects an integer, got 'adam'") reads as if the spec were wrong; numeric
    choices ("16", "32") convert and are no problem."""
    import dataclasses

    @dataclasses.dataclass
    class Config:
        optimizer: int = 1
        width: int = 16

    study = loads_spec("""metrics: {loss: minimize}
parameters:
  optimizer: {type: categorical, values: [adam, sgd]}
  width: {type: categorical, values: ["16", "32"]}
""").study
    problems, _ = check_params(params_from_config(Config), study)
    assert len(problems) == 1
    assert problems[0].startswith("--optimizer=adam (in {adam, sgd} of the spec) is refused by the trainer: ")
    assert problems[0].endswith(": the spec's choices are strings, so make the field a str (or a Literal of the "
                                "choices), not int")


def test_only_trials_trainers_are_asked(tmp_path):
    (tmp_path / "a.py").write_text("import trials\ntrials.main(objective, Config)\n")
    (tmp_path / "b.py").write_text("import argparse, hypertune\n")
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "train.py").write_text("from trials import main\nmain(f)\n")
    cwd = str(tmp_path)
    assert is_trials_trainer([sys.executable, "a.py", "--x=1"], cwd)
    assert not is_trials_trainer([sys.executable, "b.py"], cwd)
    assert is_trials_trainer([sys.executable, "-u", "-m", "pkg.train"], cwd)
    assert is_trials_trainer(["trials-run", "pkg.train:objective"], cwd)
    assert not is_trials_trainer(["bash", "-c", "python a.py"], cwd)
