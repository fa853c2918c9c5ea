"""The Optuna internals the adapter uses, named here and nowhere else.

Optuna promises none of them across releases: its private modules (:data:`PRIVATE_IMPORTS`, each imported on
first use, where its caller imports it: importing this module imports no Optuna), private attributes of its
objects (:data:`PRIVATE_ATTRIBUTES`, reached through the accessors below), its tables :mod:`trials.study.database`
reads and writes with SQL (:data:`TABLES`), its journal records :mod:`trials.study.replay` reads without it
(:class:`JournalOp`, :data:`JOURNAL_FIELDS`), and a few conventions. ``tests/study/test_optuna_internals.py``
touches each against the installed Optuna and names the one that moved or changed shape.
"""

from __future__ import annotations

import copy
import sys
from typing import TYPE_CHECKING, Any

from trials.errors import TrialsError

if TYPE_CHECKING:
    import threading
    from collections.abc import Container

    import numpy as np
    from optuna import Study, Trial
    from optuna._gp.batched_lbfgsb import batched_lbfgsb as batched_lbfgsb
    from optuna._gp.prior import DEFAULT_MINIMUM_NOISE_VAR as DEFAULT_MINIMUM_NOISE_VAR
    from optuna._gp.search_space import SearchSpace as GPSearchSpace
    from optuna._gp.search_space import _round_one_normalized_param as round_one_normalized_param
    from optuna.distributions import BaseDistribution
    from optuna.samplers import BaseSampler, GPSampler
    from optuna.samplers._gp.sampler import _get_params as gp_params
    from optuna.storages import BaseStorage, InMemoryStorage, JournalStorage
    from optuna.storages._rdb import models as rdb_models
    from optuna.storages._rdb.storage import _create_scoped_session as create_scoped_session
    from optuna.storages.journal import BaseJournalBackend, JournalFileBackend
    from optuna.storages.journal._file import get_lock_file as get_lock_file
    from optuna.storages.journal._storage import JournalOperation as JournalOperation
    from optuna.storages.journal._storage import JournalStorageReplayResult as JournalStorageReplayResult
    from optuna.study._constrained_optimization import _is_constrained_optimization as is_constrained_optimization
    from optuna.study._tell import _tell_with_warning as tell_with_warning
    from optuna.trial import FrozenTrial, TrialState


class OptunaInternalError(TrialsError, ImportError):
    """The installed Optuna lacks an internal the adapter uses (moved, renamed or removed)."""


# --- private modules: name here -> (Optuna's module, its attribute or "" for the module, the extra its user needs) ---
PRIVATE_IMPORTS: dict[str, tuple[str, str, str]] = {
    "rdb_models": ("optuna.storages._rdb.models", "", ""),  # database.rdb: the ORM models of Optuna's tables
    "create_scoped_session": ("optuna.storages._rdb.storage", "_create_scoped_session", ""),  # storage: a transaction
    "JournalStorageReplayResult": ("optuna.storages.journal._storage", "JournalStorageReplayResult", ""),
    "JournalOperation": ("optuna.storages.journal._storage", "JournalOperation", ""),  # journal: batched records
    "get_lock_file": ("optuna.storages.journal._file", "get_lock_file", ""),  # journal: one locked write
    "tell_with_warning": ("optuna.study._tell", "_tell_with_warning", ""),  # store: tell without a deep copy
    "GPSearchSpace": ("optuna._gp.search_space", "SearchSpace", "gp"),  # npgp: Optuna's GP, without torch
    "round_one_normalized_param": ("optuna._gp.search_space", "_round_one_normalized_param", "gp"),
    "DEFAULT_MINIMUM_NOISE_VAR": ("optuna._gp.prior", "DEFAULT_MINIMUM_NOISE_VAR", "gp"),
    "batched_lbfgsb": ("optuna._gp.batched_lbfgsb", "batched_lbfgsb", "gp"),
    "gp_params": ("optuna.samplers._gp.sampler", "_get_params", "gp"),
    "is_constrained_optimization": ("optuna.study._constrained_optimization", "_is_constrained_optimization", "gp"),
}


def __getattr__(name: str) -> Any:
    """A private import of :data:`PRIVATE_IMPORTS`, imported on first use (then kept as a global)."""
    try:
        module_name, attribute, _ = PRIVATE_IMPORTS[name]
    except KeyError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
    try:
        __import__(module_name)  # (not importlib's: -X importtime sees only the import statement's path)
        module = sys.modules[module_name]
        value = getattr(module, attribute) if attribute else module
    except (ImportError, AttributeError) as err:
        version = getattr(sys.modules.get("optuna"), "__version__", "?")
        where = f"{module_name}.{attribute}" if attribute else module_name
        raise OptunaInternalError(f"optuna {version} has no {where} (an internal trials uses, as {name}: "
                                  f"see trials/study/optuna_internals.py): {err}") from err
    globals()[name] = value
    return value


# --- private attributes: owner -> {attribute: what it is}, each read or written only by the accessors below -----
PRIVATE_ATTRIBUTES: dict[str, dict[str, str]] = {
    "FrozenTrial": {"_trial_id": "int"},
    "Study": {"_study_id": "int", "_storage": "storage", "_get_trials": "method"},
    "Trial": {"_suggest": "method"},
    "CachedStorage": {"_trial_id_to_study_id_and_number": "dict"},  # a Study's storage over a database
    "InMemoryStorage": {"_lock": "lock", "_check_study_id": "method", "_max_trial_id": "int", "_studies": "dict",
                        "_trial_id_to_study_id_and_number": "dict", "_update_cache": "method"},
    "InMemoryStudyInfo": {"trials": "list"},  # InMemoryStorage._studies' values
    "RDBStorage": {"_create_new_trial": "method", "_set_trial_param": "method", "_get_trials": "method",
                   "_get_best_trial_id": "method"},  # retried through outages (storage.RetryingRDBStorage)
    "JournalStorage": {"_thread_lock": "lock", "_replay_result": "replay result", "_backend": "journal backend",
                       "_worker_id_prefix": "str", "_sync_with_backend": "method", "_write_log": "method",
                       "restore_replay_result": "method"},  # (which its constructor calls with a snapshot)
    "JournalFileBackend": {"_lock": "file lock", "_file_path": "str", "_log_number_offset": "dict"},
    "JournalStorageReplayResult": {"log_number_read": "int", "worker_id": "str", "apply_logs": "method",
                                   "_worker_id_prefix": "str", "_worker_id_to_owned_trial_id": "dict",
                                   "_last_created_trial_id_by_this_process": "int"},
    "GPSampler": {"_intersection_search_space": "search space cache", "_n_startup_trials": "int",
                  "_minimum_noise": "float", "_deterministic": "bool", "_n_qmc_samples_qei": "int",
                  "_n_preliminary_samples": "int", "_n_local_search": "int", "_tol": "float",
                  "_rng": "random state", "_sample_relative_impl": "method"},  # (npgp overrides the last)
    "TPESampler": {"_constraints_func": "callable"},  # any sampler's, None when it has none
    "GPSearchSpace": {"_bounds": "array", "_steps": "array", "_scale_types": "array", "dim": "int",
                      "is_categorical": "array", "continuous_indices": "array", "discrete_indices": "array",
                      "get_choices_of_discrete_params": "method", "get_normalized_params": "method",
                      "get_unnormalized_param": "method"},  # (a private class: its public names too)
    "TrialValueModel": {"value_to_stored_repr": "method", "stored_repr_to_value": "method", "TrialValueType": "class"},
    "TrialIntermediateValueModel": {"TrialIntermediateValueType": "class",
                                    "intermediate_value_to_stored_repr": "method",
                                    "stored_repr_to_intermediate_value": "method"},
    "StudyModel": {"find_or_raise_by_id": "method"},
}
GP_OWNERS = frozenset({"GPSampler", "GPSearchSpace"})  # (used where the gp extra is: their test skips without it)
# JournalStorage's methods a batched journal write stands in for: a subclass that overrides one writes otherwise
JOURNAL_WRITE_PATH = ("_write_log", "_sync_with_backend", "set_trial_intermediate_value", "set_trial_user_attr")
RDB_STORAGE_PRIVATE_METHODS = tuple(PRIVATE_ATTRIBUTES["RDBStorage"])


def has_internals(obj: object, owner: str) -> bool:
    """Whether ``obj`` has every private attribute listed for ``owner`` (else: another Optuna's; its way)."""
    return all(hasattr(obj, name) for name in PRIVATE_ATTRIBUTES[owner])


def storage_id(trial: FrozenTrial) -> int:
    return trial._trial_id


def study_id(study: Study) -> int:
    return study._study_id


def study_storage(study: Study) -> BaseStorage:  # (over a database: Optuna's cache in front of it)
    return study._storage


def with_storage(study: Study, storage: Any) -> Study:
    """A shallow copy of ``study`` that reads and writes through ``storage``."""
    view = copy.copy(study)
    view._storage = storage
    return view


def study_trials(study: Study, states: tuple[TrialState, ...]) -> list[FrozenTrial]:
    """The study's trials in ``states``, read now (not from the study's per-trial cache), not copied."""
    return study._get_trials(deepcopy=False, states=states, use_cache=False)


def suggest_value(trial: Trial, name: str, distribution: BaseDistribution) -> Any:
    """What ``trial.suggest_*`` would return for ``distribution`` (a fixed parameter's value, if fixed)."""
    return trial._suggest(name, distribution)


def cached_trial_ids(storage: BaseStorage) -> Container[int] | None:
    """The trials Optuna's cache in front of a database has read (None: no such cache)."""
    known: Container[int] | None = getattr(storage, "_trial_id_to_study_id_and_number", None)
    return known


def constraints_func(sampler: BaseSampler) -> Any:  # (None: it has none)
    return getattr(sampler, "_constraints_func", None)


def add_trial_copy(storage: InMemoryStorage, study_id: int, template: FrozenTrial) -> None:
    """``storage.create_new_trial(study_id, template_trial=template)`` without its deep copy: a shallow
    copy of ``template`` takes the new number and id (only where :func:`has_internals`)."""
    with storage._lock:
        storage._check_study_id(study_id)
        trial = copy.copy(template)
        trial._trial_id = storage._max_trial_id = storage._max_trial_id + 1
        trial.number = len(storage._studies[study_id].trials)
        storage._trial_id_to_study_id_and_number[trial._trial_id] = (study_id, trial.number)
        storage._studies[study_id].trials.append(trial)
        storage._update_cache(trial._trial_id, study_id)


def forget_search_space(sampler: BaseSampler) -> None:
    """Drop a GPSampler's cached intersection search space (a cursor over trial numbers)."""
    if hasattr(sampler, "_intersection_search_space"):
        from optuna.search_space import IntersectionSearchSpace

        sampler._intersection_search_space = IntersectionSearchSpace()


class GPSettings:
    """What :class:`trials.study.npgp.NumpyGPSampler` reads of GPSampler's settings."""

    def __init__(self, sampler: GPSampler) -> None:
        self.n_startup_trials: int = sampler._n_startup_trials
        self.minimum_noise: float = sampler._minimum_noise
        self.deterministic: bool = sampler._deterministic
        self.n_qmc_samples_qei: int = sampler._n_qmc_samples_qei
        self.n_preliminary_samples: int = sampler._n_preliminary_samples
        self.n_local_search: int = sampler._n_local_search
        self.tol: float = sampler._tol


def gp_rng(sampler: GPSampler) -> np.random.RandomState:
    return sampler._rng.rng


def gp_space_arrays(space: GPSearchSpace) -> tuple[np.ndarray, np.ndarray, np.ndarray]:  # bounds, steps, scales
    return space._bounds, space._steps, space._scale_types


# JournalStorage and its file backend
def thread_lock(storage: JournalStorage) -> threading.Lock:
    return storage._thread_lock


def replay_result(storage: JournalStorage) -> JournalStorageReplayResult:  # (its log_number_read: records applied)
    return storage._replay_result


def replay_from_start(storage: JournalStorage) -> None:
    """Replay the whole file again (the caller holds :func:`thread_lock`)."""
    forget_offsets(storage._backend)
    storage._replay_result = type(storage._replay_result)(storage._worker_id_prefix)
    storage._sync_with_backend()


def journal_backend(storage: JournalStorage) -> BaseJournalBackend:
    return storage._backend


def set_journal_backend(storage: JournalStorage, backend: Any) -> None:
    storage._backend = backend


def sync_with_backend(storage: JournalStorage) -> None:  # (the caller holds its thread_lock)
    storage._sync_with_backend()


def file_lock(backend: JournalFileBackend) -> Any:  # (the inter-process lock, for get_lock_file)
    return backend._lock


def file_path(backend: JournalFileBackend) -> str:
    return backend._file_path


def log_offsets(backend: JournalFileBackend) -> dict[int, int]:
    """Where each record read so far starts (number -> byte; the next read seeks there): the dict itself."""
    return backend._log_number_offset


def forget_offsets(backend: Any) -> None:  # (its next read starts from the file's start)
    backend._log_number_offset = {0: 0}


# --- the database: Optuna's tables read and written with SQL (rdb.py's statements, leases.py's raw SQL): table ->
# (its model in rdb_models, the columns used, the unique key an upsert's ON CONFLICT names) -----------------------
TABLES: dict[str, tuple[str, tuple[str, ...], tuple[str, ...]]] = {
    "studies": ("StudyModel", ("study_id", "study_name"), ()),
    "study_user_attributes": ("StudyUserAttributeModel", ("study_id", "key", "value_json"), ()),
    "trials": ("TrialModel", ("trial_id", "number", "study_id", "state", "datetime_start", "datetime_complete"), ()),
    "trial_params": ("TrialParamModel", ("param_id", "trial_id", "param_name", "param_value", "distribution_json"),
                     ()),
    "trial_values": ("TrialValueModel", ("trial_id", "objective", "value", "value_type"), ("trial_id", "objective")),
    "trial_user_attributes": ("TrialUserAttributeModel", ("trial_id", "key", "value_json"), ("trial_id", "key")),
    "trial_system_attributes": ("TrialSystemAttributeModel", ("trial_id", "key", "value_json"), ("trial_id", "key")),
    "trial_intermediate_values": ("TrialIntermediateValueModel",
                                  ("trial_id", "step", "intermediate_value", "intermediate_value_type"),
                                  ("trial_id", "step")),
}
# trials.state holds the TrialState's name, not its number: these states as SQL literals
STORED_STATES = {"RUNNING": "'RUNNING'", "WAITING": "'WAITING'"}


# --- the journal: each line a JSON record {"op_code": ..., "worker_id": ..., fields} ------------------------------
class JournalOp:
    """Optuna's ``JournalOperation`` codes (plain ints: the journal reader imports no Optuna)."""

    CREATE_STUDY = 0
    DELETE_STUDY = 1
    SET_STUDY_USER_ATTR = 2
    SET_STUDY_SYSTEM_ATTR = 3
    CREATE_TRIAL = 4
    SET_TRIAL_PARAM = 5
    SET_TRIAL_STATE_VALUES = 6
    SET_TRIAL_INTERMEDIATE_VALUE = 7
    SET_TRIAL_USER_ATTR = 8
    SET_TRIAL_SYSTEM_ATTR = 9
    DISCARD_TRIALS = 10  # written by Rustuna only; Optuna's replay skips it


RECORD_FIELDS = ("op_code", "worker_id")  # every record's
# each operation's fields that replay reads or store writes (CREATE_TRIAL's past datetime_start: from a template)
JOURNAL_FIELDS: dict[int, tuple[str, ...]] = {
    JournalOp.CREATE_STUDY: ("study_name", "directions"),
    JournalOp.DELETE_STUDY: ("study_id",),
    JournalOp.SET_STUDY_USER_ATTR: ("study_id", "user_attr"),
    JournalOp.SET_STUDY_SYSTEM_ATTR: ("study_id", "system_attr"),
    JournalOp.CREATE_TRIAL: ("study_id", "datetime_start", "state", "value", "values", "datetime_complete",
                             "params", "distributions", "user_attrs", "system_attrs", "intermediate_values"),
    JournalOp.SET_TRIAL_PARAM: ("trial_id", "param_name", "param_value_internal", "distribution"),
    JournalOp.SET_TRIAL_STATE_VALUES: ("trial_id", "state", "values", "datetime_start", "datetime_complete"),
    JournalOp.SET_TRIAL_INTERMEDIATE_VALUE: ("trial_id", "step", "intermediate_value"),
    JournalOp.SET_TRIAL_USER_ATTR: ("trial_id", "user_attr"),
    JournalOp.SET_TRIAL_SYSTEM_ATTR: ("trial_id", "system_attr"),
}

# --- conventions ---------------------------------------------------------------------------------------------
FIXED_PARAMS_ATTR = "fixed_params"  # a trial's system attribute its Trial suggests from (enqueue_trial's)
# GPSampler notes a running trial's suggested parameters in system attributes "<key>:<i>" of this length
GP_RELATIVE_PARAMS_KEY = "gp:relative_params"
GP_SYSTEM_ATTR_MAX_LENGTH = 2045

__all__ = [
    "DEFAULT_MINIMUM_NOISE_VAR", "FIXED_PARAMS_ATTR", "GP_OWNERS", "GP_RELATIVE_PARAMS_KEY",
    "GP_SYSTEM_ATTR_MAX_LENGTH", "JOURNAL_FIELDS", "JOURNAL_WRITE_PATH", "PRIVATE_ATTRIBUTES", "PRIVATE_IMPORTS",
    "RDB_STORAGE_PRIVATE_METHODS", "RECORD_FIELDS", "STORED_STATES", "TABLES",
    "GPSearchSpace", "GPSettings", "JournalOp", "JournalOperation", "JournalStorageReplayResult",
    "OptunaInternalError", "add_trial_copy", "batched_lbfgsb", "cached_trial_ids",
    "constraints_func", "create_scoped_session", "file_lock", "file_path", "forget_offsets", "forget_search_space",
    "get_lock_file", "gp_params", "gp_rng", "gp_space_arrays", "has_internals", "is_constrained_optimization",
    "journal_backend", "log_offsets", "rdb_models", "replay_from_start", "replay_result", "round_one_normalized_param",
    "set_journal_backend", "storage_id", "study_id", "study_storage", "study_trials", "suggest_value",
    "sync_with_backend", "tell_with_warning", "thread_lock", "with_storage",
]
