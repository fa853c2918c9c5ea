"""Before any trial: ask a ``trials.main``/``trials-run`` trainer whether every flag of the spec fits it.

The trainer is run once with ``--help`` and ``$TRIALS_CHECK_SPEC``: its runtime checks each parameter,
type, range and choice against its own Config (see :mod:`trials.runtime.spec_check`), writes the
problems to a file and exits without running the objective. A command that does not look like a
``trials`` trainer is not run at all (a plain script might not honour ``--help``).
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


def ask_trainer(argv: Sequence[str], spec_path: str, *, environ: Mapping[str, str] | None = None,
                timeout_s: float = DEFAULT_TIMEOUT_S) -> TrainerAnswer | str:
    """Run ``argv --help`` as a check of ``spec_path``; the answer, or why there is none (a str)."""
    env = launch.clean_base_env(os.environ if environ is None else environ)
    for name in (*protocol.VERTEX_ENV_VARS, *protocol.PROJECT_ENV_VARS):
        env.pop(name, None)
    fd, out = tempfile.mkstemp(prefix="trials-check-", suffix=".json")
    os.close(fd)
    try:
        env.update({protocol.ENV_CHECK_SPEC: os.path.abspath(spec_path), protocol.ENV_CHECK_OUT: out})
        try:
            proc = subprocess.run([*argv, "--help"], env=env, stdin=subprocess.DEVNULL, capture_output=True,
                                  timeout=timeout_s, check=False)
        except (OSError, subprocess.TimeoutExpired) as err:
            return f"{type(err).__name__}: {err}"
        raw = files.read_regular(out, max_bytes=_MAX_SCRIPT_BYTES)
        if not raw:
            tail = proc.stderr.decode("utf-8", "replace").strip().splitlines()[-1:] or ["no output"]
            return f"it exited {proc.returncode} without answering ({tail[0][:300]})"
        data = json.loads(raw)
        return TrainerAnswer(problems=[str(p) for p in data.get("problems", [])],
                             n_values=int(data.get("n_values", 0)),
                             flags=[str(f) for f in data.get("flags", [])])
    except (OSError, ValueError) as err:
        return f"its answer could not be read: {type(err).__name__}: {err}"
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
    if isinstance(answer, str):
        if required:
            raise ConfigError(f"could not check {spec_path} against the trainer `{shown}`: {answer}; "
                              f"expected a trials.main or trials-run trainer")
        return f"note: {spec_path} was not checked against the trainer `{shown}`: {answer}"
    if answer.problems:
        n = len(answer.problems)
        raise ConfigError(f"{spec_path} does not fit the trainer `{shown}` ({n} problem{'s' * (n > 1)}): "
                          + "; ".join(answer.problems))
    return f"the trainer `{shown}` accepts every flag of {spec_path} ({answer.n_values} values checked)"
