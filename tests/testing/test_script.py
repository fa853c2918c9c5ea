"""An unchanged argparse + hypertune trainer run as a trial by the ``run_script`` fixture (``trials.testing.script``)
and checked by ``ScriptContract``: in-process and as a subprocess, with the real cloudml-hypertune library."""

from __future__ import annotations

import os
import signal
import sys

import pytest

pytest_plugins = ["pytester"]

# What Vertex users write: argparse flags, hypertune reports, the model under AIP_MODEL_DIR; a checkpoint each
# epoch and a resume from it; SIGTERM ends it after the epoch it is in.
GOOD = '''
import argparse, json, os, signal, sys, time
import hypertune
import helper  # a module beside the script, as trainer/ packages have

parser = argparse.ArgumentParser()
parser.add_argument("--learning_rate", type=float, required=True)
parser.add_argument("--layers", type=int, default=1)
parser.add_argument("--epochs", type=int, default=3)
parser.add_argument("--sleep", type=float, default=0.0)
args = parser.parse_args()
stop = []
signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
ckpt = os.path.join(os.environ["AIP_CHECKPOINT_DIR"], "state.json")
start = json.load(open(ckpt))["epoch"] + 1 if os.path.exists(ckpt) else 1
ht = hypertune.HyperTune()
for epoch in range(start, args.epochs + 1):
    time.sleep(args.sleep)
    ht.report_hyperparameter_tuning_metric(hyperparameter_metric_tag="accuracy",
                                           metric_value=helper.score(args.learning_rate, epoch), global_step=epoch)
    with open(ckpt, "w") as f:
        json.dump({"epoch": epoch}, f)
    if stop:
        sys.exit(0)
os.makedirs(os.environ["AIP_MODEL_DIR"], exist_ok=True)
with open(os.path.join(os.environ["AIP_MODEL_DIR"], "model.json"), "w") as f:
    json.dump({"layers": args.layers}, f)
print("trained", args.learning_rate)
'''
HELPER = "def score(lr, epoch):\n    return round(1 - lr / epoch, 6)\n"
# Reports the metric, saves a model, but no checkpoint and no SIGTERM handler (most Vertex trainers).
PLAIN = '''
import argparse, os, time
import hypertune
parser = argparse.ArgumentParser()
parser.add_argument("--learning_rate", type=float, required=True)
parser.add_argument("--layers", type=int, default=1)
parser.add_argument("--epochs", type=int, default=3)
parser.add_argument("--sleep", type=float, default=0.0)
args = parser.parse_args()
for epoch in range(1, args.epochs + 1):
    time.sleep(args.sleep)
    hypertune.HyperTune().report_hyperparameter_tuning_metric(
        hyperparameter_metric_tag=os.environ.get("TAG", "accuracy"), metric_value=0.5, global_step=epoch)
os.makedirs(os.environ["AIP_MODEL_DIR"], exist_ok=True)
open(os.path.join(os.environ["AIP_MODEL_DIR"], "model.txt"), "w").write("m")
'''
SPEC = """
metrics: {accuracy: maximize}
parameters:
  learning_rate: {type: double, min: 0.001, max: 0.5, scale: log}
  layers: {type: integer, min: 1, max: 4}
"""


@pytest.fixture
def project(tmp_path):
    (tmp_path / "trainer").mkdir()
    (tmp_path / "trainer" / "__init__.py").write_text("")
    (tmp_path / "trainer" / "task.py").write_text(GOOD.replace("import helper", "from trainer import helper"))
    (tmp_path / "trainer" / "helper.py").write_text(HELPER)
    (tmp_path / "task.py").write_text(GOOD)
    (tmp_path / "helper.py").write_text(HELPER)
    (tmp_path / "plain.py").write_text(PLAIN)
    (tmp_path / "config.yaml").write_text(SPEC)
    return tmp_path


def test_a_script_runs_in_process_with_the_trials_flags_and_environment(run_script, project, trial_env):
    before_argv, before_path, before_handler = sys.argv[:], sys.path[:], signal.getsignal(signal.SIGTERM)
    run = run_script("task.py", {"learning_rate": 0.1, "layers": 2}, args=["--epochs=3"], cwd=str(project))
    assert run.exit_code == 0, run.stderr
    assert run.argv == ["--epochs=3", "--learning_rate=0.1", "--layers=2"]
    assert [(r.step, r.tag, r.value) for r in run.reports] == [(1, "accuracy", 0.9), (2, "accuracy", 0.95),
                                                               (3, "accuracy", pytest.approx(0.966667))]
    assert run.tags == ["accuracy"] and run.steps("accuracy") == [1, 2, 3]
    assert run.model_files() == ["model.json"] and run.checkpoint_files() == ["state.json"]
    assert run.model_dir == trial_env.model_dir and "trained 0.1" in run.stdout
    # the test's process is as it was: argv, path, the SIGTERM handler, the script's own modules forgotten
    assert (sys.argv, sys.path, signal.getsignal(signal.SIGTERM)) == (before_argv, before_path, before_handler)
    assert "helper" not in sys.modules


def test_a_restart_is_the_next_attempt_in_the_same_folders(run_script, project):
    first = run_script("task.py", {"learning_rate": 0.1}, args=["--epochs=2"], cwd=str(project))
    second = run_script("task.py", {"learning_rate": 0.1}, args=["--epochs=4"], cwd=str(project), attempt=1)
    assert first.steps("accuracy") == [1, 2] and second.steps("accuracy") == [3, 4]  # each start its own file
    assert os.environ["TRIALS_ATTEMPT"] == "1"


def test_argparse_errors_and_exceptions_are_the_exit_python_gives(run_script, project):
    bad = run_script("task.py", ["--learning_rate=0.1", "--bogus=1"], cwd=str(project))
    assert bad.exit_code == 2 and "unrecognized arguments: --bogus=1" in bad.stderr
    (project / "boom.py").write_text("raise RuntimeError('no data')\n")
    boom = run_script("boom.py", cwd=str(project))
    assert boom.exit_code == 1 and isinstance(boom.error, RuntimeError) and "no data" in boom.stderr
    (project / "exits.py").write_text("import sys; sys.exit('bad config')\n")
    exits = run_script("exits.py", cwd=str(project))
    assert exits.exit_code == 1 and "bad config" in exits.stderr


def test_a_module_runs_as_python_m_in_process_and_as_a_subprocess(run_script, project):
    run = run_script("trainer.task", {"learning_rate": 0.2}, args=["--epochs=2"], module=True, cwd=str(project))
    assert run.exit_code == 0, run.stderr
    assert run.values("accuracy") == [0.8, 0.9] and run.model_files() == ["model.json"]
    run = run_script("trainer.task", {"learning_rate": 0.2}, args=["--epochs=3"], module=True, cwd=str(project),
                     subprocess_run=True, attempt=1)  # (resumes from the first run's checkpoint)
    assert run.exit_code == 0, run.stderr
    assert run.steps("accuracy") == [3] and run.values("accuracy") == [pytest.approx(1 - 0.2 / 3)]
    assert "trainer" not in sys.modules


def test_sigterm_after_a_report_handled_or_not(run_script, project):
    handled = run_script("task.py", {"learning_rate": 0.1}, args=["--epochs=50", "--sleep=0.2"], cwd=str(project),
                         subprocess_run=True, sigterm_after_reports=1)
    assert handled.exit_code == 0 and handled.signal is None, handled
    assert 1 <= len(handled.steps("accuracy")) < 50
    killed = run_script("plain.py", {"learning_rate": 0.1}, args=["--epochs=50", "--sleep=0.2"], cwd=str(project),
                        subprocess_run=True, sigterm_after_reports=1)
    assert killed.signal == signal.SIGTERM and killed.exit_code == -signal.SIGTERM, killed
    with pytest.raises(ValueError, match="subprocess_run=True"):
        run_script("plain.py", sigterm_after_reports=1)


CONTRACT = '''
from trials.testing import ScriptContract

class TestTrainer(ScriptContract):
    script = "{script}"
    spec = "config.yaml"
    args = ["--epochs=3", "--sleep={sleep}"]
    cwd = {cwd!r}
'''


def _contract(pytester, project, script, sleep=0.0, env=None):
    pytester.makepyfile(test_contract=CONTRACT.format(script=script, sleep=sleep, cwd=str(project)))
    with pytest.MonkeyPatch.context() as mp:
        for k, v in (env or {}).items():
            mp.setenv(k, v)
        return pytester.runpytest_subprocess("-q", "-rs", "-p", "no:cacheprovider")


def test_the_contract_passes_a_trainer_that_checkpoints_and_handles_sigterm(pytester, project):
    result = _contract(pytester, project, "task.py", sleep=0.3)
    result.assert_outcomes(passed=5)


def test_the_contract_recommends_resume_and_sigterm_to_a_plain_trainer(pytester, project):
    result = _contract(pytester, project, "plain.py", sleep=0.3)
    result.assert_outcomes(passed=3, skipped=2)
    text = result.stdout.str()
    assert "recommended: the trainer wrote nothing to AIP_CHECKPOINT_DIR" in text
    assert "recommended: did not handle SIGTERM: killed by it, nothing saved" in text


def test_the_contract_fails_a_trainer_reporting_another_tag(pytester, project):
    result = _contract(pytester, project, "plain.py", env={"TAG": "val_accuracy"})
    outcomes = result.parseoutcomes()
    assert outcomes.get("failed") == 1, result.stdout.str()
    assert "the spec's metric 'accuracy' never reached the hypertune file (it reported val_accuracy)" in \
        result.stdout.str()


def test_the_contract_fails_a_trainer_that_checkpoints_and_starts_over(pytester, project):
    (project / "forgets.py").write_text(GOOD.replace("if os.path.exists(ckpt) else 1", "if False else 1"))
    result = _contract(pytester, project, "forgets.py", sleep=0.3)
    result.assert_outcomes(passed=4, failed=1)
    assert "but started over after a restart" in result.stdout.str()


def test_the_contract_names_a_flag_the_trainer_does_not_take(pytester, project):
    (project / "narrow.py").write_text(PLAIN.replace('parser.add_argument("--layers", type=int, default=1)\n', ""))
    result = _contract(pytester, project, "narrow.py")
    text = result.stdout.str()
    assert "the trainer's --help lists no flag for layers" in text, text
