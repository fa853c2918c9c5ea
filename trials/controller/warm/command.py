"""What may start warm (pure): the command's form, the launcher a trial's environment picks, the preload list.

A trial starts warm only as ``python SCRIPT …`` or ``python -m MODULE …`` on the launcher's own
interpreter (no interpreter options: they change how Python starts). Variables a library reads at import
are frozen in the launcher, so a launcher serves the trials whose environment equals its own but for the
per-trial variables (:data:`PER_TRIAL`), which are set in the child: one launcher per set of start-up
variables (``PYTHON*``, ``*_NUM_THREADS``, ``MKL_*``, ``TF_*``, ``XLA_*``, ``LD_*`` and every other
variable but the per-trial ones, so none is missed).
"""

from __future__ import annotations

import ast
import os
import re
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

PER_TRIAL_PREFIXES = ("CLOUD_ML_", "AIP_", "TRIALS_")
PER_TRIAL = frozenset({"CLUSTER_SPEC", "TF_CONFIG", "CUDA_VISIBLE_DEVICES", "MASTER_ADDR", "MASTER_PORT",
                       "WORLD_SIZE", "RANK"})
NEVER_PRELOAD = ("jax", "jaxlib")  # jax starts its backend threads on first use: never in a launcher
MAX_PRELOAD = 20_000  # module names read from a survey
MAX_SCRIPT_BYTES = 1 << 20  # a script larger than this is not read for its imports
_MODULE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")


@dataclass(frozen=True, slots=True, kw_only=True)
class WarmCommand:
    """A command that can start warm: ``kind`` is ``script`` (``target`` its path) or ``module``."""

    python: str
    kind: str
    target: str
    args: tuple[str, ...]


def per_trial(name: str) -> bool:
    """Whether a variable is set in each child (its trial's), not frozen in the launcher."""
    return name in PER_TRIAL or name.startswith(PER_TRIAL_PREFIXES)


def startup_key(env: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    """The launcher a trial with this environment needs: every variable but the per-trial ones."""
    return tuple(sorted((k, v) for k, v in env.items() if not per_trial(k)))


def launcher_env(env: Mapping[str, str]) -> dict[str, str]:
    """The launcher's own environment: the trial's without the per-trial variables."""
    return {k: v for k, v in env.items() if not per_trial(k)}


def same_interpreter(program: str, interpreter: str) -> bool:
    """Whether ``program`` (resolved) is ``interpreter`` itself: the same path, or the same file in the same
    folder (``python`` and ``python3`` of one venv; another venv's link to the same binary is not)."""
    program, interpreter = os.path.abspath(program), os.path.abspath(interpreter)
    if program == interpreter:
        return True
    try:
        return os.path.dirname(program) == os.path.dirname(interpreter) and os.path.samefile(program, interpreter)
    except OSError:
        return False


def warm_form(argv: Sequence[str], *, env: Mapping[str, str], cwd: str,
              interpreter: str) -> WarmCommand | str:
    """The command as a :class:`WarmCommand`, or why it runs fresh (one line)."""
    if len(argv) < 2:
        return "the command is not `python SCRIPT ...` or `python -m MODULE ...`"
    program = argv[0] if "/" in argv[0] else shutil.which(argv[0], path=env.get("PATH", os.defpath))
    if program is None:
        return f"{argv[0]!r} is not on the trials' PATH"
    program = program if os.path.isabs(program) else os.path.join(cwd, program)
    if not same_interpreter(program, interpreter):
        return f"{argv[0]} is not the launcher's interpreter {interpreter}"
    if argv[1] == "-m":
        if len(argv) < 3 or not _MODULE_NAME.fullmatch(argv[2]):
            return "`python -m` is not followed by a module name"
        return WarmCommand(python=program, kind="module", target=argv[2], args=tuple(argv[3:]))
    if argv[1].startswith("-"):
        return f"the interpreter option {argv[1]} changes how Python starts"
    script = argv[1] if os.path.isabs(argv[1]) else os.path.join(cwd, argv[1])
    return WarmCommand(python=program, kind="script", target=script, args=tuple(argv[2:]))


def preload_names(data: object) -> list[str]:
    """The module names of a survey (a JSON list a trial wrote: a claim), valid names only, never jax."""
    if not isinstance(data, list):
        return []
    names = []
    for name in data[:MAX_PRELOAD]:
        if not isinstance(name, str) or not _MODULE_NAME.fullmatch(name):
            continue
        if name.split(".")[0] in NEVER_PRELOAD or name.startswith("trials.controller.warm"):
            continue
        names.append(name)
    return list(dict.fromkeys(names))


def script_imports(source: bytes) -> list[str]:
    """The absolute imports a script makes unconditionally at its top level (``import a.b``: ``a.b``;
    ``from a.b import c``: ``a.b`` and ``a.b.c``, which may be a module), in order; [] when it does not
    parse. What a launcher may import before the first trial told what it loaded: the script itself
    imports each as it starts (one that is not a module, or a module of the launch folder, fails to
    import in the launcher and is skipped)."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return []
    names: list[str] = []
    for node in tree.body:
        if isinstance(node, ast.Import):
            names.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.append(node.module)
            names.extend(f"{node.module}.{alias.name}" for alias in node.names if alias.name != "*")
    return preload_names(names)
