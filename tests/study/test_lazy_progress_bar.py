"""Optuna's progress bar module is loaded when first used, not with Optuna (``trials.study._LazyProgressBar``):
tqdm, importlib.metadata and asyncio were half of Optuna's import time in every command and worker."""

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


def test_the_finder_is_installed_once_and_ignores_other_modules() -> None:
    import trials.study as study

    finders = [f for f in sys.meta_path if isinstance(f, study._LazyProgressBar)]
    assert len(finders) == 1
    assert finders[0].find_spec("optuna.samplers", None) is None
