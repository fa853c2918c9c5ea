"""The Optuna adapter: the only module that imports optuna.

The Optuna storage is the job's single source of truth. A job is one study named after the job id:
study user attributes hold the spec and the job's state; each Optuna trial is one Vertex trial
(``id = number + 1``) whose user attributes hold its Vertex state, attempts, measurements and reasons.
Trials are created up front as WAITING (``maxTrialCount`` of them, or the grid size), so any number
of controllers or workers claim them atomically and can never exceed the count.
"""

from __future__ import annotations

import functools
import itertools
import math
import os
import time
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import optuna
from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution
from optuna.trial import FrozenTrial, TrialState

from trials.errors import ConfigError, JobNotFoundError, StorageError
from trials.spec import (
    Algorithm,
    JobSpec,
    ParameterSpec,
    ParameterType,
    ScaleType,
    StudySpec,
    Value,
)

optuna.logging.set_verbosity(optuna.logging.WARNING)
warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)

JOURNAL_FILE = "journal.log"
REVERSE_LOG_SUFFIX = ":reverse_log"
ATTR_PREFIX = "trials:"


# --- Storage URLs ---------------------------------------------------------------------------------
def open_storage(url: str, *, heartbeat_interval_s: int | None = None, grace_period_s: int | None = None):
    """An Optuna storage from a URL: ``journal:PATH`` / a ``.log`` path, or any SQLAlchemy URL.

    A database storage retries through connection outages once its ``outages`` is set (workers do;
    one-shot commands such as ``describe`` fail fast instead).
    """
    if is_journal_url(url):
        path = url[len("journal:"):] if url.startswith("journal:") else url
        from optuna.storages.journal import JournalFileBackend, JournalFileOpenLock

        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        backend = JournalFileBackend(path, lock_obj=JournalFileOpenLock(path))
        return optuna.storages.JournalStorage(backend)
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
    engine: dict[str, Any] = {}
    engine = {"connect_args": {"timeout": 60}} if url.startswith("sqlite") else {"pool_pre_ping": True}
    try:
        return RetryingRDBStorage(url, engine_kwargs=engine, **kwargs)
    except Exception as err:  # noqa: BLE001 - driver errors vary; name the URL without secrets
        raise StorageError(f"cannot open storage {redact(url)}: {type(err).__name__}: "
                           f"{scrub(_first_line(err), url)}") from None


def _postgres_driver(url: str) -> str:
    """``postgresql://`` means psycopg 3 to SQLAlchemy 2.1; use psycopg2 when only it is installed."""
    import importlib.util

    scheme, sep, rest = url.partition("://")
    if scheme not in ("postgresql", "postgres"):
        return url
    if importlib.util.find_spec("psycopg") is None and importlib.util.find_spec("psycopg2") is not None:
        return "postgresql+psycopg2" + sep + rest
    if importlib.util.find_spec("psycopg") is None:
        raise ConfigError(f"--storage {redact(url)} needs a PostgreSQL driver: "
                          f"pip install psycopg2-binary (or trials[postgres])")
    return url


def is_journal_url(url: str) -> bool:
    return url.startswith("journal:") or url.endswith((".log", ".journal"))


def _first_line(err: BaseException) -> str:
    cause = err
    while cause.__cause__ is not None and not str(cause).strip():
        cause = cause.__cause__
    text = str(cause).strip() or str(err.__cause__ or "").strip()
    return text.splitlines()[0] if text else ""


def _root_line(err: BaseException) -> str:
    """The driver's own words (``DBAPIError.orig``), not the wrappers' (Optuna's, SQLAlchemy's)."""
    chain, cur = [], err
    while cur is not None and len(chain) < 10:
        chain.append(cur)
        cur = cur.__cause__ or cur.__context__
    for e in chain:
        orig = getattr(e, "orig", None)
        if orig is not None and str(orig).strip():
            return str(orig).strip().splitlines()[0].strip()
    for e in reversed(chain):
        text = str(e).strip()
        if len(text) > 3:
            return text.splitlines()[0].strip()
    return type(chain[-1]).__name__


def scrub(text: str, url: str | None) -> str:
    """``text`` with the password of ``url`` (and the whole URL) replaced by its redacted form."""
    if not url:
        return text
    text = text.replace(url, redact(url))
    if "://" in url and "@" in url.split("://", 1)[1]:
        creds = url.split("://", 1)[1].rsplit("@", 1)[0]
        if ":" in creds:
            password = creds.split(":", 1)[1]
            if password:
                text = text.replace(password, "***")
    return text


# --- Connection outages ---------------------------------------------------------------------------
def is_connection_error(err: BaseException) -> bool:
    """Whether ``err`` (or what caused it) says the database connection failed, not the query."""
    from sqlalchemy import exc as sa_exc

    seen = 0
    cur: BaseException | None = err
    while cur is not None and seen < 10:
        if isinstance(cur, (sa_exc.OperationalError, sa_exc.InterfaceError, sa_exc.DisconnectionError)):
            return True
        if isinstance(cur, sa_exc.DBAPIError) and cur.connection_invalidated:
            return True
        if type(cur).__name__ in ("OperationalError", "InterfaceError") and \
                type(cur).__module__.startswith(("psycopg", "sqlite3", "pymysql", "MySQLdb")):
            return True
        cur = cur.__cause__ or cur.__context__
        seen += 1
    return False


class Outages:
    """Retries a database call through connection outages, with backoff, saying so once per outage.

    Args:
        notify: receives one line when an outage starts and one when it ends.
        url: the storage URL, only to scrub its password from what ``notify`` gets.
        first_delay_s, max_delay_s: the backoff (doubling from the first to the max).
    """

    def __init__(self, notify: Callable[[str], None], *, url: str | None = None,
                 first_delay_s: float = 0.2, max_delay_s: float = 10.0,
                 sleep: Callable[[float], None] = time.sleep, clock: Callable[[], float] = time.monotonic):
        self.notify = notify
        self.url = url
        self.first_delay_s = first_delay_s
        self.max_delay_s = max_delay_s
        self.sleep = sleep
        self.clock = clock
        self.down_since: float | None = None
        self.n_outages = 0
        self._depth = 0

    def call(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        if self._depth:  # a retried call made from inside another: the outer one retries
            return fn(*args, **kwargs)
        delay = self.first_delay_s
        while True:
            self._depth += 1
            try:
                result = fn(*args, **kwargs)
            except Exception as err:  # noqa: BLE001 - re-raised unless it is a connection error
                if not is_connection_error(err):
                    raise
                if self.down_since is None:
                    self.down_since = self.clock()
                    self.n_outages += 1
                    self.notify(f"database unreachable ({scrub(_root_line(err), self.url)}); "
                                f"retrying with backoff up to {self.max_delay_s:g}s")
                self.sleep(delay)
                delay = min(delay * 2, self.max_delay_s)
                continue
            finally:
                self._depth -= 1
            if self.down_since is not None:
                self.notify(f"database reachable again after {self.clock() - self.down_since:.1f}s")
                self.down_since = None
            return result


_RETRIED = (
    "create_new_study", "delete_study", "set_study_user_attr", "set_study_system_attr",
    "get_study_id_from_name", "get_study_name_from_id", "get_study_directions",
    "get_study_user_attrs", "get_study_system_attrs", "get_trial_user_attrs",
    "get_trial_system_attrs", "get_all_studies", "create_new_trial", "_create_new_trial",
    "set_trial_param", "_set_trial_param", "get_trial_param", "set_trial_state_values",
    "set_trial_intermediate_value", "set_trial_user_attr", "set_trial_system_attr",
    "get_trial_id_from_study_id_trial_number", "get_trial", "get_all_trials", "_get_trials",
    "get_best_trial", "_get_best_trial_id",
)


class RetryingRDBStorage(optuna.storages.RDBStorage):
    """Optuna's RDBStorage whose calls wait out connection outages when ``outages`` is set."""

    outages: Outages | None = None

    def waiting_trial_ids(self, study_id: int, *, limit: int) -> list[tuple[int, int]]:
        """(number, trial id) of the first ``limit`` WAITING trials: one light query."""
        from optuna.storages._rdb import models
        from optuna.storages._rdb.storage import _create_scoped_session

        def run() -> list[tuple[int, int]]:
            with _create_scoped_session(self.scoped_session) as session:
                rows = (session.query(models.TrialModel.number, models.TrialModel.trial_id)
                        .filter(models.TrialModel.study_id == study_id,
                                models.TrialModel.state == TrialState.WAITING)
                        .order_by(models.TrialModel.number).limit(limit).all())
                return [(int(n), int(i)) for n, i in rows]

        return run() if self.outages is None else self.outages.call(run)

    def set_trial_user_attrs(self, trial_id: int, attrs: Mapping[str, Any]) -> None:
        """Several user attributes of one trial in one transaction: one commit, not one per key."""
        from optuna.storages._rdb import models
        from optuna.storages._rdb.storage import _create_scoped_session

        def run() -> None:
            with _create_scoped_session(self.scoped_session, True) as session:
                for key, value in attrs.items():
                    self._set_trial_attr_without_commit(
                        session, models.TrialUserAttributeModel, trial_id, key, value)

        if self.outages is None:
            run()
        else:
            self.outages.call(run)


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


try:  # the journal's operation codes, to batch several operations in one write
    from optuna.storages.journal._storage import JournalOperation as _JournalOperation

    _JOURNAL_INTERMEDIATE = int(_JournalOperation.SET_TRIAL_INTERMEDIATE_VALUE)
    _JOURNAL_USER_ATTR = int(_JournalOperation.SET_TRIAL_USER_ATTR)
except (ImportError, AttributeError):  # another Optuna layout: use the public setters
    _JOURNAL_INTERMEDIATE = _JOURNAL_USER_ATTR = -1


def _journal_append(storage, records: Sequence[tuple[int, dict[str, Any]]]) -> bool:
    """Write several journal operations with one lock, one write and one fsync.

    Optuna's JournalStorage writes (and fsyncs) each operation alone; its backend takes a list.
    This reaches into the storage's internals (the same two steps each public setter takes), so it
    is used only when they are exactly there; otherwise the caller falls back to the public API.
    Measured on the controller benchmark: ~27 journal writes per trial, each 0.5-1 ms.
    """
    if not records:
        return True
    if type(storage) is not optuna.storages.JournalStorage or _JOURNAL_USER_ATTR < 0:
        return False
    lock = getattr(storage, "_thread_lock", None)
    replay = getattr(storage, "_replay_result", None)
    backend = getattr(storage, "_backend", None)
    if lock is None or replay is None or backend is None:
        return False
    with lock:
        worker_id = replay.worker_id
        backend.append_logs([{"op_code": op, "worker_id": worker_id, **fields} for op, fields in records])
        storage._sync_with_backend()
    return True


def study_summaries(storage) -> list:
    """Every study in a storage (``trials list --storage``)."""
    return optuna.get_all_study_summaries(storage, include_best_trial=False)


def in_memory_storage():
    """Optuna's in-memory storage (``trials.tune``'s default)."""
    return optuna.storages.InMemoryStorage()


def redact(url: str) -> str:
    """Hide the password of ``scheme://user:password@host/db``."""
    if "://" in url and "@" in url.split("://", 1)[1]:
        scheme, rest = url.split("://", 1)
        creds, host = rest.rsplit("@", 1)
        user = creds.split(":", 1)[0]
        return f"{scheme}://{user}:***@{host}" if ":" in creds else f"{scheme}://{user}@{host}"
    return url


# --- Search space mapping -------------------------------------------------------------------------
def distribution(p: ParameterSpec):
    """The Optuna distribution of a parameter (reverse log: the mirrored variable, log-scaled)."""
    log = p.scale_type in (ScaleType.UNIT_LOG_SCALE, ScaleType.UNIT_REVERSE_LOG_SCALE)
    if p.type is ParameterType.DOUBLE:
        return FloatDistribution(float(p.min_value), float(p.max_value), log=log)
    if p.type is ParameterType.INTEGER:
        return IntDistribution(int(p.min_value), int(p.max_value), log=log)
    if p.type is ParameterType.DISCRETE:
        return CategoricalDistribution([_num(v) for v in p.values])
    return CategoricalDistribution(list(p.values))


def _mirrored(p: ParameterSpec) -> bool:
    return (p.scale_type is ScaleType.UNIT_REVERSE_LOG_SCALE
            and p.type in (ParameterType.DOUBLE, ParameterType.INTEGER))


@functools.lru_cache(maxsize=64)
def optuna_names(study: StudySpec) -> dict[ParameterSpec, str]:
    """The Optuna parameter name of each spec parameter.

    Normally the parameterId; ``<id>:reverse_log`` for a mirrored reverse-log parameter; and
    ``<id>#2``, ``<id>#3`` … for further conditional branches that reuse an id with another range
    (Optuna refuses two value spaces under one name).
    """
    names: dict[ParameterSpec, str] = {}
    seen: dict[str, int] = {}
    for p in study.all_parameters():
        if p in names:
            continue
        k = seen.get(p.parameter_id, 0) + 1
        seen[p.parameter_id] = k
        base = p.parameter_id if k == 1 else f"{p.parameter_id}#{k}"
        names[p] = base + (REVERSE_LOG_SUFFIX if _mirrored(p) else "")
    return names


def optuna_name(p: ParameterSpec, study: StudySpec) -> str:
    return optuna_names(study)[p]


def values_from_optuna(study: StudySpec, params: Mapping[str, Any]) -> dict[str, Value]:
    """A trial's parameter values (by parameterId) from its Optuna params."""
    values: dict[str, Value] = {}
    for p, name in optuna_names(study).items():
        if name in params:
            raw = params[name]
            values[p.parameter_id] = _mirror(p, raw) if _mirrored(p) else raw
    return values


def _num(v: Value) -> Value:
    if isinstance(v, float) and v.is_integer() and abs(v) < 2**53:
        return int(v)
    return v


def _mirror(p: ParameterSpec, raw: Any) -> Value:
    # Reverse log spreads values near the top: x = min + max - y with y log-uniform.
    x = p.min_value + p.max_value - raw
    return int(x) if p.type is ParameterType.INTEGER else float(x)


def suggest(trial: optuna.Trial, study: StudySpec) -> dict[str, Value]:
    """Suggest the active parameters of a trial, parents before their conditional children."""
    values: dict[str, Value] = {}

    def visit(p: ParameterSpec) -> None:
        raw = trial._suggest(optuna_name(p, study), distribution(p))
        value = _mirror(p, raw) if _mirrored(p) else raw
        values[p.parameter_id] = value
        for cond in p.conditionals:
            if _matches(value, cond.parent_values):
                visit(cond.parameter)

    for p in study.parameters:
        visit(p)
    return values


def _matches(value: Value, parents: Sequence[Value]) -> bool:
    if isinstance(value, str):
        return value in parents
    return any(not isinstance(v, str) and abs(float(value) - float(v)) <= 1e-10 for v in parents)


def grid(study: StudySpec) -> list[dict[str, Value]]:
    """Every grid point (conditional children expanded under matching parents), in a fixed order."""

    def expand(p: ParameterSpec) -> list[dict[str, Value]]:
        out = []
        for v in p.grid_points():
            v = _num(v)
            branches = [[{}]]
            for cond in p.conditionals:
                if _matches(v, cond.parent_values):
                    branches.append(expand(cond.parameter))
            for combo in itertools.product(*branches):
                point = {p.parameter_id: v}
                for part in combo:
                    point.update(part)
                out.append(point)
        return out

    points: list[dict[str, Value]] = [{}]
    for p in study.parameters:
        points = [{**a, **b} for a in points for b in expand(p)]
    return points


def fixed_params(study: StudySpec, point: Mapping[str, Value]) -> dict[str, Any]:
    """Grid point -> Optuna fixed params (names and mirrored values as the distributions expect)."""
    out = {}
    for p in study.active_parameters(point):  # the branch each conditional id is under here
        if p.parameter_id in point:
            v = point[p.parameter_id]
            out[optuna_name(p, study)] = _mirror(p, v) if _mirrored(p) else v
    return out


# --- Samplers -------------------------------------------------------------------------------------
def gp_available() -> bool:
    import importlib.util

    return importlib.util.find_spec("torch") is not None


def choose_sampler_name(study: StudySpec, *, n_trials: int) -> str:
    """The documented rule for ALGORITHM_UNSPECIFIED.

    GP (Optuna's GPSampler) when torch is installed, the study has one metric, no conditional
    parameters and at most 300 trials (GP costs ~0.6 s per trial here and grows cubically);
    otherwise multivariate TPE (grouped for conditional spaces, constant liar for parallel trials).
    """
    if study.algorithm is Algorithm.RANDOM_SEARCH:
        return "random"
    if study.algorithm is Algorithm.GRID_SEARCH:
        return "grid"
    conditional = any(p.conditionals for p in study.parameters)
    if gp_available() and len(study.metrics) == 1 and not conditional and n_trials <= 300:
        return "gp"
    return "tpe"


def make_sampler(name: str, *, seed: int | None, n_startup: int = 10):
    if name in ("random", "grid"):
        # Grid points are enqueued as fixed params; the sampler only fills nothing.
        return optuna.samplers.RandomSampler(seed=seed)
    if name == "gp":
        return optuna.samplers.GPSampler(seed=seed, n_startup_trials=n_startup)
    if name == "cmaes":
        return optuna.samplers.CmaEsSampler(seed=seed, n_startup_trials=n_startup)
    with warnings.catch_warnings():  # `group` is marked experimental in Optuna; it is what we want
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        return optuna.samplers.TPESampler(
            seed=seed, multivariate=True, group=True, constant_liar=True,
            n_startup_trials=n_startup,
        )


# --- The job store --------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Claimed:
    number: int
    storage_id: int
    trial_id: str
    params: dict[str, Value]
    resumed: bool  # a RUNNING trial left by a dead controller, run again
    resume_reason: str = ""  # why it runs again (names the dead worker), for the attempts list
    previous_worker: str = ""  # the worker whose attempt ended without it (taken over)


class JobStore:
    """One job in an Optuna storage."""

    def __init__(self, storage, study: optuna.Study, job_id: str):
        self.storage = storage
        self.study = study
        self.job_id = job_id
        self._study_id = study._study_id

    # -- creation and opening
    @classmethod
    def create(cls, storage, job_id: str, job: JobSpec, spec_dict: Mapping[str, Any],
               meta: Mapping[str, Any], *, sampler_name: str, seed: int | None) -> JobStore:
        directions = ["maximize" if m.maximize else "minimize" for m in job.study.metrics]
        try:
            study = optuna.create_study(
                storage=storage, study_name=job_id, directions=directions,
                sampler=make_sampler(sampler_name, seed=seed), load_if_exists=False,
            )
        except optuna.exceptions.DuplicatedStudyError:
            raise ConfigError(f"a job named {job_id!r} already exists in this storage; use "
                              f"`trials resume {job_id}` or choose another --job-id") from None
        store = cls(storage, study, job_id)
        store.set_meta(spec=dict(spec_dict), sampler=sampler_name, seed=seed, **meta)
        store.add_trials(job.max_trial_count, job)
        return store

    @classmethod
    def open(cls, storage, job_id: str, *, seed: int | None = None) -> JobStore:
        try:
            study = optuna.load_study(study_name=job_id, storage=storage)
        except KeyError:
            raise JobNotFoundError(f"no job {job_id!r} in the storage") from None
        attrs = study.user_attrs
        sampler_name = attrs.get(ATTR_PREFIX + "sampler", "tpe")
        if seed is None:
            seed = attrs.get(ATTR_PREFIX + "seed")
        study.sampler = make_sampler(sampler_name, seed=seed)
        return cls(storage, study, job_id)

    # -- job-level attributes
    def meta(self) -> dict[str, Any]:
        attrs = self.storage.get_study_user_attrs(self._study_id)
        return {k[len(ATTR_PREFIX):]: v for k, v in attrs.items() if k.startswith(ATTR_PREFIX)}

    def get_meta(self, key: str, default: Any = None) -> Any:
        return self.storage.get_study_user_attrs(self._study_id).get(ATTR_PREFIX + key, default)

    def set_meta(self, **values: Any) -> None:
        for k, v in values.items():
            self.storage.set_study_user_attr(self._study_id, ATTR_PREFIX + k, v)

    # -- trials
    def add_trials(self, n: int, job: JobSpec) -> int:
        """Enqueue up to ``n`` more trials (grid: only unused grid points). Returns how many."""
        existing = len(self.storage.get_all_trials(self._study_id, deepcopy=False))
        if job.study.algorithm is Algorithm.GRID_SEARCH:
            points = grid(job.study)
            todo = points[existing:existing + n]
            for point in todo:
                self.study.enqueue_trial(fixed_params(job.study, point), skip_if_exists=False)
            return len(todo)
        for _ in range(n):
            self.storage.create_new_trial(
                self._study_id,
                template_trial=optuna.trial.create_trial(state=TrialState.WAITING),
            )
        return n

    def frozen_trials(self, states: Iterable[TrialState] | None = None) -> list[FrozenTrial]:
        return self.storage.get_all_trials(
            self._study_id, deepcopy=False, states=tuple(states) if states else None
        )

    def claim(self, study: StudySpec) -> Claimed | None:
        """Atomically move one WAITING trial to RUNNING and suggest its parameters."""
        lookup = getattr(self.storage, "waiting_trial_ids", None)
        while True:
            if lookup is not None:  # a database: ids only, a few at a time, not every trial whole
                candidates = lookup(self._study_id, limit=8)
            else:
                candidates = [(t.number, t._trial_id) for t in self.frozen_trials((TrialState.WAITING,))]
            for number, storage_id in candidates:
                try:
                    if not self.storage.set_trial_state_values(storage_id, state=TrialState.RUNNING):
                        continue
                except optuna.exceptions.UpdateFinishedTrialError:
                    continue
                self._know_trial(storage_id)
                trial = optuna.Trial(self.study, storage_id)
                params = suggest(trial, study)
                return Claimed(number=number, storage_id=storage_id,
                               trial_id=str(number + 1), params=params, resumed=False)
            if lookup is None or not candidates:
                return None  # (a database: all 8 taken by others meanwhile, look again)

    def _know_trial(self, trial_id: int) -> None:
        # Optuna's cache over an RDB storage must have read a trial before params are set on it;
        # a worker that joined an existing job has not (the creator's process knew its trials).
        known = getattr(self.study._storage, "_trial_id_to_study_id_and_number", None)
        if known is not None and trial_id not in known:
            self.study._storage.get_all_trials(self._study_id, deepcopy=False)

    def running_trials(self) -> list[FrozenTrial]:
        return self.frozen_trials((TrialState.RUNNING,))

    def waiting_trials(self) -> list[FrozenTrial]:
        return self.frozen_trials((TrialState.WAITING,))

    def reclaim(self, frozen: FrozenTrial, study: StudySpec, reason: str = "",
                previous_worker: str = "") -> Claimed:
        """A RUNNING trial whose controller died: run it again with its stored parameters."""
        values = values_from_optuna(study, frozen.params)
        if not values and study.parameters:
            self._know_trial(frozen._trial_id)
            trial = optuna.Trial(self.study, frozen._trial_id)
            values = suggest(trial, study)
        return Claimed(number=frozen.number, storage_id=frozen._trial_id,
                       trial_id=str(frozen.number + 1), params=values, resumed=True,
                       resume_reason=reason, previous_worker=previous_worker)

    def set_trial_attrs(self, storage_id: int, **values: Any) -> None:
        batch = getattr(self.storage, "set_trial_user_attrs", None)
        if batch is not None:  # a database: one transaction
            batch(storage_id, values)
            return
        if _journal_append(self.storage, [
                (_JOURNAL_USER_ATTR, {"trial_id": storage_id, "user_attr": {k: v}})
                for k, v in values.items()]):
            return
        for k, v in values.items():
            self.storage.set_trial_user_attr(storage_id, k, v)

    def report(self, storage_id: int, step: int, value: float) -> None:
        self.report_many(storage_id, [(step, value)])

    def report_many(self, storage_id: int, items: Sequence[tuple[int, float]]) -> None:
        """Intermediate values of several steps (one journal write on the default storage)."""
        items = [(step, float(v)) for step, v in items if math.isfinite(v)]
        if _journal_append(self.storage, [
                (_JOURNAL_INTERMEDIATE, {"trial_id": storage_id, "step": step, "intermediate_value": v})
                for step, v in items]):
            return
        for step, v in items:
            self.storage.set_trial_intermediate_value(storage_id, step, v)

    def complete(self, number: int, values: Sequence[float]) -> None:
        self.study.tell(number, list(values), skip_if_finished=True)

    def fail(self, number: int) -> None:
        self.study.tell(number, state=TrialState.FAIL, skip_if_finished=True)

    def completed_curves(self) -> list[FrozenTrial]:
        return self.frozen_trials((TrialState.COMPLETE,))

    def requeue(self, storage_id: int) -> None:
        """RUNNING -> WAITING: the trial runs again (same id and parameters) when next claimed."""
        self.storage.set_trial_state_values(storage_id, state=TrialState.WAITING)
