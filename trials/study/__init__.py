"""The Optuna adapter: the only subpackage that imports optuna (nothing of it is imported here; a few modules of
Optuna and NumPy are loaded on first use: ``_LazyModules``).

The Optuna storage is the job's single source of truth. A job is one study named after the job id:
study user attributes hold the spec and the job's state; each Optuna trial is one Vertex trial
(``id = number + 1``) whose user attributes hold its Vertex state, attempts, measurements and reasons.
Trials are created up front as WAITING (``maxTrialCount`` of them, or the grid size), so any number
of controllers or workers claim them atomically and can never exceed the count.

Modules: ``storage`` (opening a storage from a URL; the outage-retrying database storage),
``journal`` (batched journal writes), ``journal_check`` (finding and repairing unreadable journal
lines), ``space`` (the search space in Optuna's terms), ``samplers``, ``store`` (``JobStore``: one
job in a storage), ``importances`` (parameter importances for the report), ``outages`` (telling a
connection outage from a failed query, retrying through it), ``leases`` (many workers on one database
job: the lease table's SQL on the storage's engine). The Optuna-free URL handling lives in the
vocabulary: ``trials.storage_url``.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import sys
from collections.abc import Sequence
from types import ModuleType


class _LazyModules(importlib.abc.MetaPathFinder):
    """Modules loaded on first use (``importlib.util.LazyLoader`` runs one when an attribute of it is
    first read, so nothing else changes), installed once when this package is imported, before
    anything in it imports Optuna or NumPy:

    - ``optuna.progress_bar``: Optuna imports it with its study module, and it imports ``tqdm.auto``
      (importlib.metadata, email, asyncio, ssl): about half of Optuna's import time (~80 ms of every
      command and worker that imports Optuna here), for a progress bar we never show;
    - ``numpy.f2py``, ``numpy.testing``, ``numpy.ma``: SciPy's vendored array-api-compat reads every
      attribute of ``numpy`` when ``scipy.linalg`` is first imported, which loads these lazily-loaded
      NumPy submodules (f2py's Fortran parser, unittest, masked arrays): ~40 % of that import in the GP
      worker, whose CPU comes out of the trials' on a machine they fill.
    """

    LAZY = frozenset({"optuna.progress_bar", "numpy.f2py", "numpy.testing", "numpy.ma"})

    def find_spec(self, fullname: str, path: Sequence[str] | None,
                  target: ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        if fullname not in self.LAZY:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return None
        spec.loader = importlib.util.LazyLoader(spec.loader)
        return spec


if not any(type(f).__name__ == "_LazyModules" for f in sys.meta_path):
    sys.meta_path.insert(0, _LazyModules())
