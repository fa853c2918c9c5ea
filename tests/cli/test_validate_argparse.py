"""`trials validate SPEC --trainer -- python train.py` on plain argparse trainers: the spec's flags
checked against the flags argparse's --help lists (exact lines)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPTS = Path(__file__).parents[1] / "scripts"
SPEC = """metrics: {{loss: minimize}}
parameters:
{parameters}
max_trial_count: 1
command: [python, train.py]
args: {args}
"""
GOOD = "  learning_rate: {type: double, min: 0.01, max: 0.1}\n  batch_size: {type: discrete, values: [16, 32]}"

pytestmark = pytest.mark.integration


@pytest.fixture
def project(tmp_path: Path) -> Path:
    shutil.copy(SCRIPTS / "argparse_trainer.py", tmp_path / "train.py")
    shutil.copy(SCRIPTS / "not_argparse_trainer.py", tmp_path / "plain.py")
    return tmp_path


def validate(project: Path, parameters: str, args: str, *command: str) -> subprocess.CompletedProcess[str]:
    (project / "spec.yaml").write_text(SPEC.format(parameters=parameters, args=args))
    return subprocess.run([sys.executable, "-m", "trials", "validate", "spec.yaml", "--trainer", "--",
                           *(command or ("python", "train.py"))],
                          cwd=project, capture_output=True, text=True, timeout=120)


def test_a_fitting_spec_is_checked_against_the_argparse_help(project: Path) -> None:
    out = validate(project, GOOD, "[--epochs=3, --data, /tmp/d]")
    assert out.returncode == 0 and out.stderr == ""
    assert out.stdout.splitlines()[-1] == ("the argparse trainer `python train.py --epochs=3 --data /tmp/d` takes "
                                           "every flag of spec.yaml (4 flags checked against its --help)")


def test_a_required_flag_neither_tuned_nor_in_args(project: Path) -> None:
    out = validate(project, GOOD, "[--epochs=3]")
    assert out.returncode == 2 and out.stderr.splitlines() == [
        "trials: error: spec.yaml does not fit the argparse trainer `python train.py --epochs=3` (1 problem, read "
        "from its --help): the trainer requires --data (its usage lists it without brackets) but neither "
        "spec.yaml's parameters nor the trial's args give it"]
    assert out.stdout.splitlines()[-1].startswith("  withheld") or "warning" not in out.stdout


def test_a_typo_in_a_parameter_and_in_the_args_gets_a_did_you_mean(project: Path) -> None:
    typo = GOOD.replace("batch_size", "batch_sise") + "\n  verbose: {type: integer, min: 0, max: 1}"
    out = validate(project, typo, "[--epocs=3, -d, /tmp/d]")
    assert out.returncode == 2 and out.stderr.splitlines() == [
        "trials: error: spec.yaml does not fit the argparse trainer `python train.py --epocs=3 -d /tmp/d` "
        "(3 problems, read from its --help): --batch_sise (a parameter of spec.yaml) is not a flag of the trainer: "
        "did you mean --batch_size?; --verbose takes no value in the trainer (a switch), but each trial gets "
        "--verbose=VALUE, which argparse refuses; --epocs (in the trial's args) is not a flag of the trainer: "
        "did you mean --epochs?"]


def test_a_prefix_argparse_accepts_is_a_warning(project: Path) -> None:
    prefix = GOOD.replace("learning_rate", "learning_rat")
    out = validate(project, prefix, "[--data=/tmp/d]")
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[-2:] == [
        "warning: --learning_rat (a parameter of spec.yaml) is not a flag of the trainer, but its argparse takes "
        "it as --learning_rate (a prefix: allow_abbrev, on by default); name it --learning_rate (a trainer with "
        "allow_abbrev=False, or a new option starting alike, refuses it)",
        "the argparse trainer `python train.py --data=/tmp/d` takes every flag of spec.yaml (3 flags checked "
        "against its --help)"]


def test_a_trainer_whose_help_is_not_argparse_is_not_checked(project: Path) -> None:
    out = validate(project, GOOD, "[--epochs=3]", "python", "plain.py")
    assert out.returncode == 0 and out.stderr == ""
    assert out.stdout.splitlines()[-1] == (
        "note: validation of the flags was skipped: the trainer `python plain.py --epochs=3` is not a trials.main/"
        "trials-run trainer and its --help is not argparse's (no `usage:` line: it printed `training with "
        "{'epochs': '3'} (this trainer has no --help)` and exited 0)")


def test_a_trainer_that_cannot_run_is_an_error(project: Path) -> None:
    out = validate(project, GOOD, "[]", "./no-such-trainer")
    assert out.returncode == 2 and out.stderr.splitlines() == [
        "trials: error: could not run the trainer `./no-such-trainer` to check spec.yaml: FileNotFoundError: "
        "[Errno 2] No such file or directory: './no-such-trainer'"]


def test_the_trainers_help_text_is_escaped(project: Path) -> None:
    (project / "evil.py").write_text(
        "import argparse\n"
        "p = argparse.ArgumentParser(prog='evil\\x1b[2J')\n"
        "p.add_argument('--rate\\x1b]0;pwned\\x07', required=True)\n"
        "p.parse_args()\n")
    out = validate(project, GOOD, "[]", "python", "evil.py")
    assert out.returncode == 2 and "\x1b" not in out.stderr + out.stdout and "\x07" not in out.stderr
    (line,) = out.stderr.splitlines()
    assert "--learning_rate (a parameter of spec.yaml) is not a flag of the trainer" in line


def test_a_value_the_trainer_refuses_in_the_args(project: Path) -> None:
    out = validate(project, GOOD, "[--epochs=three, --data=x]")
    assert out.returncode == 2 and out.stderr.splitlines() == [
        "trials: error: the trainer `python train.py --epochs=three --data=x` refuses the trial's args before any "
        "flag of spec.yaml: argument --epochs: invalid int value: 'three'"]


def test_a_trainer_without_help_is_not_checked(project: Path) -> None:
    (project / "nohelp.py").write_text("import argparse\np = argparse.ArgumentParser(add_help=False)\n"
                                       "p.add_argument('--learning_rate')\np.parse_args()\n")
    out = validate(project, GOOD, "[]", "python", "nohelp.py")
    assert out.returncode == 0 and out.stdout.splitlines()[-1] == (
        "note: validation of the flags was skipped: the trainer `python nohelp.py` answered --help with its usage "
        "only (`error: unrecognized arguments: --help`), which does not name every option")


def test_a_trainer_that_never_ends_or_leaves_a_child_is_killed(tmp_path: Path) -> None:
    from trials.controller.trial.preflight import NoAnswer, ask_trainer

    (tmp_path / "hang.py").write_text("import subprocess, sys, time\n"
                                      "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(601.25)'])\n"
                                      "print('usage: hang.py [-h]', flush=True)\ntime.sleep(600)\n")
    (tmp_path / "spec.yaml").write_text("metrics: {m: maximize}\nparameters:\n  x: {type: integer, min: 1, max: 2}\n")
    answer = ask_trainer([sys.executable, str(tmp_path / "hang.py")], str(tmp_path / "spec.yaml"), timeout_s=2)
    assert isinstance(answer, NoAnswer) and answer.exit_code is None
    assert answer.reason == "it did not end within 2 s of `--help`" and answer.stdout == "usage: hang.py [-h]\n"
    left = subprocess.run(["pgrep", "-f", "time.sleep(601.25)"], capture_output=True, text=True)
    assert left.stdout == ""  # its child died with it
