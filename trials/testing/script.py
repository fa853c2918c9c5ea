"""Running an unchanged trainer — an argparse + hypertune script or module, as Vertex users write them — as a trial.

:func:`run_script` gives the trainer a trial's flags and environment (the :class:`~trials.testing.TrialSandbox`),
runs it in this process (fast) or as a subprocess (what Vertex runs), and returns its exit, what it reported through
the real cloudml-hypertune file (step, tag, value) and what it wrote under ``AIP_MODEL_DIR``,
``AIP_CHECKPOINT_DIR`` and ``AIP_TENSORBOARD_LOG_DIR``. The ``run_script`` fixture is this function bound to the
test's sandbox.

Example:
    >>> def test_trainer_reports_accuracy(run_script):  # doctest: +SKIP
    ...     run = run_script("trainer/task.py", {"learning_rate": 0.01}, args=["--epochs=2"])
    ...     assert run.exit_code == 0, run.stderr
    ...     assert run.values("accuracy")[-1] > 0.5
    ...     assert run.model_files()
"""

from __future__ import annotations

import contextlib
import io
import os
import runpy
import signal
import subprocess
import sys
import time
import traceback
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from trials import protocol
from trials.testing.objective import flag_tokens
from trials.testing.sandbox import TrialSandbox


@dataclass(frozen=True, slots=True)
class HypertuneReport:
    """One metric of one ``report_hyperparameter_tuning_metric`` call, as the hypertune file holds it."""

    step: int
    tag: str
    value: float


class ScriptRun:
    """What :func:`run_script` saw: the exit, the reports read back from the hypertune file, the output folders.

    Attributes:
        exit_code: the process's exit status; a subprocess killed by a signal: minus the signal's number.
        signal: the signal that ended the subprocess, or None (it exited, or ran in-process).
        stdout, stderr: what it printed (in-process: what Python code wrote to ``sys.stdout``/``sys.stderr``).
        error: in-process, the exception that ended it (not SystemExit), else None.
        reports: every metric the hypertune file holds, in file order (the library keeps the last 100 reports,
            as on Vertex).
        argv: the arguments the trainer got (its own ``args`` then the trial's flags).
        model_dir, checkpoint_dir, tensorboard_dir, metric_file: the trial's paths.
        seconds: how long it ran.
    """

    def __init__(self, sandbox: TrialSandbox, *, exit_code: int, stdout: str, stderr: str, argv: list[str],
                 error: BaseException | None, seconds: float, killed_by: int | None = None):
        from trials.hypertune_file import parse_hypertune_text

        self.exit_code = exit_code
        self.signal = killed_by
        self.stdout, self.stderr, self.error, self.argv, self.seconds = stdout, stderr, error, argv, seconds
        self.model_dir, self.checkpoint_dir = sandbox.model_dir, sandbox.checkpoint_dir
        self.tensorboard_dir, self.metric_file = sandbox.tensorboard_dir, sandbox.metric_file
        try:
            with open(sandbox.metric_file, encoding="utf-8", errors="replace") as f:
                lines = parse_hypertune_text(f.read())
        except FileNotFoundError:
            lines = []
        self.reports = [HypertuneReport(line.step, line.tag, line.value) for line in lines]

    @property
    def tags(self) -> list[str]:
        """The metric tags reported, in the order first seen."""
        return list(dict.fromkeys(r.tag for r in self.reports))

    def steps(self, tag: str) -> list[int]:
        """The steps ``tag`` was reported at, in file order."""
        return [r.step for r in self.reports if r.tag == tag]

    def values(self, tag: str) -> list[float]:
        """``tag``'s values, in file order."""
        return [r.value for r in self.reports if r.tag == tag]

    def model_files(self) -> list[str]:
        """Files under ``AIP_MODEL_DIR``, relative to it."""
        return _files(self.model_dir)

    def checkpoint_files(self) -> list[str]:
        """Files under ``AIP_CHECKPOINT_DIR``, relative to it."""
        return _files(self.checkpoint_dir)

    def tensorboard_files(self) -> list[str]:
        """Files under ``AIP_TENSORBOARD_LOG_DIR``, relative to it."""
        return _files(self.tensorboard_dir)

    def __repr__(self) -> str:
        ended = f"signal={self.signal}" if self.signal else f"exit_code={self.exit_code}"
        return f"ScriptRun({ended}, tags={self.tags}, reports={len(self.reports)}, error={self.error!r})"


def _files(folder: str) -> list[str]:
    if not os.path.isdir(folder):
        return []
    return sorted(os.path.relpath(os.path.join(d, f), folder) for d, _, files in os.walk(folder) for f in files)


def run_script(sandbox: TrialSandbox, target: str, flags: Sequence[str] | Mapping[str, Any] = (), *,
               args: Sequence[str] = (), module: bool = False, subprocess_run: bool = False,
               attempt: int | None = None, cwd: str | None = None, timeout_s: float = 300.0,
               sigterm_after_reports: int | None = None, grace_period_s: float = 30.0) -> ScriptRun:
    """Run the trainer ``target`` as a trial in ``sandbox`` (the ``run_script`` fixture binds the sandbox).

    Args:
        target: a script's path, or with ``module=True`` a module name (``python -m target``), found from ``cwd``.
        flags: the trial's parameters, as tokens (``["--lr=0.1"]``) or a mapping, formatted as the controller does.
        args: the trainer's own arguments, before the flags (what ``containerSpec.args`` holds).
        subprocess_run: run ``python target ...`` as a child process (what Vertex runs) instead of in this
            process; needed for ``sigterm_after_reports``.
        attempt: a restart's attempt number (1, 2, ...): the same folders, as after a restart on Vertex.
        cwd: the working folder (default: this process's).
        timeout_s: a subprocess is killed after this long (the run then ends with SIGKILL's status).
        sigterm_after_reports: send SIGTERM once the hypertune file holds this many reports (a subprocess only).
        grace_period_s: after SIGTERM, how long the trainer has to exit before SIGKILL.

    Returns:
        A :class:`ScriptRun`.
    """
    if sigterm_after_reports is not None and not subprocess_run:
        raise ValueError("sigterm_after_reports needs subprocess_run=True: a signal would end the test's own process")
    if attempt is not None:
        sandbox.set(**{protocol.ENV_ATTEMPT: str(attempt)})
    for folder in (sandbox.trial_dir, sandbox.model_dir, sandbox.checkpoint_dir, sandbox.tensorboard_dir):
        os.makedirs(folder, exist_ok=True)
    with contextlib.suppress(FileNotFoundError):  # each start writes its own (the library rewrites it whole)
        os.unlink(sandbox.metric_file)
    argv = [*map(str, args), *flag_tokens(flags)]
    where = os.path.abspath(cwd or os.getcwd())
    if subprocess_run:
        return _in_child(sandbox, target, argv, module=module, cwd=where, timeout_s=timeout_s,
                         sigterm_after_reports=sigterm_after_reports, grace_period_s=grace_period_s)
    return _in_process(sandbox, target, argv, module=module, cwd=where)


def _in_process(sandbox: TrialSandbox, target: str, argv: list[str], *, module: bool, cwd: str) -> ScriptRun:
    """``runpy`` with the trainer's ``sys.argv`` and ``sys.path[0]``; modules it imported from its own folder are
    forgotten after (the next run imports them fresh); the exit is what ``python`` would have exited with."""
    path = target if module else os.path.join(cwd, target)
    home = cwd if module else os.path.dirname(os.path.abspath(path))
    saved_argv, saved_path, saved_cwd = sys.argv[:], sys.path[:], os.getcwd()
    saved_signals = {sig: signal.getsignal(sig) for sig in _SIGNALS}  # a trainer's handlers are its process's
    before = set(sys.modules)
    out, err = io.StringIO(), io.StringIO()
    error: BaseException | None = None
    code = protocol.EXIT_OK
    began = time.monotonic()
    sys.argv = [target if module else path, *argv]
    sys.path.insert(0, home)
    try:
        os.chdir(cwd)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                if module:
                    runpy.run_module(target, run_name="__main__", alter_sys=True)
                else:
                    runpy.run_path(path, run_name="__main__")
            except SystemExit as done:
                code = _exit_status(done.code, err)
            except Exception as exc:  # noqa: BLE001 - the trainer's own error: exit 1 with its traceback, as python
                error = exc
                traceback.print_exc()
                code = 1
    finally:
        os.chdir(saved_cwd)
        for sig, handler in saved_signals.items():
            if handler is not None:
                signal.signal(sig, handler)
        sys.argv[:] = saved_argv
        sys.path[:] = saved_path
        for name in set(sys.modules) - before:
            file = getattr(sys.modules[name], "__file__", None) or ""
            if file.startswith(home + os.sep):
                del sys.modules[name]
    return ScriptRun(sandbox, exit_code=code, stdout=out.getvalue(), stderr=err.getvalue(), argv=argv, error=error,
                     seconds=time.monotonic() - began)


_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2)


def _exit_status(code: object, err: io.StringIO) -> int:
    """``sys.exit(code)``'s status as the interpreter computes it."""
    if code is None:
        return 0
    if isinstance(code, int) and not isinstance(code, bool):
        return code & 0xFF
    err.write(f"{code}\n")
    return 1


def _in_child(sandbox: TrialSandbox, target: str, argv: list[str], *, module: bool, cwd: str, timeout_s: float,
              sigterm_after_reports: int | None, grace_period_s: float) -> ScriptRun:
    command = [sys.executable, *(["-m", target] if module else [target]), *argv]
    began = time.monotonic()
    with open(os.path.join(sandbox.trial_dir, "script.stdout.log"), "w+b") as out, \
            open(os.path.join(sandbox.trial_dir, "script.stderr.log"), "w+b") as err:
        proc = subprocess.Popen(command, cwd=cwd, env=dict(os.environ), stdout=out, stderr=err,
                                start_new_session=True)
        deadline = began + timeout_s
        signalled = False
        while proc.poll() is None:
            now = time.monotonic()
            if now > deadline:
                _kill_group(proc, signal.SIGKILL)
                break
            if sigterm_after_reports is not None and not signalled and \
                    _count_reports(sandbox.metric_file) >= sigterm_after_reports:
                os.kill(proc.pid, signal.SIGTERM)  # the trainer's process, as Vertex's preemption notice
                signalled = True
                deadline = min(deadline, now + grace_period_s)
            time.sleep(0.02)
        code = proc.wait()
        _kill_group(proc, signal.SIGKILL)  # what it left behind
        out.seek(0)
        err.seek(0)
        stdout = out.read().decode("utf-8", "replace")
        stderr = err.read().decode("utf-8", "replace")
    killed_by = -code if code < 0 else None
    return ScriptRun(sandbox, exit_code=code, stdout=stdout, stderr=stderr, argv=argv, error=None,
                     seconds=time.monotonic() - began, killed_by=killed_by)


def _count_reports(path: str) -> int:
    try:
        with open(path, "rb") as f:
            return f.read().count(b"\n")
    except OSError:
        return 0


def _kill_group(proc: subprocess.Popen[bytes], sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, sig)
