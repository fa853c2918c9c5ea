"""What trials' own command processes set up before they import the rest; never done by importing trials.

``import trials``, any ``trials.*`` module and the pytest plugin change nothing outside the package. The two
processes trials itself starts and owns — the ``trials`` command (console script, ``python -m trials``) and the
model-based sampler's worker (``python -m trials.startup trials.study.ahead …``) — call :func:`install` first
thing, before they import Optuna or NumPy. A trainer's process, a notebook, a test session, a program that calls
``trials.cli.main`` or ``trials.tune`` get none of it.

What :func:`install` does in such a process (measured on this machine kind, benchmarks/README.md part 2):

- an import finder (:class:`LazyModules`) loads ``optuna.progress_bar`` (tqdm, importlib.metadata, email, asyncio,
  ssl: about half of Optuna's import time, ~80 ms of every command) and NumPy's ``f2py``, ``testing`` and ``ma``
  (read by SciPy's array-api-compat when ``scipy.linalg`` is first imported: ~40 % of that import in the GP
  worker) on first use instead (``importlib.util.LazyLoader``);
- trials' dataclass methods compile once and are kept beside the modules' bytecode (``trials._dataclass_code``:
  ~30 ms of a job command's imports);
- while :func:`one_blas_thread` is on (a command that runs a job), NumPy starts no OpenBLAS thread pool
  (``OPENBLAS_NUM_THREADS=1`` only while NumPy's modules execute, so no child inherits it, and not at all when the
  user set a thread count): ~0.08 s of the controller's start-up CPU on 2 cores.
"""

from __future__ import annotations

import sys

TYPE_CHECKING = False
if TYPE_CHECKING:  # pragma: no cover
    from typing import Any, NoReturn


class LazyModules:
    """The import finder of :func:`install` (see the module's docstring)."""

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


def install() -> None:
    """Set this process up as one of trials' own commands (see the module's docstring). Only a process trials
    starts and owns calls this, first thing; calling it again changes nothing."""
    if not installed():
        sys.meta_path.insert(0, LazyModules())
    if "dataclasses" in sys.modules:  # else when it is imported (LazyModules)
        _keep_dataclass_code(sys.modules["dataclasses"])


def installed() -> bool:
    """Whether :func:`install` ran in this process."""
    return any(isinstance(finder, LazyModules) for finder in sys.meta_path)


def one_blas_thread(on: bool = True) -> None:
    """In a process set up by :func:`install`: NumPy, if imported from now on (until called with False), starts
    no OpenBLAS thread pool. Elsewhere it does nothing: a library call never changes how NumPy starts."""
    LazyModules.one_blas_thread = on


def _keep_dataclass_code(dataclasses: Any) -> None:
    from trials import _dataclass_code

    _dataclass_code.install(dataclasses)


RUNS_A_JOB = ("sweep", "resume", "worker")  # the commands whose NumPy starts no BLAS pool (a controller's)


def set_up_command(args: list[str]) -> None:
    """Set this process up as the ``trials`` command run with ``args`` (before it imports the CLI)."""
    install()
    command = next((word for word in args if not word.startswith("-")), None)  # (trials' own options: --debug)
    if command in RUNS_A_JOB:
        one_blas_thread()


def trials_command() -> NoReturn:
    """The ``trials`` console script: :func:`set_up_command`, then the CLI (:func:`trials.cli.run`)."""
    set_up_command(sys.argv[1:])
    from trials.cli import run

    run()


def _run_module(argv: list[str]) -> None:
    """``python -m trials.startup MODULE ARGS…``: :func:`install`, then MODULE as ``__main__`` with ARGS."""
    if len(argv) < 2:
        print("usage: python -m trials.startup MODULE [ARGS...] (runs a trials command module)", file=sys.stderr)
        raise SystemExit(2)
    module = argv[1]
    if module != "trials" and not module.startswith("trials."):
        print(f"python -m trials.startup: expected a module of trials, got {module!r}", file=sys.stderr)
        raise SystemExit(2)
    install()
    import runpy

    sys.argv = [argv[0], *argv[2:]]
    runpy.run_module(module, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    from trials.startup import _run_module as run_module  # the module's one copy, not this __main__

    run_module(sys.argv)
