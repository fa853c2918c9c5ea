"""A job as the commands show it: read once (its journal without Optuna), its Vertex resource, its
local details, its best trials."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from trials.controller.jobs import registry
from trials.controller.jobs.describe import job_to_rest, shown, trial_rows, trial_to_rest
from trials.controller.policy.ranking import best_of, pareto_front
from trials.errors import JobMetaError, JobNotFoundError
from trials.job_meta import JobMeta
from trials.jsontext import Encoded, dumps_indented
from trials.spec import JobSpec
from trials.storage_url import JOURNAL_FILE, is_journal_url, journal_path
from trials.study import replay
from trials.study.journal import cache as journal_cache
from trials.study.names import job_meta, meta_attr, values_reader
from trials.timefmt import rfc3339

if TYPE_CHECKING:
    from trials.spec import Value
    from trials.study.store import JobStore


# --- reading a job once ---------------------------------------------------------------------------
class ReadStore(Protocol):
    """What the commands that show a job read of its store (``JobStore`` has it too)."""

    def meta(self) -> JobMeta: ...
    def frozen_trials(self, states: Iterable[Any] | None = None) -> list[Any]: ...


class _Attrs:
    """The job's attributes and trials as read once: every later question is answered from them."""

    def __init__(self, attrs: dict[str, Any], trials: list[Any], *, job_id: str, journal: str | None = None,
                 n_bytes: int = 0):
        self._meta = job_meta(attrs, job_id)
        self._trials = trials
        self.journal = journal  # read from this journal without Optuna, its first ``n_bytes``
        self.n_bytes = n_bytes

    def meta(self) -> JobMeta:
        return self._meta

    def frozen_trials(self, states: Iterable[Any] | None = None) -> list[Any]:
        if states is None:
            return list(self._trials)
        names = {getattr(s, "name", s) for s in states}
        return [t for t in self._trials if t.state.name in names]


def _summaries(r: replay.Replay) -> dict[str, Any]:
    """Per study, what ``list`` shows of it (kept in the journal's snapshot header): its job
    attributes and how many trials ``describe`` shows."""
    return {s.name: {"attrs": s.user_attrs, "n_shown": sum(map(shown, r.study_trials_of(s.study_id)))}
            for s in r.studies.values()}


def _replayed(path: str, job_id: str, whole: bool, *, exact: bool = False) -> _Attrs | None:
    """The job in a journal replayed without Optuna; None when only Optuna reads it exactly.

    ``exact``: nothing written, and None also when the snapshot is stale or torn, or the journal
    does not end where the read ended (a torn last record, a record appended meanwhile, a writer's
    lock file): see :func:`read_exact`."""
    try:
        if exact and os.path.exists(path + ".lock"):
            return None  # a write in progress, or a killed writer's lock (the next controller removes it)
        r = replay.read_journal(path, summarize=_summaries, whole=whole, write=not exact, stale_ok=not exact)
        if exact and os.path.getsize(path) != r.n_bytes:
            return None
    except (replay.Unsupported, OSError):  # Optuna reads it, or names what is wrong, as it always did
        return None
    study_id = r.study_id(job_id)
    if study_id is None:
        raise JobNotFoundError.in_storage(job_id, (s.name for s in r.studies.values()))
    return _Attrs(r.studies[study_id].user_attrs, r.study_trials_of(study_id), job_id=job_id, journal=path,
                  n_bytes=r.n_bytes)


def _loaded(store: JobStore) -> _Attrs:
    """A job in any Optuna storage, its trials loaded once (a database answers each call anew)."""
    return _Attrs(store.study.user_attrs, store.frozen_trials(), job_id=store.job_id)


@dataclass(kw_only=True)
class JobView:
    """A job as read for showing it: its spec, and its store read once."""

    job_id: str
    job_dir: str
    storage_url: str
    store: ReadStore
    job: JobSpec


def read_job(job_id: str, *, root: str, storage: str | None, whole: bool = True) -> JobView:
    """A job to show: a journal is replayed without Optuna (from its snapshot), any other storage
    is read once; the same checks and errors as ``registry.open_job``.

    ``whole=False`` for a table (``describe``'s table and CSV, ``best``): a journal's finished trials
    may come slim (``replay.read_journal``: their steps counted, not read; no attempts)."""
    url = registry.job_url(job_id, root=root, storage=storage)
    store = _replayed(journal_path(url), job_id, whole) if is_journal_url(url) else None
    if store is None:
        from trials.study.storage import open_storage
        from trials.study.store import JobStore

        store = _loaded(JobStore.open(open_storage(url), job_id, sampler=False))
    meta = registry.checked_meta(store.meta(), job_id, url)
    return JobView(job_id=job_id, job_dir=meta.job_dir or registry.job_dir_of(root, job_id),
                   storage_url=url, store=store, job=registry.spec_from_storage(meta))


def read_exact(job_id: str, *, root: str, storage: str | None) -> JobView | None:
    """A journal job read without Optuna and without writing anything, when nothing is in doubt: from
    its snapshot when that is of the journal's current prefix (else, with no snapshot, from the
    journal's start) and the journal's tail, the journal ending where the read ended; its finished
    trials slim (``read_job(whole=False)``).

    None when only the slow path can tell: a database, a snapshot that is there but stale, torn or
    foreign, a torn last record or one appended while it was read, a journal writer's lock file, a
    record the lean replay does not read. Raises as ``read_job`` does (no such job)."""
    url = registry.job_url(job_id, root=root, storage=storage)
    if not is_journal_url(url):
        return None
    store = _replayed(journal_path(url), job_id, False, exact=True)
    if store is None:
        return None
    meta = registry.checked_meta(store.meta(), job_id, url)
    return JobView(job_id=job_id, job_dir=meta.job_dir or registry.job_dir_of(root, job_id),
                   storage_url=url, store=store, job=registry.spec_from_storage(meta))


def list_jobs(root: str, storage: str | None) -> list[dict[str, Any]]:
    """Every job under ``root`` (or in ``storage``): id, state, trials shown, creation time."""
    out = []
    if storage:
        from trials.study.storage import open_storage, study_summaries

        opened = open_storage(storage)
        summaries = getattr(opened, "job_summaries", None)
        if summaries is not None:  # a database: the attributes the list shows, not every trial whole
            keys = tuple(map(meta_attr, ("version", "state", "create_time")))
            for name, attrs, trials in summaries(keys, SHOWN_KEYS):
                n = sum(shown(_Listed(state, user_attrs)) for state, user_attrs in trials)
                out.append(_row(name, attrs, n))
            return out
        for s in study_summaries(opened):
            n = sum(map(shown, opened.get_all_trials(s._study_id, deepcopy=False)))
            out.append(_row(s.study_name, s.user_attrs, n))
        return out
    if not os.path.isdir(root):
        return out
    for name in sorted(os.listdir(root)):
        if os.path.exists(os.path.join(root, name, JOURNAL_FILE)):
            try:
                meta, n_shown = _listed(root, name)
            except Exception as err:  # noqa: BLE001 - one broken job must not hide the others
                out.append({"job_id": name, "state": f"unreadable: {type(err).__name__}", "trials": 0,
                            "create_time": ""})
                continue
            out.append({"job_id": name, "state": str(meta.state or "?"), "trials": n_shown,
                        "create_time": meta.create_time or ""})
    return out


def _row(job_id: str, attrs: Mapping[str, Any], n_shown: int) -> dict[str, Any]:
    """``list``'s row of a job in a database: its id, state, trials shown and creation time."""
    try:
        meta = job_meta(attrs, job_id)
    except JobMetaError as err:  # one job a newer trials wrote must not hide the others
        return {"job_id": job_id, "state": f"unreadable: {type(err).__name__}", "trials": 0, "create_time": ""}
    return {"job_id": job_id, "state": str(meta.state or "?"), "trials": n_shown, "create_time": meta.create_time or ""}


SHOWN_KEYS = ("state", "start_time", "requeued")  # what ``describe.shown`` reads of a trial


@dataclass(frozen=True, slots=True)
class _Listed:
    state: Any
    user_attrs: dict[str, Any]


def _listed(root: str, job_id: str) -> tuple[JobMeta, int]:
    """A job's attributes and the trials ``describe`` shows: from its journal's snapshot header
    when that covers the whole journal, else as ``read_job`` reads the job (same checks, errors)."""
    url = registry.job_url(job_id, root=root, storage=None)
    try:
        summary = replay.read_summaries(journal_path(url), _summaries).get(job_id)
    except (replay.Unsupported, OSError):
        summary = None
    if summary is None:  # not a job of this journal (read_job says so) or only Optuna reads it
        h = read_job(job_id, root=root, storage=None, whole=False)
        return h.store.meta(), sum(map(shown, h.store.frozen_trials()))
    meta = registry.checked_meta(_Attrs(summary["attrs"], [], job_id=job_id).meta(), job_id, url)
    return meta, int(summary["n_shown"])


Job = JobView | registry.JobHandle


# --- describe -------------------------------------------------------------------------------------
def params_of(h: Job) -> Callable[[Any], dict[str, Value]]:
    read = values_reader(h.job.study)

    def get(t: Any) -> dict[str, Value]:
        return read(t.params)

    return get


def describe(h: Job, *, steps: bool = True) -> dict[str, Any]:
    """The job's REST resource; ``steps=False`` for a table, which only counts each trial's steps."""
    return job_to_rest(h.job_id, h.store.meta(), h.store.frozen_trials(), params_of(h),
                       h.job.study.reported_metric_ids, steps=steps, update_time=rfc3339(time.time()))


def describe_text(job_id: str, *, root: str, storage: str | None) -> str:
    """``describe --format json``: the job's REST resource as indented JSON (``describe``). A journal
    job's finished trials are written from their kept text (``journal_cache.load_texts``): each is converted and
    encoded once, the first time it is described finished; the journal is then read with those
    trials slim (``read_job(whole=False)``)."""
    with journal_cache.hashing_once():  # (the kept texts and the snapshot name the same journal prefix: read once)
        return _describe_text(job_id, root=root, storage=storage)


def _describe_text(job_id: str, *, root: str, storage: str | None) -> str:
    url = registry.job_url(job_id, root=root, storage=storage)
    cache = journal_cache.load_texts(journal_path(url)) if is_journal_url(url) else journal_cache.TextCache()
    h = read_job(job_id, root=root, storage=storage, whole=job_id not in cache.jobs)  # (none kept: whole at once)
    store = h.store
    journal = store.journal if isinstance(store, _Attrs) else None
    if journal is None or not isinstance(store, _Attrs):  # (a database: read whole)
        return dumps_indented(describe(h))
    digest = journal_cache.spec_digest(store.meta().spec, h.job.study.reported_metric_ids)
    if any(t.slim and t.storage_id not in cache.texts(job_id, digest) for t in store.frozen_trials() if shown(t)):
        h = read_job(job_id, root=root, storage=storage)  # a finished trial with no text yet: read whole
        store = h.store
        journal = store.journal if isinstance(store, _Attrs) else None
        if journal is None or not isinstance(store, _Attrs):
            return dumps_indented(describe(h))
    return _described(h, store, journal, cache)


def _described(h: Job, store: _Attrs, journal: str, cache: journal_cache.TextCache) -> str:
    metric_ids = h.job.study.reported_metric_ids
    meta = store.meta()
    digest = journal_cache.spec_digest(meta.spec, metric_ids)
    texts = cache.texts(h.job_id, digest)
    params = params_of(h)
    fresh: journal_cache.Texts = {}

    def entry(t: Any) -> Any:
        finished = t.state.is_finished()
        text = texts.get(t.storage_id) if finished else None
        if text is None:
            d = trial_to_rest(t, params(t), metric_ids)
            if not finished:  # (it changes yet)
                return d
            text = fresh[t.storage_id] = dumps_indented(d, level=2)
        return Encoded(text)

    out = dumps_indented(job_to_rest(h.job_id, meta, store.frozen_trials(), params, metric_ids, entry=entry,
                                     update_time=rfc3339(time.time())))
    if fresh:  # (the other jobs' texts hold: the journal still starts with the prefix they are of)
        jobs = dict(cache.jobs)
        jobs[h.job_id] = (digest, {**texts, **fresh})
        journal_cache.save_texts(journal, store.n_bytes, jobs)
    return out


def table(h: Job, *, exact: bool = False) -> tuple[list[str], list[list[str]]]:
    """``describe``'s table (or CSV with ``exact``) of the job's shown trials: ``describe.rows`` of
    its REST job and local details, made straight from the trials (``describe.trial_rows``)."""
    return trial_rows(h.store.frozen_trials(), params_of(h), h.job.study.reported_metric_ids, exact=exact)


def describe_local(h: Job) -> dict[str, Any]:
    """What only the local run knows, per trial (``describe --format local-json``)."""
    from trials.controller.jobs.describe import local_details
    from trials.study.choice import suggestion_counts

    meta = h.store.meta()
    ahead = suggestions_ahead(meta)
    trials = h.store.frozen_trials()
    command = list(meta.local_command) if meta.local_command is not None else None
    return {"jobId": h.job_id, "jobFolder": h.job_dir, "state": meta.state.value if meta.state else None,
            "baseOutput": meta.base_output, "localCommand": command,
            **({"studyStopped": meta.study_stopped} if meta.study_stopped else {}),
            **({"suggestionsAhead": ahead} if ahead else {}),
            "suggestions": suggestion_counts(trials),  # the sampler's model, at random, given (issue 48)
            **({"keptLayers": kept} if (kept := kept_layers(h.job_dir)) else {}),
            "trials": local_details(trials)}


def kept_layers(job_dir: str) -> list[dict[str, str]]:
    """The copy-on-write layers the job's sandboxed attempts left (a replica's last failed attempt's, kept
    for debugging; those of a controller that died; while it runs, its live attempts' too): what
    ``trials gc`` removes."""
    from trials.controller.process.layers import kept_layers as layers_of
    from trials.printable import printable

    return [{"trial": layer.trial_id, "path": printable(layer.path)} for layer in layers_of(job_dir)]


def suggestions_ahead(meta: JobMeta) -> dict[str, float]:
    """What the sampler's own process did in the job's last controller run (``trials.study.ahead``):
    ``suggestions`` it made, its CPU seconds, the slot seconds spent waiting for it; {} when none ran.
    (The record keeps only finite non-negative numbers: the job's journal is a file the user can edit.)"""
    pairs = (("suggestions", meta.suggestions), ("cpuSeconds", meta.suggest_cpu_s),
             ("slotWaitSeconds", meta.suggest_wait_s))
    return {name: v for name, v in pairs if v is not None}


def suggestions_made_line(meta: JobMeta, trials: Iterable[Any]) -> str | None:
    """``describe``'s line of how the ``trials``' parameters were chosen (by the sampler's model, at random: its
    start-up or a fallback, or given: ``choice.suggestion_counts``), or None when no claim noted it."""
    from trials.study.choice import suggestion_counts, suggestions_words

    return suggestions_words(suggestion_counts(trials), meta.sampler or None)


def suggestions_line(meta: JobMeta) -> str | None:
    """``describe``'s line for :func:`suggestions_ahead`, or None."""
    ahead = suggestions_ahead(meta)
    if not ahead:
        return None
    made = int(ahead.get("suggestions", 0))
    line = f"suggestions made ahead (last run): {made} by the sampler's own process"
    if "cpuSeconds" in ahead:
        line += f", {ahead['cpuSeconds']:.2f} s of its CPU"
    return line + f"; slots waited {ahead.get('slotWaitSeconds', 0.0):.2f} s for them"


def best_trials(h: Job) -> list[Any]:
    """The best SUCCEEDED trial (single metric), or the Pareto front (several metrics)."""
    done = [t for t in h.store.frozen_trials() if t.state.name == "COMPLETE"]
    metrics = h.job.study.metrics
    if len(metrics) == 1:
        best = best_of(done, lambda t: t.values[0], maximize=metrics[0].maximize)
        return [best] if best is not None else []
    return pareto_front(done, lambda t: t.values, [m.maximize for m in metrics])
