"""One job in an Optuna storage: a study named after the job id, its trials created up front as WAITING."""

from __future__ import annotations

import collections
import contextlib
import copy
import itertools
import math
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import optuna
from optuna.storages import BaseStorage
from optuna.study import StudyDirection
from optuna.trial import FrozenTrial as FrozenTrial  # re-exported: what callers read trials as
from optuna.trial import TrialState

from trials.errors import ConfigError, JobNotFoundError
from trials.job_meta import JobMeta
from trials.spec import Algorithm, JobSpec, StudySpec, Value
from trials.study import optuna_internals as internals
from trials.study.choice import FIXED, MAX_STARTUP, MODEL, RANDOM, SUGGESTED_ATTR, startup_trials
from trials.study.database import writes
from trials.study.database.writes import (
    NotHeldError as NotHeldError,  # re-exported: a batch's lease was another worker's
)
from trials.study.journal import log as journal
from trials.study.names import ATTR_PREFIX as ATTR_PREFIX  # re-exported: where it always was
from trials.study.names import job_meta
from trials.study.samplers import acts_after_trial, make_sampler, model_ready
from trials.study.space import fixed_params, iter_grid, mirrors_doubles, suggest, values_from_optuna
from trials.study.storage import RetryingRDBStorage, quiet_optuna

try:  # Study.tell without the deep copy of the trial it returns (unused here; ~3 ms a trial whose
    # attributes carry its measurements, on the way from one trial to the next)
    from trials.study.optuna_internals import tell_with_warning as _tell_with_warning
except ImportError:  # another Optuna layout: the public method
    _tell_with_warning = None  # type: ignore[assignment]

FIXED_VALUES_ATTR = ATTR_PREFIX + "fixed_values"  # a trial's fixed values as given (system attribute)


@dataclass(frozen=True, slots=True)
class Claimed:
    number: int
    storage_id: int
    trial_id: str
    params: dict[str, Value]
    resumed: bool  # a RUNNING trial left by a dead controller, run again
    resume_reason: str = ""  # why it runs again (names the dead worker), for the attempts list
    previous_worker: str = ""  # the worker whose attempt ended without it (taken over)
    # the trial as the claim read it (a database: its launch reads nothing again), None if not read
    stored: FrozenTrial | None = field(default=None, compare=False, repr=False)


def resumed_seed(seed: int | None, storage: BaseStorage, study: optuna.Study) -> int | None:
    """The seed of a reopened job's sampler: the job's seed moved on by the trials already sampled.

    A sampler made again with the job's own seed starts its random sequence from the beginning: its
    first suggestion after a resume would repeat the first trial's parameters. Mixing in how many
    trials were sampled keeps a seeded job reproducible (the same history gives the same next
    suggestions) without repeating itself. A job opened before any trial was sampled keeps its seed.
    """
    if seed is None:
        return None
    if isinstance(storage, RetryingRDBStorage):
        n = storage.n_sampled(internals.study_id(study))
    else:
        n = sum(1 for t in storage.get_all_trials(internals.study_id(study), deepcopy=False) if t.params)
    return seed if n == 0 else (seed * 1_000_003 + n) % 2**32


class _Suggesting:
    """The storage an ``optuna.Trial`` sees while a claim on a database suggests its parameters: the
    trial as the claim read it, and its new parameters kept for the batch's one write (Optuna would
    read the trial again, then write each parameter in its own transaction). Anything else, such as a
    sampler's reads of the other trials, goes to the study's own storage."""

    def __init__(self, inner: BaseStorage, frozen: FrozenTrial):
        self._inner = inner
        self._frozen = frozen
        self.params: dict[str, tuple[float, optuna.distributions.BaseDistribution]] = {}

    def study(self, study: optuna.Study) -> optuna.Study:
        return internals.with_storage(study, self)

    def get_trial(self, trial_id: int) -> FrozenTrial:
        if trial_id != internals.storage_id(self._frozen):
            return self._inner.get_trial(trial_id)
        return copy.deepcopy(self._frozen)  # (the Trial changes its copy as it suggests)

    def get_trial_system_attrs(self, trial_id: int) -> dict[str, Any]:
        if trial_id != internals.storage_id(self._frozen):
            return self._inner.get_trial_system_attrs(trial_id)
        return dict(self._frozen.system_attrs)

    def set_trial_param(self, trial_id: int, name: str, value: float,
                        distribution: optuna.distributions.BaseDistribution) -> None:
        if trial_id != internals.storage_id(self._frozen):
            self._inner.set_trial_param(trial_id, name, value, distribution)
            return
        self.params[name] = (value, distribution)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


class JobStore:
    """One job in an Optuna storage.

    On a database, :meth:`batch` is one transaction, and the loop's reads are targeted queries (ids and
    counts, one trial at a time), never the whole study.
    """

    def __init__(self, storage: BaseStorage, study: optuna.Study, job_id: str, *,
                 sampler_name: str = "tpe", sampler_seed: int | None = None, n_startup: int = MAX_STARTUP):
        self.storage = storage
        self.study = study
        self.job_id = job_id
        self._study_id = internals.study_id(study)
        self._rdb = storage if isinstance(storage, RetryingRDBStorage) else None
        self._pending: dict[int, writes.TrialWrite] | None = None  # a database batch's writes, by trial id
        self._ids: dict[int, int] = {}  # trial number -> storage id, of the trials this store claimed
        self.sampler_name = sampler_name  # the job's sampler, and the seed it was made with here
        self.sampler_seed = sampler_seed
        self.n_startup = n_startup  # the finished trials its sampler takes at random (choice.startup_trials)

    # -- creation and opening
    @classmethod
    def create(cls, storage: BaseStorage, job_id: str, job: JobSpec, spec_dict: Mapping[str, Any],
               meta: JobMeta, *, sampler_name: str, seed: int | None) -> JobStore:
        """A new job: its study, its record (``meta`` with the spec and the sampler filled in) and its
        WAITING trials (a journal file: one write and one fsync for all of them, not one per trial and
        setting: ~0.1-0.3 s for 40 trials here)."""
        quiet_optuna()
        directions = [StudyDirection.MAXIMIZE if m.maximize else StudyDirection.MINIMIZE for m in job.study.metrics]
        n_startup = startup_trials(job.max_trial_count, sampler_name)
        with journal.one_write(storage):
            try:
                study = optuna.create_study(
                    storage=storage, study_name=job_id, directions=directions,
                    sampler=make_sampler(sampler_name, seed=seed, n_startup=n_startup), load_if_exists=False,
                )
            except optuna.exceptions.DuplicatedStudyError:
                raise ConfigError(f"a job named {job_id!r} already exists in this storage; use "
                                  f"`trials resume {job_id}` or choose another --job-id") from None
            store = cls(storage, study, job_id, sampler_name=sampler_name, sampler_seed=seed, n_startup=n_startup)
            store.write_meta(replace(meta, spec=dict(spec_dict), sampler=sampler_name, seed=seed, startup=n_startup))
            store.add_trials(job.max_trial_count, job)
        return store

    @classmethod
    def open(cls, storage: BaseStorage, job_id: str, *, seed: int | None = None, sampler: bool = True) -> JobStore:
        """The job in ``storage``; ``sampler=False`` for one only read (its sampler is not made, so
        its trials are not read for the sampler's seed)."""
        quiet_optuna()
        try:
            study = optuna.load_study(study_name=job_id, storage=storage)
        except KeyError:
            names = [s.study_name for s in storage.get_all_studies()]
            raise JobNotFoundError.in_storage(job_id, names) from None
        if not sampler:
            return cls(storage, study, job_id)
        meta = job_meta(study.user_attrs, job_id)
        sampler_name = meta.sampler or "tpe"
        seed = resumed_seed(meta.seed if seed is None else seed, storage, study)
        n_startup = meta.startup  # (a job made before it was recorded: 10, as then)
        n_startup = n_startup if n_startup is not None and n_startup >= 1 else MAX_STARTUP
        study.sampler = make_sampler(sampler_name, seed=seed, n_startup=n_startup)
        return cls(storage, study, job_id, sampler_name=sampler_name, sampler_seed=seed, n_startup=n_startup)

    # -- the job's record (trials.job_meta)
    def meta(self) -> JobMeta:
        """The job's record, read from the storage (one read).

        Raises:
            JobMetaError: written by a newer trials, or a member of the wrong type.
        """
        return job_meta(self.storage.get_study_user_attrs(self._study_id), self.job_id)

    def write_meta(self, meta: JobMeta, *, since: JobMeta | None = None) -> None:
        """Write the job's record: the members that differ from ``since``, the record as it was read
        (``write_meta(replace(meta, state=...), since=meta)``), else the whole record. On a journal
        file one write and one fsync for all of them."""
        members = meta.to_json() if since is None else meta.changed(since)
        with journal.one_write(self.storage):
            for k, v in members.items():
                self.storage.set_study_user_attr(self._study_id, ATTR_PREFIX + k, v)

    # -- trials
    def add_trials(self, n: int, job: JobSpec) -> int:
        """Enqueue up to ``n`` more trials (grid: only unused grid points). Returns how many."""
        existing = len(self.storage.get_all_trials(self._study_id, deepcopy=False))
        if job.study.algorithm is Algorithm.GRID_SEARCH:
            todo = list(itertools.islice(iter_grid(job.study, existing), n))
            for point in todo:
                self.study.enqueue_trial(fixed_params(job.study, point), skip_if_exists=False)
            return len(todo)
        for _ in range(n):
            self.storage.create_new_trial(
                self._study_id,
                template_trial=optuna.trial.create_trial(state=TrialState.WAITING),
            )
        return n

    def fix_params(self, number: int, params: Mapping[str, Value], study: StudySpec) -> None:
        """The WAITING trial ``number`` runs with ``params`` when claimed (what Optuna's
        ``enqueue_trial`` gives a trial it creates; ``trials check`` runs the spec's first point)."""
        self._fix(self.storage.get_trial_id_from_study_id_trial_number(self._study_id, number), params, study)

    def _fix(self, storage_id: int, params: Mapping[str, Value], study: StudySpec,
             also: Mapping[str, Any] | None = None, frozen: FrozenTrial | None = None) -> None:
        """Fix ``params`` on a trial (with more system attributes ``also``), and on ``frozen``, the
        trial as its claim read it."""
        # a reverse-log double is mirrored for Optuna (min + max - x): the claim returns x itself
        attrs = {internals.FIXED_PARAMS_ATTR: fixed_params(study, params), FIXED_VALUES_ATTR: dict(params),
                 **(also or {})}
        if frozen is not None:
            frozen.system_attrs.update(attrs)
        if self._rdb is not None:
            with self._writing(storage_id) as w:
                w.system_attrs.update(attrs)
            return
        for key, value in attrs.items():
            self.storage.set_trial_system_attr(storage_id, key, value)

    def frozen_trials(self, states: Iterable[TrialState] | None = None) -> list[FrozenTrial]:
        return self.storage.get_all_trials(
            self._study_id, deepcopy=False, states=tuple(states) if states else None
        )

    def counts(self) -> dict[TrialState, int]:
        """How many trials are in each state (a database: one count query, no trial read)."""
        if self._rdb is not None:
            return self._rdb.count_states(self._study_id)
        return dict(collections.Counter(t.state for t in self.frozen_trials()))

    def trial_attrs(self, *keys: str) -> dict[int, dict[str, Any]]:
        """{trial number: {key: value}}: the user attributes ``keys`` of every trial that has one (a
        database: those attributes only, not every trial whole)."""
        if self._rdb is not None:
            return self._rdb.user_attrs_of(self._study_id, keys)
        return {t.number: attrs for t in self.frozen_trials()
                if (attrs := {k: t.user_attrs[k] for k in keys if k in t.user_attrs})}

    def n_trials(self) -> int:
        return sum(self.counts().values())

    def waiting_running(self) -> tuple[int, int]:
        """(WAITING, RUNNING) trials of the job."""
        counts = self.counts()
        return counts.get(TrialState.WAITING, 0), counts.get(TrialState.RUNNING, 0)

    def trial(self, number: int) -> FrozenTrial:
        """One trial by its number (its trial id minus 1)."""
        return self.storage.get_trial(self.storage.get_trial_id_from_study_id_trial_number(self._study_id, number))

    def claim(self, study: StudySpec, *, before: Callable[[int], None] | None = None,
              move: Callable[[int], bool] | None = None, params: Mapping[str, Value] | None = None,
              system_attrs: Mapping[str, Any] | None = None) -> Claimed | None:
        """Atomically move one WAITING trial to RUNNING and suggest its parameters.

        ``before`` gets each trial's storage id before its move is tried (the move may commit although
        its answer is lost: the caller then knows which trial to look at). ``move`` makes the move
        instead of the storage (a compare-and-set: False if the trial was not WAITING any more).
        ``params``: its parameters, suggested ahead of time (:mod:`trials.study.ahead`), with what
        the sampler noted on it (``system_attrs``); they are fixed on the trial as an enqueued
        trial's are, so the sampler is not asked again.
        """
        while True:
            candidates: list[tuple[int, int, FrozenTrial | None]]
            if self._rdb is not None:  # a database: a few at a time, not every trial
                candidates = [*self._rdb.waiting_trials(self._study_id, limit=8)]
            else:
                candidates = [(t.number, internals.storage_id(t), None)
                              for t in self.frozen_trials((TrialState.WAITING,))]
            for number, storage_id, frozen in candidates:
                if before is not None:
                    before(storage_id)
                if not (move or self._move_to_running)(storage_id):
                    continue
                if self._pending is not None:  # its writes in this batch need no check (see rdb.apply)
                    self._pending.setdefault(storage_id, writes.TrialWrite()).claimed = True
                given = internals.FIXED_PARAMS_ATTR in (
                    frozen.system_attrs if frozen is not None else self.storage.get_trial_system_attrs(storage_id))
                if params is not None and not given:
                    self._fix(storage_id, params, study, system_attrs, frozen)  # (an enqueued point is kept)
                kind = self._suggested_by(given, params, system_attrs)
                claimed = self._suggested(number, storage_id, study, frozen)
                self._note_suggested(storage_id, kind, frozen)
                return claimed
            if self._rdb is None or not candidates:
                return None  # (a database: all 8 taken by others meanwhile, look again)

    def _suggested_by(self, given: bool, params: Mapping[str, Value] | None,
                      system_attrs: Mapping[str, Any] | None) -> str:
        """How a claimed trial's parameters are chosen (``choice.SUGGESTED_ATTR``'s value): given (a grid
        point, an enqueued trial), by the model (suggested ahead by it, or by the job's sampler past its
        start-up), else at random."""
        if given:
            return FIXED
        if params is not None:
            return str((system_attrs or {}).get(SUGGESTED_ATTR, RANDOM))
        if isinstance(self.study.sampler, optuna.samplers.RandomSampler):  # (the start-up of a sampler run ahead)
            return RANDOM
        return MODEL if model_ready(self.sampler_name, self.counts(), self.n_startup) else RANDOM

    def _note_suggested(self, storage_id: int, kind: str, frozen: FrozenTrial | None) -> None:
        """Note on the trial how its parameters were chosen (in the claim's write: its batch)."""
        if frozen is not None:
            frozen.system_attrs[SUGGESTED_ATTR] = kind
        if self._rdb is not None:
            with self._writing(storage_id) as w:
                w.system_attrs[SUGGESTED_ATTR] = kind
            return
        self.storage.set_trial_system_attr(storage_id, SUGGESTED_ATTR, kind)

    def _move_to_running(self, storage_id: int) -> bool:
        """WAITING -> RUNNING if it still is WAITING (a compare-and-set; False: another worker's now)."""
        if self._rdb is not None:
            return self._rdb.claim_trial(storage_id)
        try:
            return self.storage.set_trial_state_values(storage_id, state=TrialState.RUNNING)
        except optuna.exceptions.UpdateFinishedTrialError:
            return False

    def started(self, frozen: FrozenTrial, study: StudySpec) -> Claimed:
        """A RUNNING trial whose claim was cut short (by an outage) before it ran: its parameters,
        those already suggested kept, the rest suggested now."""
        return self._suggested(frozen.number, internals.storage_id(frozen), study, frozen)

    def _suggested(self, number: int, storage_id: int, study: StudySpec,
                   frozen: FrozenTrial | None = None) -> Claimed:
        params = self._suggest(storage_id, study, frozen)
        if mirrors_doubles(study):  # values fixed by fix_params come back as given, not mirrored twice
            attrs = frozen.system_attrs if frozen is not None else self.storage.get_trial_system_attrs(storage_id)
            exact = attrs.get(FIXED_VALUES_ATTR)
            if isinstance(exact, dict):
                params.update((k, v) for k, v in exact.items() if k in params)
        self._ids[number] = storage_id
        return Claimed(number=number, storage_id=storage_id,
                       trial_id=str(number + 1), params=params, resumed=False, stored=frozen)

    def _suggest(self, storage_id: int, study: StudySpec, frozen: FrozenTrial | None) -> dict[str, Value]:
        """The parameters of a RUNNING trial: a parameter already set keeps its value (Optuna's rule).

        On a database the new ones are written with the batch (one statement, see ``_Suggesting``).
        """
        if self._rdb is None or frozen is None:
            self._know_trial(storage_id)
            return suggest(optuna.Trial(self.study, storage_id), study)
        view = _Suggesting(internals.study_storage(self.study), frozen)
        params = suggest(optuna.Trial(view.study(self.study), storage_id), study)
        if view.params:
            with self._writing(storage_id) as w:
                w.params.update(view.params)
        return params

    def _know_trial(self, trial_id: int) -> None:
        # Optuna's cache over an RDB storage must have read a trial before params are set on it;
        # a worker that joined an existing job has not (the creator's process knew its trials).
        known = internals.cached_trial_ids(internals.study_storage(self.study))
        if known is not None and trial_id not in known:
            internals.study_storage(self.study).get_all_trials(self._study_id, deepcopy=False)

    def batch(self) -> contextlib.AbstractContextManager[None]:
        """A block whose writes are made together: on a database in one transaction at its end (all
        or nothing: a block that raises writes nothing), on a journal file in one write and one
        fsync (see ``journal.one_write``)."""
        if self._rdb is None:
            return journal.one_write(self.storage)
        return self._one_transaction(self._rdb)

    @contextlib.contextmanager
    def _one_transaction(self, storage: RetryingRDBStorage) -> Iterator[None]:
        if self._pending is not None:  # already inside a batch: its end writes (none of this block's if it raises)
            kept = copy.deepcopy(self._pending)
            try:
                yield
            except BaseException:
                self._pending = kept
                raise
            return
        self._pending = {}
        try:
            yield
            pending = self._pending
        finally:
            self._pending = None
        storage.write_trials(pending)

    @contextlib.contextmanager
    def _writing(self, storage_id: int) -> Iterator[writes.TrialWrite]:
        """A database write to one trial: kept for the batch's transaction, else written at once."""
        assert self._rdb is not None
        if self._pending is not None:
            yield self._pending.setdefault(storage_id, writes.TrialWrite())
            return
        w = writes.TrialWrite()
        yield w
        self._rdb.write_trials({storage_id: w})

    def require_in_batch(self, storage_id: int, sql: str, binds: Mapping[str, Any]) -> bool:
        """Run ``sql`` in the batch's transaction, after the trial's writes; if it changes no row the
        whole batch is rolled back (:class:`NotHeldError`). False when no database batch is open."""
        if self._pending is None:
            return False
        self._pending.setdefault(storage_id, writes.TrialWrite()).required.append((sql, dict(binds)))
        return True

    def running_trials(self) -> list[FrozenTrial]:
        return self.frozen_trials((TrialState.RUNNING,))

    def waiting_trials(self) -> list[FrozenTrial]:
        return self.frozen_trials((TrialState.WAITING,))

    def reclaim(self, frozen: FrozenTrial, study: StudySpec, reason: str = "",
                previous_worker: str = "") -> Claimed:
        """A RUNNING trial whose controller died: run it again with its stored parameters."""
        values = values_from_optuna(study, frozen.params)
        if not values and study.parameters:
            values = self._suggest(internals.storage_id(frozen), study, frozen)
        self._ids[frozen.number] = internals.storage_id(frozen)
        return Claimed(number=frozen.number, storage_id=internals.storage_id(frozen),
                       trial_id=str(frozen.number + 1), params=values, resumed=True,
                       resume_reason=reason, previous_worker=previous_worker, stored=frozen)

    def set_trial_attrs(self, storage_id: int, **values: Any) -> None:
        if self._rdb is not None:  # a database: one statement, in the batch's transaction if one is open
            with self._writing(storage_id) as w:
                w.user_attrs.update(values)
            return
        if journal.append(self.storage, [
                (journal.USER_ATTR, {"trial_id": storage_id, "user_attr": {k: v}})
                for k, v in values.items()]):
            return
        for k, v in values.items():
            self.storage.set_trial_user_attr(storage_id, k, v)

    def report(self, storage_id: int, step: int, value: float) -> None:
        self.report_many(storage_id, [(step, value)])

    def report_many(self, storage_id: int, items: Sequence[tuple[int, float]],
                    attrs: Mapping[str, Any] | None = None) -> None:
        """Intermediate values of several steps, and ``attrs`` (user attributes) beside them
        (one journal write on the default storage)."""
        items = [(step, float(v)) for step, v in items if math.isfinite(v)]
        attrs = attrs or {}
        if self._rdb is not None:
            if items or attrs:
                with self._writing(storage_id) as w:
                    w.steps.update(items)
                    w.user_attrs.update(attrs)
            return
        if journal.append(self.storage, [
                *((journal.INTERMEDIATE_VALUE, {"trial_id": storage_id, "step": step, "intermediate_value": v})
                  for step, v in items),
                *((journal.USER_ATTR, {"trial_id": storage_id, "user_attr": {k: v}})
                  for k, v in attrs.items())]):
            return
        for step, v in items:
            self.storage.set_trial_intermediate_value(storage_id, step, v)
        for k, v in attrs.items():
            self.storage.set_trial_user_attr(storage_id, k, v)

    def complete(self, number: int, values: Sequence[float], *, stopped_early: bool = False) -> None:
        """A SUCCEEDED trial: COMPLETE with its values, or PRUNED when it was stopped early.

        A stopped trial's value is where it stopped, not a result: PRUNED keeps it out of
        Optuna's best trials and importances, lets the samplers rank it below the completed ones,
        and is how optuna-dashboard shows it (with the ``stopped_early``/``stop_reason`` attributes).
        """
        if self._tells_directly():
            n_objectives = len(self.study.directions)
            self._finish(number, TrialState.PRUNED if stopped_early else TrialState.COMPLETE,
                         None if stopped_early else writes.check_values(values, n_objectives))
            return
        if stopped_early:
            self._tell(number, state=TrialState.PRUNED)
            return
        self._tell(number, list(values))

    def fail(self, number: int) -> None:
        if self._tells_directly():
            self._finish(number, TrialState.FAIL, None)
            return
        self._tell(number, state=TrialState.FAIL)

    def _tell(self, number: int, values: list[float] | None = None, state: TrialState | None = None) -> None:
        """``Study.tell(..., skip_if_finished=True)``, less the deep copy of the trial it returns."""
        if _tell_with_warning is None:
            self.study.tell(number, values, state=state, skip_if_finished=True)
            return
        _tell_with_warning(study=self.study, trial=number, value_or_values=values, state=state,
                           skip_if_finished=True)

    def _tells_directly(self) -> bool:
        """A database whose sampler does nothing after a trial: the state and values are written
        with the batch (Optuna's ``tell`` reads the trial again and writes in its own transaction)."""
        return self._rdb is not None and not acts_after_trial(self.study.sampler)

    def _finish(self, number: int, state: TrialState, values: list[float] | None) -> None:
        storage_id = self._ids.get(number)
        if storage_id is None:
            storage_id = self.storage.get_trial_id_from_study_id_trial_number(self._study_id, number)
        with self._writing(storage_id) as w:
            w.state, w.values = state, values

    def completed_curves(self) -> list[FrozenTrial]:
        return self.frozen_trials((TrialState.COMPLETE,))

    def finished_curves(self) -> list[FrozenTrial]:
        """The trials an early-stopping rule compares with: completed, or stopped early (PRUNED)."""
        return self.frozen_trials((TrialState.COMPLETE, TrialState.PRUNED))

    def delete_study(self) -> None:
        """The job's study and its trials, gone from the storage (``trials serve``'s jobs.delete)."""
        self.storage.delete_study(self._study_id)

    def requeue(self, storage_id: int) -> None:
        """RUNNING -> WAITING: the trial runs again (same id and parameters) when next claimed."""
        if self._rdb is not None:
            with self._writing(storage_id) as w:
                w.state, w.values = TrialState.WAITING, None
            return
        self.storage.set_trial_state_values(storage_id, state=TrialState.WAITING)
