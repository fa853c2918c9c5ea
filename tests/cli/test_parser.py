"""The CLI's argument rules a new user trips over: the trainer's command goes after `--`."""

import subprocess
import sys

import pytest


def trials_cli(*argv, cwd=None):
    return subprocess.run([sys.executable, "-m", "trials", *argv], capture_output=True, text=True, cwd=cwd)


@pytest.mark.parametrize("command", ["sweep", "validate", "check"])
def test_a_command_without_double_dash_says_where_it_goes(tmp_path, command):
    out = trials_cli(command, "spec.yaml", "python", "train.py", "--epochs=3", cwd=tmp_path)
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.count("\n") == 1, out.stderr
    assert out.stderr == (f"trials {command}: error: unexpected arguments 'python train.py --epochs=3': put the "
                          f"trainer's command after `--`, as in `trials {command} spec.yaml [options] -- "
                          f"python train.py --epochs=3`\n")
    assert not (tmp_path / "trials-jobs").exists()


def test_a_mistyped_option_gets_the_subcommand_usage_and_a_did_you_mean(tmp_path):
    out = trials_cli("sweep", "config.yaml", "--max-trail-count", "5", cwd=tmp_path)
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.splitlines() == [
        "usage: trials sweep SPEC [options] [-- LOCAL COMMAND...]",
        "trials sweep: error: unrecognized arguments: --max-trail-count 5; did you mean --max-trial-count?"]
    out = trials_cli("describe", "job", "--formt=json", "--sed", cwd=tmp_path)
    assert out.returncode == 2
    assert out.stderr.splitlines() == [
        "usage: trials describe [-h] [--root ROOT] [--storage STORAGE]",
        "                       [--format {table,json,csv,local-json}]",
        "                       job",
        "trials describe: error: unrecognized arguments: --formt=json --sed; --formt: did you mean --format?"]
    assert not (tmp_path / "trials-jobs").exists()


def test_other_unknown_arguments_get_the_subcommand_usage(tmp_path):
    out = trials_cli("sweep", "spec.yaml", "--bogus", cwd=tmp_path)
    assert out.returncode == 2 and out.stderr.splitlines() == [
        "usage: trials sweep SPEC [options] [-- LOCAL COMMAND...]",
        "trials sweep: error: unrecognized arguments: --bogus"]
    out = trials_cli("cancel", "job", "extra", cwd=tmp_path)
    assert out.returncode == 2 and out.stderr.splitlines() == [
        "usage: trials cancel [-h] [--root ROOT] [--storage STORAGE] job",
        "trials cancel: error: unrecognized arguments: extra"]
    out = trials_cli("best", "job", "--debug", cwd=tmp_path)
    assert out.returncode == 2 and out.stderr.splitlines()[-1] == (
        "trials best: error: unrecognized arguments: --debug; --debug is an option of trials itself: put it "
        "before the command (trials --debug best ...)")


def test_validate_trainer_without_double_dash(tmp_path):
    out = trials_cli("validate", "spec.yaml", "--trainer", "python", "train.py", cwd=tmp_path)
    assert out.returncode == 2 and out.stderr == (
        "trials validate: error: unexpected arguments 'python train.py': put the trainer's command after `--`, "
        "as in `trials validate spec.yaml --trainer -- python train.py`\n")
