"""Optuna's progress bar module, and the NumPy submodules SciPy's array-api-compat touches, are loaded when
first used (``trials._LazyModules``): tqdm, importlib.metadata and asyncio were half of Optuna's import
time in every command and worker; f2py, unittest and masked arrays ~40 % of scipy.linalg's in the GP worker."""

from __future__ import annotations

import subprocess
import sys

CHECK = """
import sys
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
import trials.study
import numpy as np
import scipy.linalg
lazy = lambda: sorted(m for m in ("numpy.f2py", "numpy.testing", "numpy.ma")
                      if type(sys.modules.get(m)).__name__ == "_LazyModule")
assert lazy() == ["numpy.f2py", "numpy.ma", "numpy.testing"], lazy()
masked = np.ma.masked_array([1.0, 2.0], mask=[False, True])
assert float(masked.sum()) == 1.0 and lazy() == ["numpy.f2py", "numpy.testing"]
np.testing.assert_allclose(scipy.linalg.cho_factor(np.eye(2))[0], np.eye(2))
assert callable(np.f2py.compile if hasattr(np.f2py, "compile") else np.f2py.run_main) and lazy() == []
print("ok")
"""


def test_numpy_submodules_scipy_touches_load_when_used() -> None:
    done = subprocess.run([sys.executable, "-c", NUMPY], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"


def test_the_finder_is_installed_once_and_ignores_other_modules() -> None:
    import trials

    finders = [f for f in sys.meta_path if isinstance(f, trials._LazyModules)]
    assert len(finders) == 1
    assert finders[0].find_spec("optuna.samplers", None) is None


BLAS = """
import os, sys
import trials
trials._one_blas_thread()
import numpy
print(len(os.listdir("/proc/self/task")), os.environ.get("OPENBLAS_NUM_THREADS"))
"""


def test_a_users_own_blas_thread_count_is_kept() -> None:
    import os

    import trials

    env = {k: v for k, v in os.environ.items() if k not in trials._LazyModules.BLAS_THREADS}
    env["OPENBLAS_NUM_THREADS"] = "2"
    done = subprocess.run([sys.executable, "-c", BLAS], capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["2", "2"]  # OpenBLAS's pool as asked (the main thread and one more)
    del env["OPENBLAS_NUM_THREADS"]
    done = subprocess.run([sys.executable, "-c", BLAS], capture_output=True, text=True, timeout=120, env=env)
    assert done.stdout.split() == ["1", "None"], done.stderr
