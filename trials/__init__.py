"""trials: write, test and tune a Vertex AI HyperparameterTuningJob trainer, offline.

``import trials`` is light: it loads neither optuna, yaml nor numpy. The public names are
imported on first use; a few modules of Optuna and NumPy are too (``_LazyModules``).
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:  # pragma: no cover - typing costs ~4 ms of every trial's start-up
    from typing import Any

__version__ = "0.1.0"

_LAZY = {
    "main": ("trials.runtime.entrypoint", "main"),
    "TrialContext": ("trials.runtime.context", "TrialContext"),
    "tune": ("trials.controller.jobs.tune", "tune"),
    "load_spec": ("trials.spec.load", "load_spec"),
    "TrialsError": ("trials.errors", "TrialsError"),
    "ConfigError": ("trials.errors", "ConfigError"),
    "TuneError": ("trials.errors", "TuneError"),
}

__all__ = ["__version__", *_LAZY]


def __getattr__(name: str) -> Any:
    try:
        module_name, attr = _LAZY[name]
    except KeyError:
        raise AttributeError(f"module 'trials' has no attribute {name!r}") from None
    import importlib

    value = getattr(importlib.import_module(module_name), attr)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)


class _LazyModules:
    """An import finder: these modules are loaded on first use (``importlib.util.LazyLoader`` runs one
    when an attribute of it is first read, so nothing else changes). Installed by ``import trials``
    (nothing is imported for it until one of them is):

    - ``optuna.progress_bar``: Optuna imports it with its study module, and it imports ``tqdm.auto``
      (importlib.metadata, email, asyncio, ssl): about half of Optuna's import time (~80 ms of every
      command, controller and GP worker here), for a progress bar we never show;
    - ``numpy.f2py``, ``numpy.testing``, ``numpy.ma``: SciPy's vendored array-api-compat reads every
      attribute of ``numpy`` when ``scipy.linalg`` is first imported, which loads these lazily-loaded
      NumPy submodules (f2py's Fortran parser, unittest, masked arrays): ~40 % of that import in the GP
      worker, whose CPU comes out of the trials' on a machine they fill.
    """

    LAZY = frozenset({"optuna.progress_bar", "numpy.f2py", "numpy.testing", "numpy.ma"})

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname not in self.LAZY:
            return None
        import importlib.machinery
        import importlib.util

        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return None
        spec.loader = importlib.util.LazyLoader(spec.loader)
        return spec


def _install_lazy_modules() -> None:
    import sys

    if not any(type(f).__name__ == "_LazyModules" for f in sys.meta_path):
        sys.meta_path.insert(0, _LazyModules())


_install_lazy_modules()
