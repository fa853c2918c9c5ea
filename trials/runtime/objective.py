"""Calling the objective once as a trial: how it is called, its return value as the last report,
a failure logged once, and SIGTERM turned into a stop request.

On the trial's start-up path, like :mod:`trials.runtime.entrypoint`: standard library and this
package's vocabulary only.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys

from trials import protocol
from trials.runtime.context import DEFAULT_METRIC, RunOptions, TrialContext, TrialEnv

TYPE_CHECKING = False
if TYPE_CHECKING:  # pragma: no cover
    from collections.abc import Callable
    from typing import Any


class TrialOutcome:
    """What one run of an objective produced (returned by :func:`trials.runtime.entrypoint.run`)."""

    __slots__ = ("exit_code", "context", "config", "value", "error", "output")

    def __init__(self, exit_code: int, *, context: TrialContext | None = None, config: Any = None,
                 value: Any = None, error: BaseException | None = None, output: str = ""):
        self.exit_code, self.context, self.config = exit_code, context, config
        self.value, self.error, self.output = value, error, output

    def __repr__(self) -> str:
        return f"TrialOutcome(exit_code={self.exit_code}, error={self.error!r})"


def _call_style(objective: Callable[..., Any]) -> int:
    """How many positional arguments the objective takes: 2 (config, ctx) or 1 (ctx)."""
    code = getattr(objective, "__code__", None)
    if code is not None and not hasattr(objective, "__self__"):
        n_positional = code.co_argcount
    elif code is not None:  # a bound method
        n_positional = code.co_argcount - 1
    else:
        import inspect

        params = inspect.signature(objective).parameters.values()
        kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
        n_positional = sum(1 for p in params if p.kind in kinds)
        if any(p.kind is inspect.Parameter.VAR_POSITIONAL for p in params):
            n_positional = 2
    return 2 if n_positional >= 2 else 1


def _final_metrics(value: Any, metric: str) -> dict[str, Any] | None:
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, (int, float)) or type(value).__name__.startswith(("float", "int")):
        try:
            return {metric: float(value)}
        except (TypeError, ValueError):
            return None
    if hasattr(value, "items") and hasattr(value, "keys"):
        return dict(value.items())
    return None


def _already_reported(final: dict[str, Any], ctx: TrialContext, *, named: bool) -> bool:
    """True when the last report already holds these values (for an unnamed number: any metric)."""
    last = ctx.reporter.last_metrics
    if all(k in last and last[k] == v for k, v in final.items()):
        return True
    if not named and len(final) == 1:
        (value,) = final.values()
        return any(v == value for v in last.values())
    return False


def final_report_step(*, last_step: int | None, last_reported: int | None, n_reported: int) -> int | None:
    """The step a returned value that differs from the last report is recorded at (pure).

    The step after the last one (reported or checkpointed); ``None`` when this run reported
    nothing but an earlier attempt did: a resumed run that trained no step returns whatever its
    variables held before the loop, not a result, and the earlier attempt's last report stands.

    Args:
        last_step: the last step reported or checkpointed, by this run or an earlier attempt.
        last_reported: the last step reported (``metrics.jsonl``), by any attempt.
        n_reported: the steps this run reported.
    """
    if last_reported is not None and n_reported == 0:
        return None
    return (last_step if last_step is not None else 0) + 1


def _shown(metrics: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v!r}" for k, v in metrics.items())


def _default_metric(study: Any, env: TrialEnv, options: RunOptions) -> str:
    if options.metric:
        return options.metric
    if study is not None and len(study.metrics) == 1:
        return str(study.metrics[0].metric_id)
    return env.environ.get("CLOUD_ML_HP_METRIC_TAG") or DEFAULT_METRIC


def failure_summary(err: BaseException) -> str:
    """``Type: message`` on one line, typed the way a traceback's last line names it."""
    cls = type(err)
    name = cls.__qualname__
    if cls.__module__ not in ("builtins", "__main__"):
        name = f"{cls.__module__}.{name}"
    message = " ".join(str(err).split())
    return f"{name}: {message}" if message else name


class SignalGuard:
    """SIGTERM -> ``ctx.request_stop``; a second SIGTERM exits at once with EXIT_STOPPED."""

    def __init__(self, ctx: TrialContext):
        self.ctx = ctx
        self.previous: Any = None
        self.installed = False
        self.count = 0

    def __enter__(self) -> SignalGuard:
        try:
            self.previous = signal.signal(signal.SIGTERM, self._handle)
            self.installed = True
        except ValueError:  # not the main thread: the caller handles signals
            pass
        return self

    def _handle(self, signum: int, frame: Any) -> None:
        self.count += 1
        if self.count == 1:
            self.ctx.request_stop("SIGTERM")  # ACTIVE -> STOPPING: finish the step, checkpoint
            return
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(OSError, ValueError):
                stream.flush()
        os._exit(protocol.EXIT_STOPPED)  # the objective ignored the first SIGTERM

    def __exit__(self, *exc: Any) -> None:
        if self.installed:
            signal.signal(signal.SIGTERM, self.previous)


def run_objective(objective: Callable[..., Any], ctx: TrialContext, study: Any,
                   options: RunOptions, prog: str) -> TrialOutcome:
    ctx._log.maybe()
    try:
        value = objective(ctx.config, ctx) if _call_style(objective) == 2 else objective(ctx)
        metric = _default_metric(study, ctx.env, options)
        final = _final_metrics(value, metric)
        if final is not None and not _already_reported(final, ctx, named=metric != DEFAULT_METRIC):
            step = final_report_step(last_step=ctx.last_step, last_reported=ctx.reporter.last_step,
                                     n_reported=ctx.reporter.n_reported)
            if step is not None:
                ctx.report(step, final)
            else:
                ctx.logger.warning(
                    "the objective returned %s after a resumed run that trained no step: not "
                    "recorded as a new step (the last report, step %s, has %s)", _shown(final),
                    ctx.reporter.last_step, _shown(ctx.reporter.last_metrics) or "no metrics")
        ctx.flush_checkpoint()
    except KeyboardInterrupt as err:
        return TrialOutcome(protocol.EXIT_INTERRUPTED, context=ctx, config=ctx.config, error=err)
    except SystemExit as err:
        code = err.code if isinstance(err.code, int) else (0 if err.code is None else 1)
        return TrialOutcome(code, context=ctx, config=ctx.config, error=err)
    except Exception as err:  # noqa: BLE001 - the objective's failure becomes exit 1, logged once
        err = _swapped_arguments(err, ctx)
        _log_failure(ctx, err, prog)
        return TrialOutcome(protocol.EXIT_ERROR, context=ctx, config=ctx.config, error=err)
    if ctx.should_stop:
        ctx.logger.info("stopped on request (%s); last step %s, checkpoint at step %s",
                        ctx.stop_reason, ctx.last_step, ctx.last_checkpoint_step)
        code = protocol.EXIT_STOPPED
    else:
        code = protocol.EXIT_OK
    if ctx.is_local:
        print(f"{prog}: outputs in {ctx.env.output_dir} (model/, checkpoints/, logs/, "
              f"{protocol.METRICS_LOG})", file=sys.stderr)
    return TrialOutcome(code, context=ctx, config=ctx.config, value=value)


def _swapped_arguments(err: Exception, ctx: TrialContext) -> Exception:
    """A clear TypeError when ``err`` came from an objective written as ``objective(ctx, config)``."""
    if not isinstance(err, AttributeError) or err.name is None:
        return err
    used_config_as_ctx = err.obj is ctx.config and hasattr(TrialContext, err.name)
    used_ctx_as_config = err.obj is ctx and hasattr(ctx.config, err.name)
    if not (used_config_as_ctx or used_ctx_as_config):
        return err
    what = (f"the config as the context (.{err.name})" if used_config_as_ctx
            else f"the context as the config (.{err.name})")
    clear = TypeError(f"the objective's arguments are swapped: it is called as objective(config, ctx) "
                      f"but used {what}; define it as `def objective(config, ctx)`")
    clear.__cause__ = err
    return clear


def _log_failure(ctx: TrialContext, err: BaseException, prog: str) -> None:
    summary = failure_summary(err)
    with contextlib.suppress(Exception):  # logging must not hide the failure
        ctx.logger.error("the objective raised %s", summary, exc_info=err)
    if ctx.is_local:
        print(f"{prog}: outputs in {ctx.env.output_dir}", file=sys.stderr)
    # The controller quotes the last stderr line as the termination reason. A plain-text
    # traceback on stderr already ends with exactly that line; a JSON entry does not.
    traceback_ends_with_it = (ctx._log.installed_format == "text" and "\n" not in str(err)
                              and not getattr(err, "__notes__", None))
    if not traceback_ends_with_it or ctx.is_local:
        print(summary, file=sys.stderr, flush=True)
