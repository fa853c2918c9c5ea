"""The ``trials`` command line: argparse subcommands; each imports what it needs when it runs.

``main`` parses the arguments, runs the command's handler and turns any error into one line on
stderr and a named exit code (a traceback only with ``--debug``).
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import errno
import gc
import os
import sys
import threading
from collections.abc import Callable, Sequence
from typing import NoReturn

from trials import protocol
from trials.cli.parser import build_parser
from trials.errors import TrialsError

__all__ = ["build_parser", "exit_now", "main", "run"]


_UNWRITABLE = frozenset({errno.EROFS, errno.EACCES, errno.EPERM})


def run() -> NoReturn:
    """The ``trials`` command: :func:`main`, then the process ends without the interpreter's teardown.

    When ``main`` returns, what is left to do is the atexit handlers (run here: a replica cgroup's
    folder removed, orphans swept) and freeing the modules Optuna and numpy loaded, which took
    ~0.1 s of every command's wall (measured on the controller benchmark). The exit code is the
    same; a thread still running (none in the CLI's commands) gets the normal exit, which joins it,
    and so does a run under a profiler or tracer (``python -m cProfile -m trials``: it writes its
    results when the command returns).
    """
    exit_now(main())


def exit_now(code: int) -> NoReturn:
    """End the process with ``code`` as :func:`run` does (see there)."""
    if sys.getprofile() is not None or sys.gettrace() is not None or any(
            t.is_alive() and not t.daemon for t in threading.enumerate() if t is not threading.main_thread()):
        sys.exit(code)
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):  # a closed pipe: nothing more can be said there
            stream.flush()
    os._exit(code)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the exit code (2 for bad input, one line on stderr)."""
    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    local_command: list[str] = []
    if "--" in argv:  # `trials sweep SPEC [options] -- LOCAL COMMAND...`
        cut = argv.index("--")
        argv, local_command = argv[:cut], argv[cut + 1:]
    args, extra = parser.parse_known_args(argv)
    if extra:
        hint = _command_hint(args, extra, local_command)
        if hint is None:
            return _unrecognized(parser, args.command, extra)
        print(f"trials {args.command}: error: {hint}", file=sys.stderr)
        return protocol.EXIT_USAGE
    args.local_command = local_command
    restore = _interrupt_on_stop_signals() if args.command in _RUNS_A_JOB else None
    collecting, frozen = gc.isenabled(), gc.get_freeze_count()
    args.gc_paused = collecting and args.command in _RUNS_A_JOB
    if args.gc_paused:
        gc.disable()  # until the job loop starts (trials.cli.run._loop_starts): imports make no cycles to free
    try:
        code: int = args.handler(args)
        return code
    except BrokenPipeError:  # `trials describe JOB | head`
        sys.stderr.close()
        return protocol.EXIT_OK
    except KeyboardInterrupt:
        print("trials: interrupted", file=sys.stderr)
        return protocol.EXIT_INTERRUPTED
    except TrialsError as err:
        if args.debug:
            return _traceback(args, err.exit_code)
        print(f"trials: error: {_scrub(args, _one_line(str(err)))}", file=sys.stderr)
        return err.exit_code
    except OSError as err:
        if args.debug:
            return _traceback(args, protocol.EXIT_ERROR)
        if err.errno in _UNWRITABLE:  # a read-only job root, a folder of another user
            where = f" {err.filename}" if err.filename else ""
            print(f"trials: error: cannot write{_scrub(args, _one_line(where))}: {err.strerror} (trials "
                  f"{args.command} needs write access to the job folder; check --root or the mount)",
                  file=sys.stderr)
            return protocol.EXIT_USAGE
        print(f"trials: internal error: {type(err).__name__}: {_scrub(args, _one_line(str(err)))} "
              "(run with --debug for the traceback)", file=sys.stderr)
        return protocol.EXIT_ERROR
    except Exception as err:  # noqa: BLE001 - the CLI's last line of defence
        if args.debug:
            return _traceback(args, protocol.EXIT_ERROR)
        print(f"trials: internal error: {type(err).__name__}: {_scrub(args, _one_line(str(err)))} "
              f"(run with --debug for the traceback)", file=sys.stderr)
        return protocol.EXIT_ERROR
    finally:
        if restore is not None:
            restore()
        if gc.get_freeze_count() > frozen:
            gc.unfreeze()
        if collecting:
            gc.enable()


_TAKES_COMMAND = ("sweep", "resume", "validate", "check")
_RUNS_A_JOB = ("sweep", "resume", "worker")  # (trials.startup.RUNS_A_JOB: the same)


def _interrupt_on_stop_signals() -> Callable[[], None] | None:
    """SIGTERM and SIGHUP end a command that runs a job the way Ctrl-C does (``trials: interrupted``,
    exit 130) until its job loop handles them (``LoopSignals.hold``): never the default action,
    which would kill the controller with nothing said."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        return None

    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    previous = {sig: signal.signal(sig, interrupt) for sig in (signal.SIGTERM, signal.SIGHUP)}

    def restore() -> None:
        for sig, handler in previous.items():
            signal.signal(sig, handler)

    return restore


def _command_hint(args: argparse.Namespace, extra: list[str], local_command: list[str]) -> str | None:
    """For a command that runs a trainer: the words argparse did not take were meant as the command."""
    if args.command not in _TAKES_COMMAND or local_command or extra[0].startswith("-"):
        return None
    import shlex

    words = list(extra)
    options = "[options]"
    if getattr(args, "trainer", None):  # `validate SPEC --trainer python train.py`: argparse took `python`
        words.insert(0, args.trainer)
        options = "--trainer"
    given = " ".join(shlex.quote(word) for word in words)
    target = str(getattr(args, "spec", None) or getattr(args, "job", ""))
    return (f"unexpected arguments {given!r}: put the trainer's command after `--`, as in "
            f"`trials {args.command} {shlex.quote(target)} {options} -- {given}`")


def _unrecognized(parser: argparse.ArgumentParser, command: str, extra: list[str]) -> int:
    """Words the command does not take: its own usage (not ``trials``'), then one line naming them,
    with the option each mistyped one was likely meant to be."""
    from trials.errors import did_you_mean
    from trials.printable import printable

    sub = _subparser(parser, command)
    own = [o for action in sub._actions for o in action.option_strings if o.startswith("--")]
    top = [o for action in parser._actions for o in action.option_strings if o.startswith("--")]
    names = [w.split("=", 1)[0] for w in extra if w.startswith("-") and w != "-"]
    hints = []
    for name in names:
        if name in top:
            hints.append(f"{name} is an option of trials itself: put it before the command "
                         f"(trials {name} {command} ...)")
        # on the names without their dashes, closer than difflib's default: `--bogus` is no `--gpus`
        elif (close := did_you_mean(name.lstrip("-"), [o[2:] for o in own], cutoff=0.75)) is not None:
            close = "--" + close
            hints.append(f"did you mean {close}?" if len(names) == 1 else f"{name}: did you mean {close}?")
    sys.stderr.write(sub.format_usage())
    line = f"unrecognized arguments: {' '.join(extra)}" + "".join(f"; {h}" for h in hints)
    print(f"{sub.prog}: error: {printable(line)}", file=sys.stderr)
    return protocol.EXIT_USAGE


def _subparser(parser: argparse.ArgumentParser, command: str) -> argparse.ArgumentParser:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            sub: argparse.ArgumentParser = action.choices[command]
            return sub
    return parser


def _scrub(args: argparse.Namespace, text: str) -> str:
    """Never print a storage password, whatever the message (drivers quote URLs and DSNs)."""
    url = getattr(args, "storage", None)
    if not url or "@" not in url:
        return text
    from trials.storage_url import scrub

    return scrub(text, url)


def _traceback(args: argparse.Namespace, code: int) -> int:
    import traceback

    sys.stderr.write(_scrub(args, traceback.format_exc()))
    return code


def _one_line(text: str) -> str:
    return " ".join(text.split()) if "\n" in text else text
