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

    When ``dataclasses`` is imported, it compiles trials' dataclass methods through kept code
    (``trials._dataclass_code``). It also keeps a job command's NumPy from starting OpenBLAS's thread pool
    (``one_blas_thread``, set by ``trials.cli.main``): OpenBLAS starts a thread per core when NumPy is imported,
    and on this machine kind (2 cores) that pool cost the controller ~0.08 s of CPU at start-up (``import
    optuna``: 0.25 → 0.17 s of user CPU), which comes out of the trials' cores; the controller's own suggestions
    (TPE, random, grid; the GP is suggested in its own process unless ``TRIALS_SUGGEST=inline``) make no BLAS
    call large enough to use a second thread. ``OPENBLAS_NUM_THREADS=1`` is set only while NumPy's modules
    execute, so no child inherits it, and not at all when the user set a thread count (``BLAS_THREADS``).
    """

    LAZY = frozenset({"optuna.progress_bar", "numpy.f2py", "numpy.testing", "numpy.ma"})
    BLAS_THREADS = ("OPENBLAS_NUM_THREADS", "GOTO_NUM_THREADS", "OMP_NUM_THREADS")
    one_blas_thread = False

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname == "numpy" and self.one_blas_thread:
            return self._one_blas_thread(fullname, path, target)
        if fullname == "dataclasses":
            return self._wrapped(fullname, path, target, after=_keep_dataclass_code)
        if fullname not in self.LAZY:
            return None
        import importlib.machinery
        import importlib.util

        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return None
        spec.loader = importlib.util.LazyLoader(spec.loader)
        return spec

    def _one_blas_thread(self, fullname: str, path: Any, target: Any) -> Any:
        """NumPy's spec, its module run with one BLAS thread."""
        import os

        if any(name in os.environ for name in self.BLAS_THREADS):
            return None

        def before() -> None:
            os.environ["OPENBLAS_NUM_THREADS"] = "1"  # read once, when NumPy loads OpenBLAS

        def after(module: Any) -> None:
            os.environ.pop("OPENBLAS_NUM_THREADS", None)

        return self._wrapped(fullname, path, target, before=before, after=after, always=True)

    def _wrapped(self, fullname: str, path: Any, target: Any, *, before: Any = None, after: Any = None,
                 always: bool = False) -> Any:
        """The spec the finders after this one give, ``before()`` and ``after(module)`` around the module's
        execution (``after`` only once it ran, unless ``always``)."""
        import sys

        later = sys.meta_path[sys.meta_path.index(self) + 1:] if self in sys.meta_path else sys.meta_path
        spec = None
        for finder in later:
            find = getattr(finder, "find_spec", None)
            spec = find(fullname, path, target) if find is not None else None
            if spec is not None:
                break
        loader = None if spec is None else spec.loader
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        execute = loader.exec_module

        def exec_module(module: Any) -> None:
            if before is not None:
                before()
            ran = False
            try:
                execute(module)
                ran = True
            finally:
                if after is not None and (ran or always):
                    after(module)

        loader.exec_module = exec_module
        return spec


def _install_lazy_modules() -> None:
    import sys

    if not any(type(f).__name__ == "_LazyModules" for f in sys.meta_path):
        sys.meta_path.insert(0, _LazyModules())
    if "dataclasses" in sys.modules:  # else when it is imported (``_LazyModules``)
        _keep_dataclass_code(sys.modules["dataclasses"])


def _keep_dataclass_code(dataclasses: Any) -> None:
    """trials' dataclass methods compile once, not in every process (``trials._dataclass_code``)."""
    from trials import _dataclass_code

    _dataclass_code.install(dataclasses)


def _one_blas_thread(on: bool = True) -> None:
    """NumPy, if this process imports it from now on (until called with False), starts no OpenBLAS thread
    pool (see ``_LazyModules``)."""
    _LazyModules.one_blas_thread = on


_install_lazy_modules()
