"""The Optuna adapter: the only subpackage that imports optuna (nothing of it is imported here; its progress bar
module is made lazy: ``_LazyProgressBar``).

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


class _LazyProgressBar(importlib.abc.MetaPathFinder):
    """``optuna.progress_bar`` loaded on first use: Optuna imports it with its study module, and it
    imports ``tqdm.auto`` (importlib.metadata, email, asyncio, ssl): about half of Optuna's import
    time (~80 ms of every command and worker that imports Optuna here), for a progress bar we
    never show. ``importlib.util.LazyLoader`` runs the module when an attribute of it is first read
    (``Study.optimize`` with its bar), so nothing else changes. Installed once, when this package
    is imported, before anything in it imports Optuna."""

    def find_spec(self, fullname: str, path: Sequence[str] | None,
                  target: ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        if fullname != "optuna.progress_bar":
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None:
            return None
        spec.loader = importlib.util.LazyLoader(spec.loader)
        return spec


if not any(isinstance(f, _LazyProgressBar) for f in sys.meta_path):
    sys.meta_path.insert(0, _LazyProgressBar())
