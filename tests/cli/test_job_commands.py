"""The job commands as a user types them: a mistyped job id, `trials best`'s whole command, `cancel`
of a job that has ended (exact lines)."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys

import pytest
from jobkit import fake_job

from trials.cli import main
from trials.storage_url import JOURNAL_FILE

WITH_ARGS = """
display_name: rep
metrics: {loss: minimize}
parameters:
  lr: {type: double, min: 0.001, max: 1.0, scale: log}
  width: {type: discrete, values: [8, 16, 32]}
max_trial_count: 2
parallel_trial_count: 1
command: [python, train.py]
args: [--epochs=10, --note, "two words"]
"""


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, list[str], list[str]]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out.splitlines(), captured.err.splitlines()


@pytest.mark.integration
def test_best_command_is_the_argv_the_trial_got(tmp_path):
    (tmp_path / "train.py").write_text(
        "import argparse, hypertune\n"
        "p = argparse.ArgumentParser()\n"
        "p.add_argument('--epochs', type=int)\np.add_argument('--lr', type=float)\n"
        "a = p.parse_args()\n"
        "hypertune.HyperTune().report_hyperparameter_tuning_metric("
        "hyperparameter_metric_tag='loss', metric_value=a.lr * a.epochs, global_step=1)\n")
    (tmp_path / "spec.yaml").write_text("metrics: {loss: minimize}\nparameters:\n"
                                        "  lr: {type: double, min: 0.1, max: 1.0}\n"
                                        "max_trial_count: 1\ncommand: [python, train.py]\nargs: [--epochs=3]\n")
    run = subprocess.run([sys.executable, "-m", "trials", "sweep", "spec.yaml", "--job-id", "j", "--quiet"],
                         cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    best = subprocess.run([sys.executable, "-m", "trials", "best", "j", "--format", "json"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=60)
    (b,) = json.loads(best.stdout)["best"]
    ran = json.loads((tmp_path / "trials-jobs" / "j" / "1" / "args.json").read_text())["replicas"]["workerpool0-0"]
    assert [ran[0], *b["command"][1:]] == ran and b["command"][0] == "python"
    assert b["command"][1:3] == ["train.py", "--epochs=3"] and b["cwd"] == str(tmp_path)


@pytest.mark.parametrize("command", ["describe", "best", "report", "resume", "cancel", "export"])
def test_a_mistyped_job_id_gets_a_did_you_mean(tmp_path, capsys, command):
    root = tmp_path / "jobs"
    for name in ("digits", "iris"):
        (root / name).mkdir(parents=True)
        (root / name / JOURNAL_FILE).write_text("")
    code, out, err = _run(capsys, command, "digit", "--root", str(root))
    assert code == 2 and out == []
    looked = f"no job 'digit' under {root}: did you mean digits? (looked for {root}/digit/{JOURNAL_FILE}); " \
             f"pass --root or --storage"
    assert err == ([f"trials: error: expected a spec file or a job id, got 'digit': no such file, and {looked}"]
                   if command == "export" else [f"trials: error: {looked}"])
    code, _, err = _run(capsys, command, "mnist", "--root", str(root))  # nothing close: no guess
    assert code == 2 and "did you mean" not in err[0]


def test_a_mistyped_job_id_in_a_storage_gets_a_did_you_mean(tmp_path, capsys):
    fake_job(tmp_path, outcomes=[("ok", [0.5], False)])
    storage = "journal:" + os.path.join(tmp_path, "jobs", "rep", JOURNAL_FILE)
    for command in ("describe", "cancel"):  # read without Optuna; opened through Optuna
        code, out, err = _run(capsys, command, "repp", "--storage", storage)
        assert (code, out, err) == (2, [], ["trials: error: no job 'repp' in the storage: did you mean rep?"])


def test_best_prints_the_whole_command_the_trial_ran(tmp_path, capsys):
    h = fake_job(tmp_path, WITH_ARGS, outcomes=[("ok", [0.9, 0.4], False), ("ok", [0.7], False)])
    lr = next(t.params["lr"] for t in h.store.frozen_trials() if t.number == 0)
    width = next(t.params["width"] for t in h.store.frozen_trials() if t.number == 0)
    code, out, _ = _run(capsys, "best", "rep", "--root", str(tmp_path / "jobs"))
    # fake_job's job ran `python x.py` (its command after --) in place of the spec's `python train.py`
    assert code == 0 and out == [
        "trial 1: loss=0.4",
        f"  command: python x.py --epochs=10 --note 'two words' --lr={lr!r} --width={int(width)}",
        f"  run in: {shlex.quote(os.getcwd())}",
        "  model: no AIP_MODEL_DIR (the job has no baseOutputDirectory)"]
    code, out, _ = _run(capsys, "best", "rep", "--root", str(tmp_path / "jobs"), "--format", "json")
    (best,) = json.loads("\n".join(out))["best"]
    assert best["command"] == ["python", "x.py", "--epochs=10", "--note", "two words", f"--lr={lr!r}",
                               f"--width={int(width)}"]


def test_cancel_of_a_job_that_has_ended_says_there_is_nothing_to_cancel(tmp_path, capsys):
    fake_job(tmp_path, outcomes=[("ok", [0.5], False)])
    code, out, err = _run(capsys, "cancel", "rep", "--root", str(tmp_path / "jobs"))
    assert (code, out, err) == (0, ["job rep already SUCCEEDED: nothing to cancel"], [])
    code, out, _ = _run(capsys, "describe", "rep", "--root", str(tmp_path / "jobs"))
    assert "JOB_STATE_SUCCEEDED" in out[0]



def test_best_of_a_job_whose_image_entrypoint_ran_names_it(tmp_path, capsys):
    from trials.controller.jobs import registry
    from trials.spec.load import loads_spec

    job = loads_spec("""studySpec:
  metrics: [{metricId: loss, goal: MINIMIZE}]
  parameters: [{parameterId: n, integerValueSpec: {minValue: 1, maxValue: 1}}]
maxTrialCount: 1
trialJobSpec:
  workerPoolSpecs:
  - machineSpec: {machineType: n1-standard-4}
    replicaCount: 1
    containerSpec: {imageUri: "gcr.io/p/t:1", args: [--epochs=10]}
""", source="spec.yaml")
    h = registry.create_job(job, root=str(tmp_path / "jobs"), job_id="img", spec_path=None, storage=None,
                            base_output_dir=None, project_number=None, local_command=None, cwd=str(tmp_path))
    c = h.store.claim(job.study)
    h.store.set_trial_attrs(c.storage_id, state="SUCCEEDED")
    h.store.complete(c.number, [0.5])
    code, out, _ = _run(capsys, "best", "img", "--root", str(tmp_path / "jobs"))
    assert code == 0 and out[:3] == ["trial 1: loss=0.5",
                                     "  command: the ENTRYPOINT of gcr.io/p/t:1 with --epochs=10 --n=1",
                                     f"  run in: {tmp_path}"]
