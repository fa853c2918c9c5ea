"""Opening an Optuna storage from a URL; the database storage that waits out connection outages."""

from __future__ import annotations

import functools
import importlib.util
import os
import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import optuna
from optuna.storages import BaseStorage as BaseStorage  # re-exported: the type callers hold
from optuna.study import StudySummary
from optuna.trial import FrozenTrial, TrialState

from trials.errors import ConfigError, StorageError
from trials.storage_url import first_line, is_journal_url, journal_path, redact, scrub
from trials.study.database import writes
from trials.study.optuna_internals import RDB_STORAGE_PRIVATE_METHODS

if TYPE_CHECKING:  # a database's SQL and outages (sqlalchemy): a journal job never loads them
    from trials.study.database import rdb
    from trials.study.database.outages import Outages
else:
    class _LazyRdb:
        """:mod:`trials.study.database.rdb`, imported when a database storage first uses it (it loads sqlalchemy)."""

        def __getattr__(self, name: str) -> Any:
            import importlib

            return getattr(importlib.import_module("trials.study.database.rdb"), name)

    rdb = _LazyRdb()

T = TypeVar("T")


@functools.cache
def quiet_optuna() -> None:
    """Optuna logs each trial at INFO and flags arguments we choose on purpose as experimental:
    keep its log to warnings and drop those notes. Called when a storage is opened, not at import."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)


def open_storage(url: str, *, heartbeat_interval_s: int | None = None,
                 grace_period_s: int | None = None) -> BaseStorage:
    """An Optuna storage from a URL: ``journal:PATH`` / a ``.log`` path, or any SQLAlchemy URL.

    A database storage retries through connection outages once its ``outages`` is set (workers do;
    one-shot commands such as ``describe`` fail fast instead).
    """
    quiet_optuna()
    if is_journal_url(url):
        from optuna.storages.journal import JournalFileOpenLock

        from trials.study.journal.log import open_journal

        path = journal_path(url)
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        try:
            return open_journal(path, lock_obj=JournalFileOpenLock(path))
        except OSError as err:
            if not isinstance(err, IsADirectoryError):
                raise
            from trials.study.journal.check import corrupt_error

            raise corrupt_error(path, err) from None
        except Exception as err:  # noqa: BLE001 - a bad line: JSONDecodeError, UnicodeDecodeError, ...
            from trials.study.journal.check import corrupt_error

            raise corrupt_error(path, err) from None
    if "://" not in url:
        raise ConfigError(
            f"--storage: expected journal:PATH, a .log file or a database URL such as "
            f"sqlite:///jobs.db or postgresql://host/db, got {redact(url)!r}"
        )
    kwargs: dict[str, Any] = {}
    if heartbeat_interval_s:
        kwargs["heartbeat_interval"] = heartbeat_interval_s
        kwargs["grace_period"] = grace_period_s or heartbeat_interval_s * 4
    url = _postgres_driver(url)
    engine: dict[str, Any] = {"connect_args": {"timeout": 60}} if url.startswith("sqlite") else {"pool_pre_ping": True}
    if url.startswith(("postgresql", "postgres")):
        from trials.study.database import pg_session

        engine["connect_args"] = pg_session.connect_args()
        if "psycopg2" in url:
            pg_session.install_answer_deadline()
    try:
        return RetryingRDBStorage(url, engine_kwargs=engine, **kwargs)
    except Exception as err:  # noqa: BLE001 - driver errors vary; name the URL without secrets
        raise StorageError(f"cannot open storage {redact(url)}: {type(err).__name__}: "
                           f"{scrub(first_line(err), url)}") from None


def _postgres_driver(url: str) -> str:
    """``postgresql://`` means psycopg 3 to SQLAlchemy 2.1; use psycopg2 when only it is installed."""
    scheme, sep, rest = url.partition("://")
    if scheme not in ("postgresql", "postgres"):
        return url
    if importlib.util.find_spec("psycopg") is None and importlib.util.find_spec("psycopg2") is not None:
        return "postgresql+psycopg2" + sep + rest
    if importlib.util.find_spec("psycopg") is None:
        raise ConfigError(f"--storage {redact(url)} needs a PostgreSQL driver: "
                          f"pip install psycopg2-binary (or trials[postgres])")
    return url


def study_summaries(storage: BaseStorage) -> list[StudySummary]:
    """Every study in a storage (``trials list --storage``)."""
    return optuna.get_all_study_summaries(storage, include_best_trial=False)


def in_memory_storage() -> BaseStorage:
    """Optuna's in-memory storage (``trials.tune``'s default)."""
    quiet_optuna()
    return optuna.storages.InMemoryStorage()


_RETRIED = (
    "create_new_study", "delete_study", "set_study_user_attr", "set_study_system_attr",
    "get_study_id_from_name", "get_study_name_from_id", "get_study_directions",
    "get_study_system_attrs", "get_trial_user_attrs",
    "get_trial_system_attrs", "get_all_studies", "create_new_trial",
    "set_trial_param", "get_trial_param", "set_trial_state_values",
    "set_trial_intermediate_value", "set_trial_user_attr", "set_trial_system_attr",
    "get_trial_id_from_study_id_trial_number", "get_all_trials",
    "get_best_trial", *RDB_STORAGE_PRIVATE_METHODS,  # (the public methods' private halves)
)


class RetryingRDBStorage(optuna.storages.RDBStorage):
    """Optuna's RDBStorage whose calls wait out connection outages when ``outages`` is set, with the
    targeted reads and one-transaction writes of :mod:`trials.study.database.rdb` the job loop uses."""

    outages: Outages | None = None

    def _call(self, fn: Callable[[], T]) -> T:
        if self.outages is None:
            return fn()
        result: T = self.outages.call(fn)
        return result

    def _read(self, fn: Callable[[Any], T]) -> T:
        """``fn(session)`` in a read-only transaction, retried through outages."""
        from trials.study.optuna_internals import create_scoped_session

        def run() -> T:
            with create_scoped_session(self.scoped_session) as session:
                return fn(session)
        return self._call(run)

    def job_summaries(self, study_keys: Sequence[str], trial_keys: Sequence[str]) -> list[rdb.Summary]:
        """Every study with the attributes named (see :func:`rdb.job_summaries`)."""
        return self._read(lambda s: rdb.job_summaries(s, study_keys, trial_keys))

    def count_states(self, study_id: int) -> dict[TrialState, int]:
        """How many trials of the study are in each state (one statement)."""
        return self._read(lambda s: rdb.count_states(s, study_id))

    def user_attrs_of(self, study_id: int, keys: Sequence[str]) -> dict[int, dict[str, Any]]:
        """{trial number: {key: value}}: a few user attributes of every trial (one statement)."""
        return self._read(lambda s: rdb.user_attrs_of(s, study_id, keys))

    def n_sampled(self, study_id: int) -> int:
        """How many trials of the study have parameters (one statement)."""
        return self._read(lambda s: rdb.n_sampled(s, study_id))

    def claim_trial(self, trial_id: int) -> bool:
        """WAITING -> RUNNING as a compare-and-set (one statement); False if it was not WAITING."""
        from trials.study.optuna_internals import create_scoped_session

        def run() -> bool:
            with create_scoped_session(self.scoped_session) as session:
                return rdb.claim(session, trial_id)
        return self._call(run)

    def waiting_trials(self, study_id: int, *, limit: int) -> list[tuple[int, int, FrozenTrial]]:
        """(number, trial id, the trial as it will be once claimed: RUNNING, started now) of the first
        ``limit`` WAITING trials, in one statement."""
        import datetime

        now = datetime.datetime.now()
        return [(n, tid, rdb.frozen_trial(tid, number=n, state=TrialState.RUNNING, start=now, complete=None,
                                          rows=rows))
                for n, tid, rows in self._read(lambda s: rdb.waiting_with_children(s, study_id, limit=limit))]

    def get_trial(self, trial_id: int) -> FrozenTrial:
        """Optuna's ``get_trial`` in 2 statements instead of 6."""
        return self._read(lambda s: rdb.load_trial(s, trial_id))

    def get_study_user_attrs(self, study_id: int) -> dict[str, Any]:
        """Optuna's ``get_study_user_attrs`` in 1 statement instead of 2."""
        return self._read(lambda s: rdb.study_user_attrs(s, study_id))

    def write_trials(self, writes: Mapping[int, writes.TrialWrite]) -> None:
        """Every write of a batch, to one or more trials, in one transaction (see :func:`rdb.apply`).

        Retried through outages; a retry after a lost answer is idempotent (upserts, and a state
        change that finds its own commit skips the rest).
        """
        from trials.study.optuna_internals import create_scoped_session

        attempts = 0

        def run() -> None:
            nonlocal attempts
            attempts += 1
            with create_scoped_session(self.scoped_session) as session:
                for trial_id, w in writes.items():
                    rdb.apply(session, trial_id, w, retried=attempts > 1)
        if writes:
            self._call(run)


def _retrying(name: str) -> Callable[..., Any]:
    base = getattr(optuna.storages.RDBStorage, name)

    def method(self: RetryingRDBStorage, *args: Any, **kwargs: Any) -> Any:
        if self.outages is None:
            return base(self, *args, **kwargs)
        return self.outages.call(base, self, *args, **kwargs)

    method.__name__ = name
    method.__doc__ = base.__doc__
    return method


for _name in _RETRIED:
    if hasattr(optuna.storages.RDBStorage, _name):
        setattr(RetryingRDBStorage, _name, _retrying(_name))
