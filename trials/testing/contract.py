"""The contract suite of a ``trials.main`` objective (:class:`ObjectiveContract`), and flag sets for a spec."""

from __future__ import annotations

import os
import random
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import pytest

from trials import protocol
from trials.testing.objective import TrialRun, flag_tokens, run_objective
from trials.testing.sandbox import TrialSandbox


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
        tokens = flag_tokens(self.flags) + list(extra)
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
            values = parse_flags(flag_tokens(self.flags) + tokens, params, source=str(self.spec))
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
