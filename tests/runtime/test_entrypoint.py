"""Tests for trials.runtime.entrypoint: trials.main / run / trials-run, exit codes, final value, errors."""

import dataclasses
import json
import os
import subprocess
import sys

import pytest

import trials
from trials import protocol
from trials.errors import FlagError
from trials.runtime.context import RunOptions
from trials.runtime.entrypoint import main, resolve_target, run, run_main
from trials.runtime.objective import _call_style, failure_summary
from trials.runtime.reporting import read_hypertune_file, read_metrics_log
from trials.spec import MetricSpec, ParameterSpec, ParameterType, StudySpec

SCRIPTS = os.path.join(os.path.dirname(os.path.dirname(__file__)), "scripts")
COUNTER = os.path.join(SCRIPTS, "counter_trial.py")


@dataclasses.dataclass
class Config:
    learning_rate: float = 0.1
    epochs: int = 3


def objective(config, ctx):
    for step in ctx.steps(config.epochs):
        ctx.report(step, accuracy=config.learning_rate * step)
        ctx.checkpoint({"step": step}, step)
    return config.learning_rate * config.epochs


def test_main_returns_the_code_with_explicit_argv(trial_env):
    assert main(objective, Config, argv=["--learning_rate=0.2"], tensorboard=False) == 0
    assert [m.step for m in read_hypertune_file(trial_env.metric_file)] == [1, 2, 3]
    assert trials.main is main  # the lazy public name


def test_main_exits_when_asked(trial_env):
    with pytest.raises(SystemExit) as info:
        main(objective, Config, argv=["--epochs=x"], exit=True)
    assert info.value.code == protocol.EXIT_USAGE


def test_bad_flag_is_exit_2_with_one_line(trial_env, capsys):
    outcome = run(objective, Config, argv=["--nope=1"], prog="train.py")
    err = capsys.readouterr().err
    assert outcome.exit_code == protocol.EXIT_USAGE
    assert err.strip().splitlines() == [
        "train.py: error: unknown flag '--nope=1'; known flags: --learning_rate, --epochs"]


def test_help_lists_parameters_and_exits_0(trial_env, capsys):
    outcome = run(objective, Config, argv=["--help"], prog="train.py")
    out = capsys.readouterr().out
    assert outcome.exit_code == 0 and "--learning_rate FLOAT" in out and "--epochs INT" in out
    assert not os.path.exists(trial_env.trial_dir)  # help runs nothing


def test_spec_object_bounds_are_checked(trial_env, capsys):
    study = StudySpec(metrics=(MetricSpec(metric_id="accuracy"),), parameters=(
        ParameterSpec(parameter_id="learning_rate", type=ParameterType.DOUBLE, min_value=0.01,
                      max_value=0.5),))
    outcome = run(objective, Config, spec=study, argv=["--learning_rate=0.9"])
    assert outcome.exit_code == 2 and "[0.01, 0.5]" in capsys.readouterr().err


def go(objective_fn, *args, **kwargs):
    """run() with no flags (run's own default is sys.argv, here pytest's)."""
    return run(objective_fn, *args, argv=[], **kwargs)


def log_of(sandbox):
    return [(m.step, dict(m.metrics)) for m in
            read_metrics_log(os.path.join(sandbox.trial_dir, protocol.METRICS_LOG))]


def test_returned_number_is_reported_as_a_final_step(trial_env):
    assert go(lambda ctx: 0.75, options=RunOptions(metric="accuracy", tensorboard=False)
               ).exit_code == 0
    assert log_of(trial_env) == [(1, {"accuracy": 0.75})]


def test_returned_number_takes_the_spec_metric(trial_env):
    study = StudySpec(metrics=(MetricSpec(metric_id="auc"),), parameters=())
    go(lambda ctx: 0.5, spec=study, options=RunOptions(tensorboard=False))
    assert log_of(trial_env) == [(1, {"auc": 0.5})]


def test_returned_value_already_reported_is_not_reported_again(trial_env):
    outcome = go(objective, Config, options=RunOptions(tensorboard=False))
    assert outcome.value == pytest.approx(0.3)
    assert [s for s, _ in log_of(trial_env)] == [1, 2, 3]  # 0.3 == accuracy at step 3


def test_returned_dict_is_reported_after_the_last_step(trial_env):
    def obj(ctx):
        ctx.report(1, accuracy=0.1)
        return {"accuracy": 0.9, "loss": 0.2}

    go(obj, options=RunOptions(tensorboard=False))
    assert log_of(trial_env) == [(1, {"accuracy": 0.1}), (2, {"accuracy": 0.9, "loss": 0.2})]


def test_exception_is_exit_1_logged_once_and_summarised_last(trial_env, capsys, caplog):
    def obj(ctx):
        raise KeyError("missing column")

    outcome = go(obj)
    assert outcome.exit_code == protocol.EXIT_ERROR and isinstance(outcome.error, KeyError)
    errors = [r for r in caplog.records if r.levelname == "ERROR"]
    assert len(errors) == 1 and errors[0].exc_info is not None
    assert capsys.readouterr().err.strip().splitlines()[-1] == "KeyError: 'missing column'"


def test_metrics_error_in_the_objective_is_exit_1(trial_env):
    outcome = go(lambda ctx: ctx.report(1, loss=float("nan")))
    assert outcome.exit_code == 1 and "allow_nonfinite" in str(outcome.error)


def test_stop_request_exits_75_and_flushes_a_deferred_checkpoint(trial_env):
    def obj(ctx):
        for step in ctx.steps(10):
            ctx.report(step, accuracy=step)
            ctx.checkpoint({"s": step}, step)
            if step == 2:
                ctx.request_stop()

    outcome = go(obj, options=RunOptions(checkpoint_every=5, tensorboard=False))
    assert outcome.exit_code == protocol.EXIT_STOPPED
    assert outcome.context.store.steps() == [2]


def test_system_exit_and_keyboard_interrupt(trial_env):
    def bye(ctx):
        sys.exit(3)

    def interrupted(ctx):
        raise KeyboardInterrupt

    assert go(bye).exit_code == 3
    assert go(interrupted).exit_code == protocol.EXIT_INTERRUPTED


def test_local_run_prints_where_outputs_went(trial_env, capsys):
    trial_env.local()
    outcome = go(lambda ctx: None, prog="train.py")
    err = capsys.readouterr().err
    out_dir = outcome.context.env.output_dir
    assert out_dir.startswith(trial_env.output_root)
    assert f"train.py: outputs in {out_dir}" in err
    assert sorted(os.listdir(out_dir)) == ["checkpoints", "logs", "model"]


def test_call_styles():
    class Obj:
        def __call__(self, config, ctx):
            pass

        def method(self, ctx):
            pass

    def two(config, ctx):
        pass

    assert _call_style(two) == 2 and _call_style(lambda ctx: 0) == 1
    assert _call_style(Obj()) == 2 and _call_style(Obj().method) == 1


def test_summary_names_the_type_like_a_traceback():
    assert failure_summary(ValueError("a\n b")) == "ValueError: a b"
    assert failure_summary(FlagError("x")) == "trials.errors.FlagError: x"
    assert failure_summary(RuntimeError()) == "RuntimeError"


def test_resolve_target_module_and_file(monkeypatch):
    monkeypatch.syspath_prepend(SCRIPTS)
    objective_fn, module, spec, module_dir = resolve_target("counter_trial:objective")
    assert objective_fn.__name__ == "objective" and module.Config.__name__ == "Config"
    assert spec is None and module_dir == SCRIPTS
    objective_fn, _, _, _ = resolve_target(COUNTER)
    assert objective_fn.__name__ == "objective"


@pytest.mark.parametrize("target, needle", [
    ("no_such_module_xyz:f", "no module named 'no_such_module_xyz'"),
    ("os.path:not_there", "has no function 'not_there'"),
    ("missing/file.py", "no such file"),
])
def test_resolve_target_errors(target, needle):
    with pytest.raises(FlagError, match=None) as info:
        resolve_target(target)
    assert needle in str(info.value)


def test_run_main_usage(capsys):
    assert run_main([]) == protocol.EXIT_USAGE
    assert run_main(["--help"]) == 0 and "TARGET" in capsys.readouterr().out
    assert run_main(["no_such_module_xyz"]) == protocol.EXIT_USAGE


def test_run_main_runs_a_file_target(trial_env):
    assert run_main([COUNTER, "--epochs=2", "--learning_rate=0.5"]) == 0
    assert [s for s, _ in log_of(trial_env)] == [1, 2]


def run_script(args, env_extra, tmp_path):
    env = {k: v for k, v in os.environ.items()
           if k not in protocol.VERTEX_ENV_VARS and k not in protocol.PROJECT_ENV_VARS}
    env.update(env_extra)
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, env=env,
                          cwd=tmp_path, timeout=60)


def test_subprocess_failure_last_stderr_line_and_json_error_entry(tmp_path):
    proc = run_script([COUNTER, "--fail_at=2", "--epochs=3"],
                      {"TRIALS_TRIAL_DIR": str(tmp_path / "t"), "TRIALS_LOG_FORMAT": "json",
                       "CLOUD_ML_HP_METRIC_FILE": str(tmp_path / "t" / "h")}, tmp_path)
    assert proc.returncode == 1
    lines = proc.stderr.strip().splitlines()
    assert lines[-1] == "RuntimeError: failing at step 2 as asked"
    entries = [json.loads(line) for line in lines if line.startswith("{")]
    errors = [e for e in entries if e["severity"] == "ERROR"]
    assert len(errors) == 1 and "Traceback" in errors[0]["message"]


def test_subprocess_text_mode_traceback_ends_with_the_summary_once(tmp_path):
    proc = run_script([COUNTER, "--fail_at=1"],
                      {"TRIALS_TRIAL_DIR": str(tmp_path / "t"), "TRIALS_LOG_FORMAT": "text",
                       "CLOUD_ML_HP_METRIC_FILE": str(tmp_path / "t" / "h")}, tmp_path)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 1 and lines[-1] == "RuntimeError: failing at step 1 as asked"
    assert lines.count(lines[-1]) == 1 and "Traceback (most recent call last):" in lines


def test_subprocess_bad_flag_exit_2_one_line(tmp_path):
    proc = run_script([COUNTER, "--epochs=many"], {"TRIALS_OUTPUT_ROOT": str(tmp_path)}, tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "counter_trial.py: error: --epochs expects an integer, got 'many'"]


def test_python_dash_m_entrypoint_help():
    proc = subprocess.run([sys.executable, "-m", "trials.runtime.entrypoint", "--help"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and "usage: trials-run TARGET" in proc.stdout


SWAPPED = '''
import dataclasses
import trials

@dataclasses.dataclass(frozen=True)
class Config:
    learning_rate: float = 0.1

def objective(ctx, config):  # the arguments the wrong way round
    {body}

if __name__ == "__main__":
    trials.main(objective, {config})
'''


@pytest.mark.parametrize("body, config, used", [
    ("ctx.report(1, accuracy=config.learning_rate)", "Config", "the config as the context (.report)"),
    ("print(config.learning_rate)", "Config", "the context as the config (.learning_rate)"),
    ("ctx.report(1, accuracy=0.5)", "None", "the config as the context (.report)"),  # no Config class
])
def test_swapped_objective_arguments_get_a_clear_error(tmp_path, body, config, used):
    (tmp_path / "train.py").write_text(SWAPPED.format(body=body, config=config))
    proc = run_script(["train.py"], {"TRIALS_TRIAL_DIR": str(tmp_path / "t"), "TRIALS_LOG_FORMAT": "text",
                                     "CLOUD_ML_HP_METRIC_FILE": str(tmp_path / "t" / "h")}, tmp_path)
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines()[-1] == (
        f"TypeError: the objective's arguments are swapped: it is called as objective(config, ctx) "
        f"but used {used}; define it as `def objective(config, ctx)`")


def test_an_unrelated_attribute_error_is_left_as_it_is(trial_env):
    def broken(config, ctx):
        return config.nope

    outcome = run(broken, Config, argv=[])
    assert outcome.exit_code == 1 and type(outcome.error) is AttributeError


@pytest.mark.parametrize("last_step, last_reported, n_reported, expected", [
    (None, None, 0, 1),  # nothing before: the returned value is step 1
    (3, 3, 3, 4),  # it trained: the value follows the last report
    (10, 10, 0, None),  # resumed after the last step, trained nothing: no step 11
    (4, None, 0, 5),  # a checkpoint but no report anywhere: the value is the only result
    (10, 10, 2, 11),
])
def test_final_report_step(last_step, last_reported, n_reported, expected):
    from trials.runtime.objective import final_report_step

    assert final_report_step(last_step=last_step, last_reported=last_reported, n_reported=n_reported) == expected


def test_a_resumed_run_that_trains_nothing_records_no_returned_value_and_warns(trial_env, caplog):
    def obj(ctx):
        state = ctx.restore({"w": 0})
        accuracy = 0.0
        for step in ctx.steps(3):
            accuracy = step / 10
            ctx.report(step, accuracy=accuracy)
            ctx.checkpoint({"w": step}, step)
        return {"accuracy": accuracy, "w": state["w"]}

    go(obj, options=RunOptions(tensorboard=False))
    assert [s for s, _ in log_of(trial_env)] == [1, 2, 3, 4]  # it trained: the dict is step 4
    caplog.clear()
    go(obj, options=RunOptions(tensorboard=False))  # resumed after step 3: trains nothing
    assert [s for s, _ in log_of(trial_env)] == [1, 2, 3, 4]
    warned = [r.getMessage() for r in caplog.records if "trained no step" in r.getMessage()]
    assert len(warned) == 1 and "accuracy=0.0" in warned[0], warned
