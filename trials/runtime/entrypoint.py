"""Run an objective as a trial: flags -> config, context, SIGTERM, exit codes; ``trials-run``.

Kept light on purpose (it starts every trial): the standard library's argparse plus this package's
vocabulary; the reporting, checkpoint and logging modules load when first used.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys

from trials import protocol
from trials.errors import ConfigError, FlagError, TrialsError
from trials.runtime.context import DEFAULT_METRIC, RunOptions, TrialContext, TrialEnv
from trials.runtime.flags import build_params, format_help, make_config, parse_flags, wants_help

TYPE_CHECKING = False
if TYPE_CHECKING:  # pragma: no cover
    from collections.abc import Callable, Mapping, Sequence
    from typing import Any

RUN_USAGE = """\
usage: trials-run TARGET [--name=VALUE ...]

Run an objective as a hyperparameter-tuning trial (a container ENTRYPOINT).

TARGET is `package.module:function`, `package.module` (function `objective`) or
`path/to/file.py[:function]`. The module may define:
  Config  a dataclass of typed hyperparameters with defaults, and/or
  SPEC    a search-space file (relative paths are resolved against the module's directory)
          whose bounds and choices the flags are checked against.
  OPTIONS a dict of trials.main keyword options, e.g. {"checkpoint_format": "pickle"}
          (checkpoint_format: auto, json, npz, torch or pickle; keep_checkpoints, ...).
The function is called as function(config, ctx) or function(ctx) (then use ctx.config).

`trials-run TARGET --help` lists the objective's hyperparameters.
Exit codes: 0 done, 1 the objective raised, 2 bad flags or target, 75 stopped on request.
"""


class TrialOutcome:
    """What one run of an objective produced (returned by :func:`run`)."""

    __slots__ = ("exit_code", "context", "config", "value", "error", "output")

    def __init__(self, exit_code: int, *, context: TrialContext | None = None, config: Any = None,
                 value: Any = None, error: BaseException | None = None, output: str = ""):
        self.exit_code, self.context, self.config = exit_code, context, config
        self.value, self.error, self.output = value, error, output

    def __repr__(self) -> str:
        return f"TrialOutcome(exit_code={self.exit_code}, error={self.error!r})"


def _load_spec(spec: Any, base_dir: str | None = None) -> tuple[Any, str | None]:
    """(StudySpec, source name) from a path, a JobSpec or a StudySpec."""
    if spec is None:
        return None, None
    if isinstance(spec, (str, os.PathLike)):
        path = os.fspath(spec)
        if base_dir and not os.path.isabs(path) and not os.path.exists(path):
            candidate = os.path.join(base_dir, path)
            if os.path.exists(candidate):
                path = candidate
        from trials.spec.load import load_spec  # the controller's loader (imports yaml)

        return load_spec(path).study, os.fspath(spec)
    study = getattr(spec, "study", spec)
    if not hasattr(study, "parameters"):
        raise ConfigError(f"spec must be a path, a JobSpec or a StudySpec, got {type(spec).__name__}")
    return study, "<spec>"


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


def _default_metric(study: Any, env: TrialEnv, options: RunOptions) -> str:
    if options.metric:
        return options.metric
    if study is not None and len(study.metrics) == 1:
        return str(study.metrics[0].metric_id)
    return env.environ.get("CLOUD_ML_HP_METRIC_TAG") or DEFAULT_METRIC


def _summary(err: BaseException) -> str:
    """``Type: message`` on one line, typed the way a traceback's last line names it."""
    cls = type(err)
    name = cls.__qualname__
    if cls.__module__ not in ("builtins", "__main__"):
        name = f"{cls.__module__}.{name}"
    message = " ".join(str(err).split())
    return f"{name}: {message}" if message else name


class _SignalGuard:
    """SIGTERM -> ``ctx.request_stop``; a second SIGTERM exits at once with EXIT_STOPPED."""

    def __init__(self, ctx: TrialContext):
        self.ctx = ctx
        self.previous: Any = None
        self.installed = False
        self.count = 0

    def __enter__(self) -> _SignalGuard:
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


def run(objective: Callable[..., Any], Config: type | None = None, *, spec: Any = None,
        argv: Sequence[str] | None = None, environ: Mapping[str, str] | None = None,
        options: RunOptions | None = None, prog: str | None = None, spec_dir: str | None = None,
        on_context: Callable[[TrialContext], None] | None = None) -> TrialOutcome:
    """Run ``objective`` once as a trial and say how it ended; never raises for the objective.

    Args:
        objective: ``objective(config, ctx)`` or ``objective(ctx)``.
        Config: a dataclass of hyperparameters (types and defaults).
        spec: a search-space path, JobSpec or StudySpec the flags are checked against.
        argv: the flags (default ``sys.argv[1:]``).
        environ: the environment (default ``os.environ``).
        options: :class:`RunOptions`.
        prog: the program name in help and errors.
        spec_dir: the directory a relative ``spec`` path is resolved against.
        on_context: called with the context before the objective starts (tests use it).
    """
    options = options or RunOptions()
    argv = list(sys.argv[1:] if argv is None else argv)
    prog = prog or os.path.basename(sys.argv[0] or "trial")
    variables = os.environ if environ is None else environ
    if variables.get(protocol.ENV_CHECK_OUT) and wants_help(argv):
        return _answer_check(Config, spec, spec_dir, argv, variables)
    try:
        study, source = _load_spec(spec, spec_dir)
        params = build_params(Config, study, source)
        if wants_help(argv):
            text = format_help(params, prog=prog, source=source)
            sys.stdout.write(text)
            return TrialOutcome(protocol.EXIT_OK, output=text)
        config = make_config(Config, parse_flags(argv, params, source=source))
        env = TrialEnv(environ)
        env.make_dirs()
    except TrialsError as err:
        print(f"{prog}: error: {' '.join(str(err).split())}", file=sys.stderr)
        return TrialOutcome(err.exit_code if isinstance(err, ConfigError) else protocol.EXIT_USAGE,
                            error=err)
    except OSError as err:
        print(f"{prog}: error: cannot create the trial directories: {err}", file=sys.stderr)
        return TrialOutcome(protocol.EXIT_USAGE, error=err)
    ctx = TrialContext(config=config, env=env, options=options)
    if env.is_local and _is_terminal(sys.stderr):
        ctx.on_report = _print_report  # `python train.py` on a terminal: show each report
    if on_context is not None:
        on_context(ctx)
    if env.is_local:
        print(f"{prog}: local run (no tuning job): outputs go to {env.output_dir}", file=sys.stderr)
    guard = _SignalGuard(ctx) if options.install_signals else None
    outcome: TrialOutcome | None = None
    try:
        if guard is not None:
            guard.__enter__()
        outcome = _run_objective(objective, ctx, study, options, prog)
        return outcome
    finally:
        if guard is not None:
            guard.__exit__(None, None, None)
        ctx.close(failed=outcome is None or outcome.exit_code not in (protocol.EXIT_OK, protocol.EXIT_STOPPED))
        ctx._log.undo()


def _answer_check(Config: type | None, spec: Any, spec_dir: str | None, argv: Sequence[str],
                  environ: Mapping[str, str]) -> TrialOutcome:
    """``trials validate --trainer``: check its spec against this trainer's flags; run nothing."""
    from trials.runtime import spec_check

    try:
        study, source = _load_spec(spec, spec_dir)
        params: Any = build_params(Config, study, source)
    except ConfigError as err:
        params = err
    spec_check.answer(params, argv, environ)
    return TrialOutcome(protocol.EXIT_OK)


def _is_terminal(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # replaced or closed streams
        return False


def _print_report(ctx: TrialContext, step: int, metrics: Mapping[str, float]) -> None:
    shown = "  ".join(f"{name}={value:.6g}" for name, value in metrics.items())
    print(f"step {step}: {shown}", file=sys.stderr, flush=True)


def _run_objective(objective: Callable[..., Any], ctx: TrialContext, study: Any,
                   options: RunOptions, prog: str) -> TrialOutcome:
    ctx._log.maybe()
    try:
        value = objective(ctx.config, ctx) if _call_style(objective) == 2 else objective(ctx)
        metric = _default_metric(study, ctx.env, options)
        final = _final_metrics(value, metric)
        if final is not None and not _already_reported(final, ctx, named=metric != DEFAULT_METRIC):
            last = ctx.last_step
            ctx.report((last if last is not None else 0) + 1, final)
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
    summary = _summary(err)
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


def main(objective: Callable[..., Any], Config: type | None = None, *, spec: Any = None,
         argv: Sequence[str] | None = None, exit: bool | None = None, **options: Any) -> int:
    """Run ``objective`` as a trial from the command line.

    Args:
        objective: ``objective(config, ctx)`` or ``objective(ctx)``; a number or a dict of metrics
            it returns is reported as a final step unless that was just reported.
        Config: a dataclass whose typed fields (int, float, str, bool, Literal, Enum, Optional)
            with defaults are the hyperparameters and plain arguments.
        spec: a search-space file (or JobSpec/StudySpec) whose bounds and choices flags must meet.
        argv: flags (default ``sys.argv[1:]``).
        exit: exit the process with the code (default: when ``argv`` is None, i.e. as a script).
        **options: :class:`trials.runtime.context.RunOptions` (``metric``, ``keep_checkpoints``,
            ``checkpoint_format``, ``checkpoint_every``, ``all_replicas``, ``tensorboard``).

    Returns:
        The exit code: 0 done, 1 the objective raised, 2 bad flags, 75 stopped on request.

    Example:
        >>> import dataclasses, trials
        >>> @dataclasses.dataclass
        ... class Config:
        ...     learning_rate: float = 0.1
        >>> def objective(config, ctx):
        ...     return 1 - config.learning_rate
        >>> trials.main(objective, Config, argv=["--learning_rate=0.2"])  # doctest: +SKIP
        0
    """
    should_exit = argv is None if exit is None else exit
    script_dir = None
    if argv is None and sys.argv and sys.argv[0]:
        script_dir = os.path.dirname(os.path.abspath(sys.argv[0]))
    try:
        run_options = RunOptions(**options)
    except ConfigError as err:
        prog = os.path.basename(sys.argv[0] or "trial")
        print(f"{prog}: error: trials.main(): {err}", file=sys.stderr)
        outcome = TrialOutcome(protocol.EXIT_USAGE, error=err)
    else:
        outcome = run(objective, Config, spec=spec, argv=argv, options=run_options, spec_dir=script_dir)
    if should_exit:
        sys.exit(outcome.exit_code)
    return outcome.exit_code


# --- trials-run ------------------------------------------------------------------------------------
def resolve_target(target: str) -> tuple[Callable[..., Any], Any, Any, str | None]:
    """(objective, module, SPEC, module directory) from ``module:function`` or ``file.py:function``.

    Raises:
        FlagError: the module or function cannot be found (exceptions raised while the module
            imports propagate: they are the user's code failing).
    """
    import importlib
    import importlib.util

    path_part, _, func_name = target.partition(":")
    func_name = func_name or "objective"
    if path_part.endswith(".py") or os.sep in path_part:
        if not os.path.isfile(path_part):
            raise FlagError(f"no such file {path_part!r} (from TARGET {target!r})")
        folder = os.path.dirname(os.path.abspath(path_part))
        if folder not in sys.path:
            sys.path.insert(0, folder)
        module_dir: str | None = folder
        name = os.path.splitext(os.path.basename(path_part))[0]
        spec = importlib.util.spec_from_file_location(name, path_part)
        if spec is None or spec.loader is None:
            raise FlagError(f"cannot load {path_part!r} as a Python module (from TARGET {target!r})")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    else:
        if "" not in sys.path and os.getcwd() not in sys.path:
            sys.path.insert(0, os.getcwd())  # like `python -m`
        try:
            found = importlib.util.find_spec(path_part)
        except (ImportError, ValueError):
            found = None
        if found is None:
            raise FlagError(f"no module named {path_part!r} (from TARGET {target!r}); expected "
                            f"package.module:function or path/to/file.py:function")
        module = importlib.import_module(path_part)
        module_dir = os.path.dirname(os.path.abspath(module.__file__)) if module.__file__ else None
    objective = getattr(module, func_name, None)
    if not callable(objective):
        raise FlagError(f"module {module.__name__!r} has no function {func_name!r} (from TARGET "
                        f"{target!r})")
    return objective, module, getattr(module, "SPEC", None), module_dir


def run_main(argv: Sequence[str] | None = None) -> int:
    """``trials-run TARGET [flags]``: the console script and container ENTRYPOINT."""
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help"):
        sys.stdout.write(RUN_USAGE)
        return protocol.EXIT_OK if args else protocol.EXIT_USAGE
    target, flags = args[0], args[1:]
    try:
        objective, module, spec, module_dir = resolve_target(target)
        options = RunOptions(**getattr(module, "OPTIONS", {}))
    except (FlagError, ConfigError) as err:
        where = "" if isinstance(err, FlagError) else f"{module.__name__}.OPTIONS: "
        print(f"trials-run: error: {where}{err}", file=sys.stderr)
        return protocol.EXIT_USAGE
    except Exception as err:  # noqa: BLE001 - the user's module failed to import
        import traceback

        traceback.print_exc()
        print(_summary(err), file=sys.stderr)
        return protocol.EXIT_ERROR
    outcome = run(objective, getattr(module, "Config", None), spec=spec, argv=flags,
                  options=options, prog=f"trials-run {target}", spec_dir=module_dir)
    return outcome.exit_code


if __name__ == "__main__":  # pragma: no cover
    sys.exit(run_main())
