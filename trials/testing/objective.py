"""Running a ``trials.main`` objective in this process as a trial (the ``run_trial`` fixture)."""

from __future__ import annotations

import os
import signal
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import pytest

from trials import protocol
from trials.testing.sandbox import TrialSandbox


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


def flag_tokens(flags: Sequence[str] | Mapping[str, Any]) -> list[str]:
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
        outcome = run(objective, Config, spec=spec, argv=flag_tokens(flags),
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
