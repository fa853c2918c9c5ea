"""Testing a trainer: a sandboxed trial environment, in-process trial runs, and a contract suite.

The pytest plugin (``trials.pytest_plugin``) gives this module's sandbox and runs as the fixtures ``trial_env`` and
``run_trial``, importing it only when a test first uses one. It loads the runtime only when a trial runs, and never
optuna, yaml or numpy (a spec file is loaded only by the test that needs it).

Example:
    >>> def test_reports_accuracy(run_trial):  # doctest: +SKIP
    ...     result = run_trial(objective, Config, flags={"learning_rate": 0.1, "epochs": 3})
    ...     assert result.exit_code == 0
    ...     assert result.steps == [1, 2, 3]
    ...     assert result.metric("accuracy")[-1] > 0.5
"""

from __future__ import annotations

import os
import random
import signal
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import pytest

from trials import protocol

TRIAL_ID = "1"
JOB_ID = "pytest-job"
PROJECT_NUMBER = "123456789012"


class TrialSandbox:
    """Every ``AIP_*``/``CLOUD_ML_*``/``TRIALS_*`` variable pointed into ``tmp_path``.

    Attributes:
        root: the sandbox directory.
        env: the variables set (a copy; the process environment is changed via monkeypatch).
        trial_dir, metric_file, model_dir, checkpoint_dir, tensorboard_dir, stop_file,
        gcs_root, output_root: the paths those variables hold.
    """

    def __init__(self, root: str, monkeypatch: pytest.MonkeyPatch):
        self.root = root
        self._monkeypatch = monkeypatch
        self.trial_dir = os.path.join(root, "job", "trials", TRIAL_ID)
        base = os.path.join(root, "job", "output", TRIAL_ID)
        self.metric_file = os.path.join(self.trial_dir, protocol.HYPERTUNE_FILE)
        self.model_dir = os.path.join(base, "model")
        self.checkpoint_dir = os.path.join(base, "checkpoints")
        self.tensorboard_dir = os.path.join(base, "logs")
        self.stop_file = os.path.join(self.trial_dir, protocol.STOP_FILE)
        self.gcs_root = os.path.join(root, "gcs")
        self.output_root = os.path.join(root, "local-runs")
        for name in (*protocol.VERTEX_ENV_VARS, *protocol.PROJECT_ENV_VARS):
            monkeypatch.delenv(name, raising=False)
        self.env: dict[str, str] = {}
        self.set(**{
            protocol.ENV_TRIAL_ID: TRIAL_ID,
            protocol.ENV_JOB_ID: JOB_ID,
            protocol.ENV_PROJECT_ID: PROJECT_NUMBER,
            protocol.ENV_METRIC_FILE: self.metric_file,
            protocol.ENV_MODEL_DIR: self.model_dir + "/",
            protocol.ENV_CHECKPOINT_DIR: self.checkpoint_dir + "/",
            protocol.ENV_TENSORBOARD_LOG_DIR: self.tensorboard_dir + "/",
            protocol.ENV_TRIAL_DIR: self.trial_dir,
            protocol.ENV_STOP_FILE: self.stop_file,
            protocol.ENV_REPLICA: protocol.replica_name(0, 0),
            protocol.ENV_ATTEMPT: "0",
            protocol.ENV_GCS_ROOT: self.gcs_root,
            protocol.ENV_OUTPUT_ROOT: self.output_root,
            protocol.ENV_LOG_FORMAT: "json",
        })

    def set(self, **variables: str | None) -> None:
        """Set (or, with None, remove) variables for the rest of the test."""
        for name, value in variables.items():
            if value is None:
                self._monkeypatch.delenv(name, raising=False)
                self.env.pop(name, None)
            else:
                self._monkeypatch.setenv(name, str(value))
                self.env[name] = str(value)

    def local(self) -> TrialSandbox:
        """Remove every tuning variable: the objective runs as ``python train.py`` would."""
        keep = {protocol.ENV_OUTPUT_ROOT, protocol.ENV_LOG_FORMAT}
        self.set(**{name: None for name in list(self.env) if name not in keep})
        return self

    def stop(self) -> None:
        """Create the stop file (what the controller does to stop a trial without a signal)."""
        os.makedirs(os.path.dirname(self.stop_file), exist_ok=True)
        open(self.stop_file, "w").close()


class TrialRun:
    """The result of :func:`run_trial`: exit code, measurements read back from the files, paths."""

    def __init__(self, outcome: Any):
        from trials.runtime.reporting import read_hypertune_file, read_metrics_log

        self.outcome = outcome
        self.exit_code: int = outcome.exit_code
        self.error: BaseException | None = outcome.error
        self.config = outcome.config
        self.value = outcome.value
        self.context = outcome.context
        env = self.context.env if self.context is not None else None
        self.trial_dir = env.trial_dir if env else None
        self.model_dir = env.model_dir if env else None
        self.checkpoint_dir = env.checkpoint_dir if env else None
        self.tensorboard_dir = env.tensorboard_dir if env else None
        self.metric_file = env.metric_file if env else None
        #: this run's reports, read back from the real cloudml-hypertune file
        self.measurements = read_hypertune_file(env.metric_file) if env and env.metric_file else []
        #: every attempt's reports, from the lossless metrics.jsonl
        self.log = read_metrics_log(env.metrics_log) if env else []

    @property
    def steps(self) -> list[int]:
        """Steps in ``metrics.jsonl`` (all attempts), in file order."""
        return [m.step for m in self.log]

    def metric(self, name: str) -> list[float]:
        """One metric's values per step from ``metrics.jsonl``."""
        return [m.metrics[name] for m in self.log if name in m.metrics]

    def checkpoint_steps(self) -> list[int]:
        return self.context.store.steps() if self.context is not None else []

    def model_files(self) -> list[str]:
        if not self.model_dir or not os.path.isdir(self.model_dir):
            return []
        return sorted(os.path.relpath(os.path.join(d, f), self.model_dir)
                      for d, _, files in os.walk(self.model_dir) for f in files)

    def __repr__(self) -> str:
        return f"TrialRun(exit_code={self.exit_code}, steps={self.steps}, error={self.error!r})"


def _flag_tokens(flags: Sequence[str] | Mapping[str, Any]) -> list[str]:
    if isinstance(flags, Mapping):
        return [protocol.format_flag(k, v) for k, v in flags.items()]
    return [str(f) for f in flags]


def run_objective(sandbox: TrialSandbox, objective: Callable[..., Any], Config: type | None = None,
                  *, spec: Any = None, flags: Sequence[str] | Mapping[str, Any] = (),
                  stop_after_step: int | None = None, sigterm_after_step: int | None = None,
                  attempt: int | None = None, **options: Any) -> TrialRun:
    """Run ``objective`` in this process as a trial in ``sandbox`` (see :func:`run_trial`)."""
    from trials.runtime.context import RunOptions
    from trials.runtime.entrypoint import run

    if attempt is not None:
        sandbox.set(**{protocol.ENV_ATTEMPT: str(attempt)})
    options.setdefault("install_signals", sigterm_after_step is not None)
    options.setdefault("tensorboard", False)  # event files are not what an objective's test checks

    sent: list[int] = []

    def hook(ctx: Any) -> None:
        def on_report(ctx: Any, step: int, metrics: dict[str, float]) -> None:
            if ctx.reports_after_stop >= MAX_REPORTS_AFTER_STOP:
                raise _StopIgnored(ctx.reports_after_stop)
            if stop_after_step is not None and step >= stop_after_step:
                ctx.request_stop("stop_after_step")
            if sigterm_after_step is not None and step >= sigterm_after_step and not sent:
                # one real signal through the real handler: a second one would make the runtime
                # exit the process (os._exit), which here is pytest itself
                sent.append(step)
                os.kill(os.getpid(), signal.SIGTERM)

        ctx.on_report = on_report

    try:
        outcome = run(objective, Config, spec=spec, argv=_flag_tokens(flags),
                      options=RunOptions(**options), prog="trial", on_context=hook)
    except _StopIgnored as stop:
        ignored = stop.args[0]
    else:
        return TrialRun(outcome)
    why = "SIGTERM" if sent else "the stop request"
    pytest.fail(f"the objective ignored {why}: it reported {ignored} more steps after it, and was "
                f"stopped there by the test; it must stop between steps once ctx.should_stop is true "
                f"(loop over ctx.steps(n), or check ctx.should_stop)", pytrace=False)


MAX_REPORTS_AFTER_STOP = 20  # an objective that ignores a stop request is cut off after this many reports


class _StopIgnored(BaseException):
    """Raised out of ``ctx.report`` to end an objective that ignores stop requests (not an
    Exception, so the objective's own ``except Exception`` does not swallow it)."""


# --- Contract suite --------------------------------------------------------------------------------
def sample_flag_sets(study: Any, *, n_random: int = 1, seed: int = 0) -> list[list[str]]:
    """Flag sets that together exercise every spec parameter: its bounds or every value.

    Each set holds one parameter's value plus the parent values that make it active.
    """
    rng = random.Random(seed)
    out: list[list[str]] = []

    def values_of(p: Any) -> list[Any]:
        from trials.spec import ParameterType, ScaleType

        if p.type in (ParameterType.CATEGORICAL, ParameterType.DISCRETE):
            return list(p.values)
        lo, hi = p.min_value, p.max_value
        if p.type is ParameterType.INTEGER:
            return [int(lo), int(hi)] + [rng.randint(int(lo), int(hi)) for _ in range(n_random)]
        if p.scale_type is ScaleType.UNIT_LOG_SCALE and lo > 0:
            import math

            draws = [math.exp(rng.uniform(math.log(lo), math.log(hi))) for _ in range(n_random)]
        else:
            draws = [rng.uniform(lo, hi) for _ in range(n_random)]
        return [float(lo), float(hi)] + draws

    def visit(p: Any, context: list[str]) -> None:
        for value in values_of(p):
            out.append(context + [protocol.format_flag(p.parameter_id, value)])
        for cond in p.conditionals:
            visit(cond.parameter, context + [protocol.format_flag(p.parameter_id,
                                                                  cond.parent_values[0])])

    for p in study.parameters:
        visit(p, [])
    return out


def sample_trial_flags(study: Any, seed: int = 0) -> list[str]:
    """One full random trial's flags (active conditional parameters included), in spec order."""
    from trials.spec import ParameterType

    rng = random.Random(seed)

    def pick(p: Any) -> Any:
        if p.type in (ParameterType.CATEGORICAL, ParameterType.DISCRETE):
            return rng.choice(list(p.values))
        if p.type is ParameterType.INTEGER:
            return rng.randint(int(p.min_value), int(p.max_value))
        return rng.uniform(float(p.min_value), float(p.max_value))

    return [protocol.format_flag(name, value) for name, value in study.choose(pick).items()]


class ObjectiveContract:
    """Checks an objective keeps the trial contract. Subclass it in a test module.

    Set ``objective`` (as ``staticmethod(fn)`` or plain), ``Config`` and/or ``spec``, ``metric``,
    ``flags`` that keep runs short (e.g. ``{"epochs": 3}``) and ``options`` for
    :func:`trials.main` (e.g. a checkpoint format). The objective must report
    ``metric`` once per step with increasing steps, checkpoint through ``ctx.checkpoint``, resume
    through ``ctx.restore`` and stop between steps once ``ctx.should_stop``.

    Example:
        >>> class TestMyTrainer(ObjectiveContract):  # doctest: +SKIP
        ...     objective = staticmethod(train.objective)
        ...     Config = train.Config
        ...     spec = "search_spaces/mlp.yaml"
        ...     metric = "accuracy"
        ...     flags = {"epochs": 3}
    """

    objective: Any = None
    Config: Any = None
    spec: Any = None
    metric: str = ""
    flags: Sequence[str] | Mapping[str, Any] = ()
    options: Mapping[str, Any] = {}  # RunOptions, e.g. {"checkpoint_format": "npz"}
    min_steps: int = 2
    expects_model: bool = True
    expects_checkpoint: bool = True

    def _objective(self) -> Callable[..., Any]:
        objective = None
        for klass in type(self).__mro__:
            if "objective" in klass.__dict__:
                objective = klass.__dict__["objective"]
                break
        if isinstance(objective, staticmethod):
            objective = objective.__func__
        if objective is None:
            pytest.fail(f"{type(self).__name__} must set `objective`")
        return objective

    def _study(self) -> Any:
        if self.spec is None:
            return None
        if isinstance(self.spec, (str, os.PathLike)):
            from trials.spec.load import load_spec

            return load_spec(os.fspath(self.spec)).study
        return getattr(self.spec, "study", self.spec)

    def _run(self, sandbox: TrialSandbox, extra: Sequence[str] = (), **kwargs: Any) -> TrialRun:
        tokens = _flag_tokens(self.flags) + list(extra)
        return run_objective(sandbox, self._objective(), self.Config, spec=self.spec, flags=tokens,
                             **{**self.options, **kwargs})

    def _ok(self, run: TrialRun) -> TrialRun:
        if run.exit_code != protocol.EXIT_OK:
            pytest.fail(f"the objective exited {run.exit_code} (expected 0): {run.error!r}")
        return run

    def test_every_spec_parameter_is_accepted(self, trial_env: TrialSandbox) -> None:
        study = self._study()
        if study is None:
            pytest.skip("no spec: set `spec` to check every search-space parameter is accepted")
        from trials.runtime.flags import parse_flags
        from trials.runtime.params import build_params

        params = build_params(self.Config, study, str(self.spec))
        for tokens in sample_flag_sets(study):
            values = parse_flags(_flag_tokens(self.flags) + tokens, params, source=str(self.spec))
            name, _, text = tokens[-1][2:].partition("=")
            got = getattr(values[name], "value", values[name])
            message = f"{tokens[-1]} parsed as {values[name]!r}"
            if isinstance(got, (int, float)) and not isinstance(got, bool):
                assert float(got) == pytest.approx(float(text)), message
            else:
                assert str(got) == text, message
        self._ok(self._run(trial_env, sample_trial_flags(study)))

    def test_metric_reported_every_step(self, trial_env: TrialSandbox) -> None:
        run = self._ok(self._run(trial_env))
        steps = [m.step for m in run.measurements if self.metric in m.metrics]
        assert len(steps) >= self.min_steps, (
            f"expected {self.metric!r} at >= {self.min_steps} steps in the hypertune file, got "
            f"steps {steps} (tags reported: {sorted({k for m in run.measurements for k in m.metrics})})")
        assert steps == sorted(set(steps)), f"steps must strictly increase, got {steps}"
        assert [m.step for m in run.log] == steps, "metrics.jsonl and the hypertune file disagree"

    def test_outputs_land_in_trial_dirs(self, trial_env: TrialSandbox) -> None:
        run = self._ok(self._run(trial_env))
        assert run.trial_dir == trial_env.trial_dir
        assert os.path.isfile(os.path.join(trial_env.trial_dir, protocol.METRICS_LOG))
        if self.expects_model:
            assert run.model_files(), f"expected files in AIP_MODEL_DIR {run.model_dir}"
        if self.expects_checkpoint:
            assert run.checkpoint_steps(), f"expected checkpoints in {run.checkpoint_dir}"
        stray = [p for p in os.listdir(trial_env.root) if p not in ("job", "gcs")]
        assert not stray, f"outputs outside the trial's directories: {stray}"

    def test_resume_continues_where_it_stopped(self, trial_env: TrialSandbox) -> None:
        first = self._run(trial_env, stop_after_step=1)
        assert first.exit_code == protocol.EXIT_STOPPED, f"expected exit 75, got {first!r}"
        stopped_at = first.steps[-1]
        second = self._ok(self._run(trial_env, attempt=1))
        resumed = [m.step for m in second.measurements]
        assert resumed and resumed[0] == stopped_at + 1, (
            f"the restart reported steps {resumed}; expected it to continue at {stopped_at + 1}")
        assert second.steps == sorted(set(second.steps)), f"a step was reported twice: {second.steps}"

    def test_stop_request_is_handled(self, trial_env: TrialSandbox) -> None:
        run = self._run(trial_env, stop_after_step=1)
        assert run.exit_code == protocol.EXIT_STOPPED, f"expected exit 75, got {run!r}"
        assert run.steps == [run.steps[0]], f"expected one step after the stop request, got {run.steps}"
        late = run.context.reports_after_stop
        assert late == 0, f"the objective reported {late} more time(s) after the stop request"
        if self.expects_checkpoint:
            assert run.checkpoint_steps() and run.checkpoint_steps()[-1] == run.steps[-1], (
                f"expected a checkpoint of step {run.steps[-1]}, got {run.checkpoint_steps()}")

    def test_sigterm_is_handled(self, trial_env: TrialSandbox) -> None:
        run = self._run(trial_env, sigterm_after_step=1)
        assert run.exit_code == protocol.EXIT_STOPPED, f"expected exit 75 after SIGTERM, got {run!r}"
        assert len(run.steps) == 1, f"expected the loop to end after one step, got {run.steps}"
        late = run.context.reports_after_stop
        assert late == 0, f"the objective reported {late} more time(s) after SIGTERM"
