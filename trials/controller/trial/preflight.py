"""Before any trial: ask a ``trials.main``/``trials-run`` trainer whether every flag of the spec fits it.

The trainer is run once with ``--help`` and ``$TRIALS_CHECK_SPEC``: its runtime checks each parameter,
type, range and choice against its own Config (see :mod:`trials.runtime.spec_check`), writes the
problems to a file and exits without running the objective. Before a sweep, a command that does not
look like a ``trials`` trainer is not run at all (a plain script might not honour ``--help``);
``trials validate --trainer`` runs any, and reads a plain one's flags from argparse's help
(:mod:`trials.controller.trial.argparse_help`).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from trials import files, protocol
from trials.controller.trial import launch
from trials.printable import printable
from trials.spec import JobSpec, TrialJobSpec, WorkerPoolSpec

DEFAULT_TIMEOUT_S = 120.0
_MAX_SCRIPT_BYTES = 4 << 20
_USES_RUNTIME = re.compile(rb"\btrials\.main\s*\(|from\s+trials\s+import[^\n]*\bmain\b|trials\.runtime\.entrypoint"
                           rb"|\btrials-run\b")


@dataclass(frozen=True, slots=True, kw_only=True)
class TrainerAnswer:
    """What the trainer said: problems (none: every trial's flags parse), values checked, its flags."""

    problems: list[str] = field(default_factory=list)
    n_values: int = 0
    flags: list[str] = field(default_factory=list)


def target_command(target: str) -> list[str]:
    """``module:function`` or ``file.py[:function]`` -> the ``trials-run`` command that runs it."""
    return [sys.executable, "-m", "trials.runtime.entrypoint", target]


def trainer_command(job: JobSpec, local_command: Sequence[str] | None, *, target: str | None = None) -> list[str]:
    """The primary replica's command (or ``trials-run TARGET``) and fixed args, without parameter flags."""
    trial_job = job.trial_job or TrialJobSpec(worker_pools=(WorkerPoolSpec(),))
    pool = trial_job.replicas()[0][2]
    command = target_command(target) if target else launch.base_command(pool, local_command)
    return [*command, *pool.args]


def _script_of(argv: Sequence[str], cwd: str) -> str | None:
    """The Python file a ``python [options] script.py`` / ``python -m pkg.mod`` command runs."""
    rest = list(argv[1:])
    if "-m" in rest:
        index = rest.index("-m")
        if index + 1 >= len(rest):
            return None
        base = os.path.join(cwd, *rest[index + 1].split("."))
        for candidate in (base + ".py", os.path.join(base, "__main__.py")):
            if os.path.isfile(candidate):
                return candidate
        return None
    script = next((a for a in rest if not a.startswith("-")), None)
    return os.path.join(cwd, script) if script and script.endswith(".py") else None


def is_trials_trainer(argv: Sequence[str], cwd: str | None = None) -> bool:
    """True for ``trials-run …`` and for Python scripts/modules whose source calls ``trials.main``."""
    if not argv:
        return False
    if os.path.basename(argv[0]) == "trials-run":
        return True
    if "-m" in argv and "trials.runtime.entrypoint" in argv:
        return True
    script = _script_of(argv, cwd or os.getcwd())
    if script is None:
        return False
    try:
        source = files.read_regular(script, max_bytes=_MAX_SCRIPT_BYTES)
    except OSError:
        return False
    return bool(_USES_RUNTIME.search(source))


@dataclass(frozen=True, slots=True, kw_only=True)
class NoAnswer:
    """The trainer did not answer as a ``trials`` trainer: why, and what its ``--help`` printed
    (the trainer's text, at most ``MAX_OUTPUT_BYTES`` of each stream: escape it to show it)."""

    reason: str
    started: bool = True  # False: it could not be run at all
    exit_code: int | None = None  # None: it did not run, or did not end in time
    stdout: str = ""
    stderr: str = ""


MAX_OUTPUT_BYTES = 1 << 20


def _run_help(argv: Sequence[str], env: Mapping[str, str], timeout_s: float) -> tuple[int | None, str, str]:
    """``argv`` run once in a process group of its own, its output in files (a flood or a child that
    keeps a pipe open blocks nothing); the group is killed when it ends or its time is up."""
    import signal

    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(list(argv), env=dict(env), stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                                start_new_session=True)
        try:
            code: int | None = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            code = None
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)  # it, or what it left behind
        proc.wait()
        texts = []
        for f in (out, err):
            f.seek(0)
            texts.append(f.read(MAX_OUTPUT_BYTES).decode("utf-8", "replace"))
    return code, texts[0], texts[1]


def ask_trainer(argv: Sequence[str], spec_path: str, *, environ: Mapping[str, str] | None = None,
                timeout_s: float = DEFAULT_TIMEOUT_S, pass_env: Sequence[str] = ()) -> TrainerAnswer | NoAnswer:
    """Run ``argv --help`` as a check of ``spec_path``; the answer, or why there is none."""
    env = launch.clean_base_env(os.environ if environ is None else environ, pass_env)
    for name in (*protocol.VERTEX_ENV_VARS, *protocol.PROJECT_ENV_VARS):
        env.pop(name, None)
    fd, out = tempfile.mkstemp(prefix="trials-check-", suffix=".json")
    os.close(fd)
    try:
        env.update({protocol.ENV_CHECK_SPEC: os.path.abspath(spec_path), protocol.ENV_CHECK_OUT: out})
        try:
            code, stdout, stderr = _run_help([*argv, "--help"], env, timeout_s)
        except OSError as err:
            return NoAnswer(reason=f"{type(err).__name__}: {err}", started=False)
        if code is None:
            return NoAnswer(reason=f"it did not end within {timeout_s:g} s of `--help`", stdout=stdout,
                            stderr=stderr)
        raw = files.read_regular(out, max_bytes=_MAX_SCRIPT_BYTES)
        if not raw:
            tail = stderr.strip().splitlines()[-1:] or ["no output"]
            return NoAnswer(reason=f"it exited {code} without answering ({printable(tail[0], limit=300)})",
                            exit_code=code, stdout=stdout, stderr=stderr)
        data = json.loads(raw)
        return TrainerAnswer(problems=[str(p) for p in data.get("problems", [])],
                             n_values=int(data.get("n_values", 0)),
                             flags=[str(f) for f in data.get("flags", [])])
    except (OSError, ValueError) as err:
        return NoAnswer(reason=f"its answer could not be read: {type(err).__name__}: {err}")
    finally:
        with contextlib.suppress(OSError):
            os.unlink(out)


def _shown(argv: Sequence[str]) -> str:
    import shlex

    words = ["python" if a == sys.executable else a for a in argv]
    if words[1:3] == ["-m", "trials.runtime.entrypoint"]:
        words = ["trials-run", *words[3:]]
    return shlex.join(words)


def check_trainer(argv: Sequence[str], spec_path: str, *, required: bool,
                  timeout_s: float = DEFAULT_TIMEOUT_S) -> str:
    """Ask the trainer; a line to print when all is well (or, not ``required``, why it was not asked).

    Raises:
        ConfigError: the trainer refuses some of the spec's flags (one line naming each), or it did
            not answer and ``required`` is set.
    """
    from trials.errors import ConfigError

    answer = ask_trainer(argv, spec_path, timeout_s=timeout_s)
    shown = _shown(argv)
    if isinstance(answer, NoAnswer):
        if required:
            raise ConfigError(f"could not check {spec_path} against the trainer `{shown}`: {answer.reason}; "
                              f"expected a trials.main or trials-run trainer")
        return f"note: {spec_path} was not checked against the trainer `{shown}`: {answer.reason}"
    return _verdict(answer, spec_path, shown)


def _verdict(answer: TrainerAnswer, spec_path: str, shown: str) -> str:
    from trials.errors import ConfigError

    if answer.problems:
        n = len(answer.problems)
        raise ConfigError(f"{spec_path} does not fit the trainer `{shown}` ({n} problem{'s' * (n > 1)}): "
                          + "; ".join(answer.problems))
    return f"the trainer `{shown}` accepts every flag of {spec_path} ({answer.n_values} values checked)"


def validate_trainer(job: JobSpec, spec_path: str, *, local_command: Sequence[str] | None, target: str | None,
                     pass_env: Sequence[str] = (),
                     timeout_s: float = DEFAULT_TIMEOUT_S) -> tuple[list[str], str | None]:
    """``trials validate --trainer``: ask the trainer; a ``trials`` trainer answers the check itself,
    any other is read as an argparse trainer from what its ``--help`` printed.

    Returns:
        The lines to print (warnings, then the verdict or why the flags were not checked), and the
        error when the trainer refuses some of the spec's flags, requires one no trial gets (one
        line naming each) or could not be run at all (None: no error).
    """
    from trials.controller.trial import argparse_help
    from trials.errors import ConfigError

    argv = trainer_command(job, local_command, target=target)
    shown = printable(_shown(argv))
    answer = ask_trainer(argv, spec_path, timeout_s=timeout_s, pass_env=pass_env)
    if isinstance(answer, TrainerAnswer):
        try:
            return [_verdict(answer, spec_path, shown)], None
        except ConfigError as err:
            return [], str(err)
    if not answer.started:
        return [], f"could not run the trainer `{shown}` to check {spec_path}: {answer.reason}"
    help_ = argparse_help.parse_help(answer.stdout) or argparse_help.parse_help(answer.stderr)
    if help_ is None:
        first = next((line.strip() for line in (answer.stdout + "\n" + answer.stderr).splitlines() if line.strip()),
                     None)
        printed = f"it printed `{printable(first, limit=120)}`" if first else "it printed nothing"
        ended = (f"exited {answer.exit_code}" if answer.exit_code is not None
                 else answer.reason.removeprefix("it "))
        return [f"note: validation of the flags was skipped: the trainer `{shown}` is not a trials.main/"
                f"trials-run trainer and its --help is not argparse's (no `usage:` line: {printed} and {ended})"], None
    if help_.error and help_.error.startswith("argument "):  # a value of the args refused before --help
        return [], (f"the trainer `{shown}` refuses the trial's args before any flag of {spec_path}: "
                    f"{printable(help_.error)}")
    if not help_.complete:  # `add_help=False`: a usage shows one name of each option, not its aliases
        return [f"note: validation of the flags was skipped: the trainer `{shown}` answered --help with its "
                f"usage only (`error: {printable(help_.error or '')}`), which does not name every option"], None
    pool = (job.trial_job or TrialJobSpec(worker_pools=(WorkerPoolSpec(),))).replicas()[0][2]
    problems, warnings, n = argparse_help.check_flags(help_, job.study, args=pool.args, spec_source=spec_path)
    lines = [f"warning: {printable(w)}" for w in warnings]
    if problems:
        k = len(problems)
        return lines, (f"{spec_path} does not fit the argparse trainer `{shown}` ({k} problem{'s' * (k > 1)}, "
                       f"read from its --help): " + printable("; ".join(problems)))
    return [*lines, f"the argparse trainer `{shown}` takes every flag of {spec_path} ({n} flags checked "
                    f"against its --help)"], None
