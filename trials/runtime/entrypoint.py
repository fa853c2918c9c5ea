"""Run an objective as a trial: flags -> config, context, SIGTERM, exit codes; ``trials-run``.

Calling the objective itself (its return value, its failure, the SIGTERM guard) is
:mod:`trials.runtime.objective`.

Kept light on purpose (it starts every trial): the standard library's argparse plus this package's
vocabulary; the reporting, checkpoint and logging modules load when first used.
"""

from __future__ import annotations

import os
import sys

from trials import protocol
from trials.errors import ConfigError, FlagError, TrialsError
from trials.runtime.context import RunOptions, TrialContext, TrialEnv
from trials.runtime.flags import format_help, parse_flags, wants_help
from trials.runtime.objective import SignalGuard, TrialOutcome, failure_summary, run_objective
from trials.runtime.params import build_params, make_config

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
    guard = SignalGuard(ctx) if options.install_signals else None
    outcome: TrialOutcome | None = None
    try:
        if guard is not None:
            guard.__enter__()
        outcome = run_objective(objective, ctx, study, options, prog)
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
        print(failure_summary(err), file=sys.stderr)
        return protocol.EXIT_ERROR
    outcome = run(objective, getattr(module, "Config", None), spec=spec, argv=flags,
                  options=options, prog=f"trials-run {target}", spec_dir=module_dir)
    return outcome.exit_code


if __name__ == "__main__":  # pragma: no cover
    sys.exit(run_main())
