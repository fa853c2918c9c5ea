"""Which sampler a study gets, and its suggestion process started early: neither imports Optuna.

The command line decides the sampler right after reading the spec (:mod:`trials.study.samplers`
builds it). A model-based sampler suggests in a process of its own (``python -m trials.study.ahead``),
whose imports (Optuna, NumPy, SciPy's optimize: ~0.3 s of CPU) used to start with the job loop, when
the first trials already fill the cores: ``trials sweep`` now starts it as soon as the spec says its
sampler runs ahead (:func:`warm`, before the controller itself imports Optuna), so it loads its
libraries on a core the controller's own start-up leaves idle, then waits for its job
(:meth:`trials.study.ahead.AheadSuggester.start` takes it with :func:`take`). A warm process no job
took is killed (:func:`close_warm`: it holds nothing), and one whose controller dies ends itself (its
orphan watch).
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import site
import subprocess
import sys
from collections.abc import Iterable, Mapping
from typing import IO, Any

from trials.errors import ConfigError
from trials.spec import Algorithm, StudySpec

# Samplers that suggest ahead in a process of their own (trials.study.ahead), and how many finished
# trials (completed or stopped early) their random start-up takes at most (see :func:`startup_trials`)
AHEAD_SAMPLERS: dict[str, int] = {"gp": 10, "gp-warped": 10, "vizier": 1}
MAX_STARTUP = 10  # Optuna's samplers' default n_startup_trials
MIN_STARTUP = 4  # a model fitted to fewer random trials than this learns little: a job that small stays random
# A trial's system attribute: how its parameters were chosen (SUGGESTED_BY's values), counted by describe
SUGGESTED_ATTR = "trials:suggested"
MODEL, RANDOM, FIXED = "model", "random", "fixed"  # by the sampler's model; at random (start-up, fallback); given
# What that process imports before its first suggestion (torch: seconds)
WARM_UP: dict[str, tuple[str, ...]] = {"gp": ("torch", "scipy.optimize"), "gp-warped": ("scipy.optimize",)}

# What --sampler accepts (a local choice for ALGORITHM_UNSPECIFIED; Vertex has no such field).
CHOICES = ("gp-warped", "gp", "tpe", "cmaes", "random", "vizier")


def gp_available(name: str = "gp-warped") -> bool:
    """Whether the GP sampler ``name`` can run: ``gp-warped`` (:mod:`trials.study.npgp`) needs scipy,
    ``gp`` (Optuna's GPSampler) torch and scipy."""
    needs = ("scipy",) if name == "gp-warped" else ("torch", "scipy")
    return all(importlib.util.find_spec(m) is not None for m in needs)


def choose_sampler_name(study: StudySpec, *, n_trials: int) -> str:
    """The documented rule for ALGORITHM_UNSPECIFIED.

    ``gp-warped`` (Optuna's GPSampler's model and search fitted to Vizier-style warped values,
    :mod:`warped_gp`, computed with NumPy and SciPy, :mod:`npgp`) when scipy is installed, the study
    has one metric, no conditional parameters and at most 300 trials (a GP's cost grows cubically with
    the trials); otherwise multivariate TPE (grouped for conditional spaces, constant liar for parallel
    trials). Chosen on ``benchmarks/README.md`` part 3.
    """
    if study.algorithm is Algorithm.RANDOM_SEARCH:
        return "random"
    if study.algorithm is Algorithm.GRID_SEARCH:
        return "grid"
    conditional = any(p.conditionals for p in study.parameters)
    if gp_available() and len(study.metrics) == 1 and not conditional and n_trials <= 300:
        return "gp-warped"
    return "tpe"


def check_choice(name: str, study: StudySpec, *, source: str = "--sampler") -> str:
    """``name`` when the study can use it; otherwise a ConfigError naming the flag and what is wrong."""
    if name not in CHOICES:
        raise ConfigError(f"{source}: expected one of {', '.join(CHOICES)}, got {name!r}")
    if study.algorithm is not Algorithm.ALGORITHM_UNSPECIFIED:
        raise ConfigError(f"{source} {name}: only for algorithm ALGORITHM_UNSPECIFIED, the spec's is "
                          f"{study.algorithm.name}")
    if name == "gp-warped" and not gp_available(name):
        raise ConfigError(f"{source} {name}: needs scipy, which is not installed: pip install 'trials[gp]'")
    if name == "gp" and not gp_available(name):
        raise ConfigError(f"{source} {name}: needs torch and scipy, which are not installed: "
                          f"pip install 'trials[gp]' torch")
    if name == "vizier":
        from trials.study import vizier

        if not vizier.available():
            raise ConfigError(f"{source} vizier: needs google-vizier and jax, which are not installed: "
                              f"pip install 'trials[vizier]'")
        if len(study.metrics) > 1:
            raise ConfigError(f"{source} vizier: expected one metric, got {len(study.metrics)}")
        conditional = [p.parameter_id for p in study.parameters if p.conditionals]
        if conditional:
            raise ConfigError(f"{source} vizier: expected a flat search space (OSS Vizier's designer has no "
                              f"conditional parameters), got conditional parameters under {conditional[0]!r}")
    if name == "cmaes":
        if importlib.util.find_spec("cmaes") is None:
            raise ConfigError(f"{source} cmaes: needs the cmaes package, which is not installed: "
                              f"pip install 'trials[cmaes]'")
        if len(study.metrics) > 1:
            raise ConfigError(f"{source} cmaes: expected one metric (CMA-ES is single-objective), "
                              f"got {len(study.metrics)}")
    return name


def startup_trials(n_trials: int, sampler_name: str = "tpe") -> int:
    """How many finished trials (completed or stopped early) a job's sampler takes at random before its
    model suggests: half the job, at least :data:`MIN_STARTUP` and at most :data:`MAX_STARTUP` (Optuna's
    default, kept for every job of 20 trials or more), never more than the sampler's own (OSS Vizier: 1).

    A fixed start-up of 10 left a job of 10 trials or fewer all random, and one of 12 with two model-based
    suggestions at most (issue 48); half the job leaves the model the other half."""
    rule = min(MAX_STARTUP, max(MIN_STARTUP, -(-max(n_trials, 0) // 2)))
    return min(rule, AHEAD_SAMPLERS.get(sampler_name, MAX_STARTUP))


def suggestion_counts(trials: Iterable[Any]) -> dict[str, int]:
    """{"model": n, "random": n, "fixed": n}: how the parameters of the ``trials`` (Optuna's FrozenTrials or
    their replays) were chosen, as each trial's claim noted (:data:`SUGGESTED_ATTR`); a trial claimed
    before it was noted, or never claimed, is not counted. Only the three known words count (the storage
    is a file the user can edit)."""
    counts = {MODEL: 0, RANDOM: 0, FIXED: 0}
    for t in trials:
        kind = getattr(t, "system_attrs", {}).get(SUGGESTED_ATTR)
        if isinstance(kind, str) and kind in counts:
            counts[kind] += 1
    return counts


def suggestions_words(counts: Mapping[str, int], sampler_name: str | None) -> str | None:
    """One line saying how a job's parameters were chosen ("suggestions: 6 from the gp-warped model, 6 random
    (its start-up or a fallback)"), or None when no claim noted it or the search is random or a grid."""
    if not any(counts.values()) or (sampler_name in ("random", "grid") and not counts.get(MODEL)):
        return None  # (a random or grid search has no model to speak of)
    parts = [f"{counts.get(MODEL, 0)} from the {sampler_name or 'sampler'} model"]
    if counts.get(RANDOM):
        parts.append(f"{counts[RANDOM]} random (its start-up or a fallback)")
    if counts.get(FIXED):
        parts.append(f"{counts[FIXED]} given (grid points or enqueued)")
    return "suggestions: " + ", ".join(parts)


# --- the suggestion process, started early ---------------------------------------------------------
_warm: tuple[str, subprocess.Popen[bytes]] | None = None


def spawn(sampler_name: str, stderr: IO[bytes] | int | None) -> subprocess.Popen[bytes]:
    """The worker for ``sampler_name``'s suggestions: it imports that sampler's libraries at once (at a
    low priority), then reads its job on stdin. Raises OSError when it cannot be started."""
    env = dict(os.environ)
    env.setdefault("OMP_NUM_THREADS", "1")  # small matrices: one thread is faster, and leaves the trials a core
    env.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    env["PYTHONSAFEPATH"] = "1"  # a trials/ folder in the working directory is not imported
    package_root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    if package_root not in site.getsitepackages():
        # a source checkout run as ``python -m trials``: the worker imports the same trials
        env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH", "")) if p)
    # (set up as trials' own command process, trials.startup: NumPy's submodules SciPy touches load lazily)
    command = [sys.executable, "-m", "trials.startup", "trials.study.ahead", str(os.getpid()), sampler_name]
    proc = subprocess.Popen(
        command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr, env=env, close_fds=True,
        start_new_session=True)
    assert proc.stdout is not None
    os.set_blocking(proc.stdout.fileno(), False)
    return proc


def warm(sampler_name: str) -> None:
    """Start ``sampler_name``'s worker now, ahead of its job (a no-op if one is warm or it cannot start).
    What it prints before its job tells it its log goes to an unnamed temporary file, which it copies
    into the log then (:func:`trials.study.ahead._log_to`); a worker that dies loading its libraries is
    started again by the job, with its log, where the same traceback then goes."""
    global _warm
    if _warm is not None:
        return
    import tempfile

    # (a failure to start: the job starts its own, and says why if that fails too)
    with contextlib.suppress(OSError), tempfile.TemporaryFile() as early:
        _warm = (sampler_name, spawn(sampler_name, early))


def take(sampler_name: str) -> subprocess.Popen[bytes] | None:
    """The warm worker, if it is ``sampler_name``'s and alive (once: None after); any other is closed.
    (One that died after this look counts as any dead worker: one trial random, then a restart.)"""
    global _warm
    if _warm is None:
        return None
    (name, proc), _warm = _warm, None
    if name == sampler_name and proc.poll() is None:
        return proc
    close(proc, wait_s=0.0)
    return None


def close_warm() -> None:
    """End a warm worker no job took (a spec refused after it started, a job that failed to start): killed
    at once, so a command's error is not delayed by its imports (it holds nothing, has written nothing)."""
    global _warm
    if _warm is not None:
        (_, proc), _warm = _warm, None
        close(proc, wait_s=0.0)


def close(proc: subprocess.Popen[bytes], wait_s: float = 5.0) -> int:
    """End a worker: its input closed, it exits; killed if it has not within ``wait_s``."""
    for pipe in (proc.stdin, proc.stdout):
        if pipe is not None:
            with contextlib.suppress(OSError):
                pipe.close()
    try:
        if wait_s > 0 or proc.poll() is not None:
            return proc.wait(timeout=wait_s)
    except subprocess.TimeoutExpired:
        pass
    return kill(proc)


def kill(proc: subprocess.Popen[bytes]) -> int:
    """SIGKILL the worker's process group (what it started dies with it) and reap it."""
    import signal

    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    return proc.wait()


__all__ = ["AHEAD_SAMPLERS", "CHOICES", "FIXED", "MAX_STARTUP", "MIN_STARTUP", "MODEL", "RANDOM", "SUGGESTED_ATTR",
           "WARM_UP", "check_choice", "choose_sampler_name", "close", "close_warm", "gp_available", "kill", "spawn",
           "startup_trials", "suggestion_counts", "suggestions_words", "take", "warm"]
