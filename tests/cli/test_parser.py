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


def test_other_unknown_arguments_keep_argparse_usage(tmp_path):
    out = trials_cli("sweep", "spec.yaml", "--bogus", cwd=tmp_path)
    assert out.returncode == 2 and "unrecognized arguments: --bogus" in out.stderr
    out = trials_cli("describe", "job", "extra", cwd=tmp_path)
    assert out.returncode == 2 and "unrecognized arguments: extra" in out.stderr and "`--`" not in out.stderr


def test_validate_trainer_without_double_dash(tmp_path):
    out = trials_cli("validate", "spec.yaml", "--trainer", "python", "train.py", cwd=tmp_path)
    assert out.returncode == 2 and out.stderr == (
        "trials validate: error: unexpected arguments 'python train.py': put the trainer's command after `--`, "
        "as in `trials validate spec.yaml --trainer -- python train.py`\n")
