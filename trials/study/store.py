"""One job in an Optuna storage: a study named after the job id, its trials created up front as WAITING."""

from __future__ import annotations

import contextlib
import itertools
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import optuna
from optuna.storages import BaseStorage
from optuna.study import StudyDirection
from optuna.trial import FrozenTrial as FrozenTrial  # re-exported: what callers read trials as
from optuna.trial import TrialState

from trials.errors import ConfigError, JobNotFoundError
from trials.spec import Algorithm, JobSpec, StudySpec, Value
from trials.study import journal
from trials.study.names import ATTR_PREFIX as ATTR_PREFIX  # re-exported: where it always was
from trials.study.samplers import make_sampler
from trials.study.space import fixed_params, iter_grid, mirrors_doubles, suggest, values_from_optuna
from trials.study.storage import quiet_optuna

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


def resumed_seed(seed: int | None, storage: BaseStorage, study: optuna.Study) -> int | None:
    """The seed of a reopened job's sampler: the job's seed moved on by the trials already sampled.

    A sampler made again with the job's own seed starts its random sequence from the beginning: its
    first suggestion after a resume would repeat the first trial's parameters. Mixing in how many
    trials were sampled keeps a seeded job reproducible (the same history gives the same next
    suggestions) without repeating itself. A job opened before any trial was sampled keeps its seed.
    """
    if seed is None:
        return None
    n = sum(1 for t in storage.get_all_trials(study._study_id, deepcopy=False) if t.params)
    return seed if n == 0 else (seed * 1_000_003 + n) % 2**32


class JobStore:
    """One job in an Optuna storage."""

    def __init__(self, storage: BaseStorage, study: optuna.Study, job_id: str):
        self.storage = storage
        self.study = study
        self.job_id = job_id
        self._study_id = study._study_id

    # -- creation and opening
    @classmethod
    def create(cls, storage: BaseStorage, job_id: str, job: JobSpec, spec_dict: Mapping[str, Any],
               meta: Mapping[str, Any], *, sampler_name: str, seed: int | None) -> JobStore:
        quiet_optuna()
        directions = [StudyDirection.MAXIMIZE if m.maximize else StudyDirection.MINIMIZE for m in job.study.metrics]
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
    def open(cls, storage: BaseStorage, job_id: str, *, seed: int | None = None, sampler: bool = True) -> JobStore:
        """The job in ``storage``; ``sampler=False`` for one only read (its sampler is not made, so
        its trials are not read for the sampler's seed)."""
        quiet_optuna()
        try:
            study = optuna.load_study(study_name=job_id, storage=storage)
        except KeyError:
            raise JobNotFoundError(f"no job {job_id!r} in the storage") from None
        if not sampler:
            return cls(storage, study, job_id)
        attrs = study.user_attrs
        sampler_name = attrs.get(ATTR_PREFIX + "sampler", "tpe")
        if seed is None:
            seed = attrs.get(ATTR_PREFIX + "seed")
        study.sampler = make_sampler(sampler_name, seed=resumed_seed(seed, storage, study))
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
        storage_id = self.storage.get_trial_id_from_study_id_trial_number(self._study_id, number)
        self.storage.set_trial_system_attr(storage_id, "fixed_params", fixed_params(study, params))
        # a reverse-log double is mirrored for Optuna (min + max - x): the claim returns x itself
        self.storage.set_trial_system_attr(storage_id, FIXED_VALUES_ATTR, dict(params))

    def frozen_trials(self, states: Iterable[TrialState] | None = None) -> list[FrozenTrial]:
        return self.storage.get_all_trials(
            self._study_id, deepcopy=False, states=tuple(states) if states else None
        )

    def trial(self, number: int) -> FrozenTrial:
        """One trial by its number (its trial id minus 1)."""
        return self.storage.get_trial(self.storage.get_trial_id_from_study_id_trial_number(self._study_id, number))

    def claim(self, study: StudySpec, *, before: Callable[[int], None] | None = None) -> Claimed | None:
        """Atomically move one WAITING trial to RUNNING and suggest its parameters.

        ``before`` gets each trial's storage id before its move is tried (the move may commit although
        its answer is lost: the caller then knows which trial to look at).
        """
        lookup = getattr(self.storage, "waiting_trial_ids", None)
        while True:
            if lookup is not None:  # a database: ids only, a few at a time, not every trial whole
                candidates = lookup(self._study_id, limit=8)
            else:
                candidates = [(t.number, t._trial_id) for t in self.frozen_trials((TrialState.WAITING,))]
            for number, storage_id in candidates:
                if before is not None:
                    before(storage_id)
                try:
                    if not self.storage.set_trial_state_values(storage_id, state=TrialState.RUNNING):
                        continue
                except optuna.exceptions.UpdateFinishedTrialError:
                    continue
                return self._suggested(number, storage_id, study)
            if lookup is None or not candidates:
                return None  # (a database: all 8 taken by others meanwhile, look again)

    def started(self, frozen: FrozenTrial, study: StudySpec) -> Claimed:
        """A RUNNING trial whose claim was cut short (by an outage) before it ran: its parameters,
        those already suggested kept, the rest suggested now."""
        return self._suggested(frozen.number, frozen._trial_id, study)

    def _suggested(self, number: int, storage_id: int, study: StudySpec) -> Claimed:
        self._know_trial(storage_id)
        trial = optuna.Trial(self.study, storage_id)
        params = suggest(trial, study)  # a parameter already set keeps its value (Optuna's rule)
        if mirrors_doubles(study):  # values fixed by fix_params come back as given, not mirrored twice
            exact = self.storage.get_trial_system_attrs(storage_id).get(FIXED_VALUES_ATTR)
            if isinstance(exact, dict):
                params.update((k, v) for k, v in exact.items() if k in params)
        return Claimed(number=number, storage_id=storage_id,
                       trial_id=str(number + 1), params=params, resumed=False)

    def _know_trial(self, trial_id: int) -> None:
        # Optuna's cache over an RDB storage must have read a trial before params are set on it;
        # a worker that joined an existing job has not (the creator's process knew its trials).
        known = getattr(self.study._storage, "_trial_id_to_study_id_and_number", None)
        if known is not None and trial_id not in known:
            self.study._storage.get_all_trials(self._study_id, deepcopy=False)

    def batch(self) -> contextlib.AbstractContextManager[None]:
        """A block whose writes reach a journal file in one write and one fsync (see ``journal.one_write``)."""
        return journal.one_write(self.storage)

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
        if stopped_early:
            self.study.tell(number, state=TrialState.PRUNED, skip_if_finished=True)
            return
        self.study.tell(number, list(values), skip_if_finished=True)

    def fail(self, number: int) -> None:
        self.study.tell(number, state=TrialState.FAIL, skip_if_finished=True)

    def completed_curves(self) -> list[FrozenTrial]:
        return self.frozen_trials((TrialState.COMPLETE,))

    def requeue(self, storage_id: int) -> None:
        """RUNNING -> WAITING: the trial runs again (same id and parameters) when next claimed."""
        self.storage.set_trial_state_values(storage_id, state=TrialState.WAITING)
