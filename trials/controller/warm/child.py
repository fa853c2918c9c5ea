"""A trainer run as ``python SCRIPT …`` / ``python -m MODULE …`` would run it, inside a process already started.

Two users, both before the trainer's own code: a warm launcher's child once it is in its trial's sandbox
(:func:`become_trainer`), and the survey, the first trial of a launcher, run fresh as
``python -m trials.controller.warm.child --survey FILE script|module TARGET ARGS…`` (:func:`main`), which
writes the modules the trainer loaded from outside the launch folder when it ends (lazy ones included).
Standard library only: what this module imports is in every trial.

The trainer gets what a fresh interpreter gives: its ``sys.argv`` and ``sys.path[0]``, Python's signal
dispositions (SIGINT a ``KeyboardInterrupt``, SIGTERM the default, SIGPIPE and SIGXFSZ ignored), new seeds
for Python's, NumPy's and torch's global generators (else every child draws what the launcher would), the
same exit status (``SystemExit``, a traceback and 1, SIGINT). It exits fast: non-daemon threads joined,
``atexit`` run, the streams flushed, then ``os._exit`` (no interpreter teardown: ~1 s of an import-heavy
trainer's).
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:  # pragma: no cover
    from collections.abc import Mapping, Sequence
    from typing import NoReturn

SURVEY_FILE = "warm-survey.json"  # in the trial folder: the modules the survey's trainer loaded


def reseed() -> None:
    """Python's, NumPy's (legacy global) and torch's default generators seeded from the OS, as in a fresh
    process (only those already imported: importing one later seeds it then)."""
    rnd = sys.modules.get("random")
    if rnd is not None:
        rnd.seed()
    nprandom = sys.modules.get("numpy.random")
    if nprandom is not None and hasattr(nprandom, "seed"):
        nprandom.seed()
    torch = sys.modules.get("torch")
    if torch is not None and hasattr(torch, "seed"):
        torch.seed()


def python_signals() -> None:
    """The signal dispositions a fresh interpreter has (the launcher's own are undone)."""
    signal.set_wakeup_fd(-1)
    for name in ("SIGTERM", "SIGHUP", "SIGCHLD", "SIGUSR1", "SIGUSR2", "SIGALRM", "SIGQUIT"):
        signal.signal(getattr(signal, name), signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)


def run(kind: str, target: str, args: Sequence[str], *, survey: str | None = None, first: bool = True) -> NoReturn:
    """Run the trainer as ``__main__`` and exit as the interpreter would have.

    ``first``: ``sys.path[0]`` is this process's own first entry (``python -m``'s folder), which becomes the
    trainer's; else (a launcher's child: the launcher took its own off the path) the trainer's is put first.
    """
    import runpy

    code = 0
    try:
        try:
            if kind == "module":
                sys.argv = ["-m", *args]
                _first_path(os.getcwd(), first)
                runpy._run_module_as_main(target, alter_argv=True)  # type: ignore[attr-defined]  # python -m's
            else:
                sys.argv = [target, *args]
                _first_path(os.path.dirname(os.path.realpath(target)), first)
                runpy.run_path(target, run_name="__main__")
        except SystemExit as stop:
            code = _exit_code(stop.code)
        except KeyboardInterrupt:
            _print_exception()
            code = -signal.SIGINT
        except BaseException:
            _print_exception()
            code = 1
    finally:
        if survey is not None:
            _write_survey(survey, kind, target)
    _exit_fast(code)


def _first_path(folder: str, replace: bool) -> None:
    if getattr(sys.flags, "safe_path", False):  # (3.11 PYTHONSAFEPATH: python puts no script or working folder first)
        return
    if replace:
        sys.path[0] = folder
    else:
        sys.path.insert(0, folder)


def _exit_code(value: object) -> int:
    if value is None:
        return 0
    if isinstance(value, int):
        return value & 0xFF
    with contextlib.suppress(Exception):  # as the interpreter: a failing print still exits 1
        print(value, file=sys.stderr)
    return 1


def _print_exception() -> None:
    with contextlib.suppress(Exception):
        sys.excepthook(*sys.exc_info())


def _exit_fast(code: int) -> NoReturn:
    """What the interpreter's exit does that a trainer can see, without tearing the interpreter down."""
    import atexit
    import threading

    with contextlib.suppress(BaseException):
        threading._shutdown()  # type: ignore[attr-defined]  # joins non-daemon threads, as Py_Finalize does
    with contextlib.suppress(BaseException):
        atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(BaseException):
            if stream is not None:
                stream.flush()
    if code < 0:  # ended by a signal (SIGINT), as the interpreter re-raises it
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    os._exit(code & 0xFF)


def _outside(path: str, folders: Sequence[str]) -> bool:
    return not any(path == f or path.startswith(f.rstrip("/") + "/") for f in folders)


def loaded_outside(folders: Sequence[str]) -> list[str]:
    """Names of the loaded modules whose file is outside ``folders`` (import order)."""
    names = []
    for name, module in list(sys.modules.items()):
        path = getattr(module, "__file__", None)
        if not isinstance(path, str) or name in ("__main__", "__mp_main__"):
            continue
        if _outside(os.path.realpath(path), folders):
            names.append(name)
    return names


def _write_survey(path: str, kind: str, target: str) -> None:
    import json

    folders = [os.path.realpath(os.getcwd())]
    if kind == "script":
        folders.append(os.path.dirname(os.path.realpath(target)))
    try:
        with open(path, "w", encoding="utf-8") as out:
            json.dump(loaded_outside(folders), out)
    except OSError:
        pass  # no survey: the controller runs the job's trials fresh


def become_trainer(env: Mapping[str, str], kind: str, target: str, args: Sequence[str]) -> NoReturn:
    """In a launcher's child, in its sandbox: the trial's environment, then :func:`run`."""
    os.environ.clear()
    os.environ.update(env)
    python_signals()
    reseed()
    run(kind, target, args, first=False)


def main(argv: Sequence[str]) -> NoReturn:
    """``--survey FILE script|module TARGET ARGS…``: run the trainer fresh, then write the survey."""
    if len(argv) < 4 or argv[0] != "--survey" or argv[2] not in ("script", "module"):
        print("usage: python -m trials.controller.warm.child --survey FILE script|module TARGET [ARGS...]",
              file=sys.stderr)
        raise SystemExit(2)
    run(argv[2], argv[3], argv[4:], survey=argv[1])


if __name__ == "__main__":
    main(sys.argv[1:])
