"""trials' own command processes set themselves up before their imports (``trials.startup``): Optuna's progress bar
module, and the NumPy submodules SciPy's array-api-compat touches, are loaded when first used (tqdm,
importlib.metadata and asyncio were half of Optuna's import time in every command and worker; f2py, unittest and
masked arrays ~40 % of scipy.linalg's in the GP worker). A plain ``import trials`` does none of it."""

from __future__ import annotations

import subprocess
import sys

CHECK = """
import sys
import trials.startup
trials.startup.install()
import trials.study
import optuna
optuna.logging.set_verbosity(optuna.logging.WARNING)
loaded = lambda: sorted(m for m in ("tqdm", "tqdm.auto", "asyncio") if m in sys.modules)
assert loaded() == [], loaded()
study = optuna.create_study()
trial = study.ask()
study.tell(trial, trial.suggest_float("x", 0, 1))
assert loaded() == [], loaded()
study.optimize(lambda t: t.suggest_float("x", 0, 1), n_trials=2, show_progress_bar=True)
assert "tqdm.auto" in sys.modules and len(study.trials) == 3
from optuna.progress_bar import _ProgressBar
print("ok", _ProgressBar.__name__)
"""


def test_optuna_loads_its_progress_bar_only_when_used() -> None:
    done = subprocess.run([sys.executable, "-c", CHECK], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok _ProgressBar"


NUMPY = """
import sys
import trials.startup
trials.startup.install()
import trials.study
import numpy as np
import scipy.linalg
EAGER = set(sys.argv[1:])  # what this NumPy's own __init__ imports (NumPy 1.x: ma, and more): not ours to defer
lazy = lambda: sorted(m for m in ("numpy.f2py", "numpy.testing", "numpy.ma")
                      if type(sys.modules.get(m)).__name__ == "_LazyModule")
deferred = lambda: sorted(m for m in ("numpy.f2py", "numpy.testing", "numpy.ma") if m not in sys.modules or m in lazy())
assert set(deferred()) >= {"numpy.f2py", "numpy.ma", "numpy.testing"} - EAGER, (deferred(), lazy())
masked = np.ma.masked_array([1.0, 2.0], mask=[False, True])
assert float(masked.sum()) == 1.0 and "numpy.ma" not in lazy()
np.testing.assert_allclose(scipy.linalg.cho_factor(np.eye(2))[0], np.eye(2))
import numpy.f2py as f2py
assert callable(f2py.compile if hasattr(f2py, "compile") else f2py.run_main) and lazy() == []
print("ok")
"""


def test_numpy_submodules_scipy_touches_load_when_used() -> None:
    eager = subprocess.run([sys.executable, "-c", "import sys, numpy; print(*(m for m in ('numpy.f2py', "
                            "'numpy.testing', 'numpy.ma') if m in sys.modules))"], capture_output=True, text=True,
                           timeout=120, check=True).stdout.split()
    assert len(eager) < 3, eager  # (NumPy 2 imports none of them: all three are deferred)
    done = subprocess.run([sys.executable, "-c", NUMPY, *eager], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"


FINDERS = """
import sys
import trials, trials.cli, trials.study, trials.startup
import dataclasses
assert not trials.startup.installed() and getattr(dataclasses, "exec", None) is None
trials.startup.install()
trials.startup.install()
finders = [f for f in sys.meta_path if isinstance(f, trials.startup.LazyModules)]
assert len(finders) == 1 and finders[0] is sys.meta_path[0], sys.meta_path
assert finders[0].find_spec("optuna.samplers", None) is None
from trials import _dataclass_code
assert sys.modules["dataclasses"].exec is _dataclass_code.cached_exec
print("ok")
"""


def test_the_finder_is_installed_only_when_asked_once_and_ignores_other_modules() -> None:
    done = subprocess.run([sys.executable, "-c", FINDERS], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"


def test_a_command_module_runs_with_its_arguments(tmp_path) -> None:
    """``python -m trials.startup MODULE ARGS``: how the sampler's worker starts (trials.study.choice.spawn)."""
    import trials

    done = subprocess.run([sys.executable, "-m", "trials.startup", "trials.cli", "--version"], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0 and done.stdout.strip() == f"trials {trials.__version__}", done.stderr
    (tmp_path / "probe.py").write_text("raise SystemExit(7)")
    done = subprocess.run([sys.executable, "-m", "trials.startup", "probe", "a"], capture_output=True, text=True,
                          timeout=60, cwd=tmp_path)
    assert done.returncode == 2 and "expected a module of trials, got 'probe'" in done.stderr, done.stderr


BLAS = """
import os, sys
import trials.startup
trials.startup.install()
trials.startup.one_blas_thread()
import numpy
print(len(os.listdir("/proc/self/task")), os.environ.get("OPENBLAS_NUM_THREADS"))
"""


def test_a_users_own_blas_thread_count_is_kept() -> None:
    import os

    from trials.startup import LazyModules

    env = {k: v for k, v in os.environ.items() if k not in LazyModules.BLAS_THREADS}
    env["OPENBLAS_NUM_THREADS"] = "2"
    done = subprocess.run([sys.executable, "-c", BLAS], capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["2", "2"]  # OpenBLAS's pool as asked (the main thread and one more)
    del env["OPENBLAS_NUM_THREADS"]
    done = subprocess.run([sys.executable, "-c", BLAS], capture_output=True, text=True, timeout=120, env=env)
    assert done.stdout.split() == ["1", "None"], done.stderr
