"""The journal read without Optuna: its JSON lines replayed into plain values, with a snapshot.

Optuna's ``JournalStorage`` rebuilds every trial as Optuna objects on open (at 10,000 trials: ~4 s
of ``apply_logs``, after ~0.5 s importing Optuna). A command that only reads a job needs neither:
this module replays the same records by Optuna's own rules (``optuna/storages/journal/_storage.py``:
what a record does, which records are ignored, where a torn tail ends the journal) into
:class:`StoredTrial` values that read like ``FrozenTrial`` for what the commands use.

It is never a second source of truth. The snapshot (``journal.log.snapshot`` beside the journal) is
the replay of a prefix of the journal, kept as :mod:`trials.study.journal.cache` keeps a file: used
only while the journal still starts with exactly those bytes (a journal rewritten behind its back, by
``trials repair`` or by hand, is replayed again from its start), and only the tail after it is read;
one that is torn, truncated, foreign or of another version is ignored and written again. It has two
parts: a lean one, where each trial finished when it was made is *slim* (what the tables read:
``read_journal(whole=False)``) and every other trial whole, then the finished trials whole. A record
after the snapshot can change only the trials the lean part holds whole: Optuna ignores any record
about a finished trial, so a slim trial is what the journal holds of it for as long as the prefix holds.

Anything this replay does not read exactly as Optuna would (a distribution it does not know, a
record Optuna would refuse, a corrupt line inside the journal) raises :class:`Unsupported`: the caller
then opens the journal with Optuna, which reads it (or reports it) as it always did.
"""

from __future__ import annotations

import contextlib
import datetime
import enum
import gc
import io
import json
import os
import sys
from collections.abc import Callable, Container, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from trials.records import is_live_attr
from trials.study.journal import cache as journal_cache
from trials.study.optuna_internals import JournalOp as Op

# a snapshot is written when this many records were replayed after the last one (or after none)
SNAPSHOT_AFTER_RECORDS = 2000


class Unsupported(Exception):
    """The journal holds something this replay does not read exactly as Optuna does: use Optuna."""


class StoredState(enum.IntEnum):
    """Optuna's ``TrialState``, same names and numbers (the journal stores the number)."""

    RUNNING = 0
    COMPLETE = 1
    PRUNED = 2
    FAIL = 3
    WAITING = 4

    def is_finished(self) -> bool:
        return self in (StoredState.COMPLETE, StoredState.PRUNED, StoredState.FAIL)


@dataclass(slots=True, eq=False)
class StoredTrial:
    """One trial as the journal holds it; reads like Optuna's ``FrozenTrial`` where the commands read."""

    storage_id: int
    study_id: int
    number: int
    state: StoredState
    params: dict[str, Any] = field(default_factory=dict)
    distributions: dict[str, str] = field(default_factory=dict)  # Optuna's distribution JSON, per param
    values: list[float] | None = None
    intermediate_values: dict[int, float] = field(default_factory=dict)
    user_attrs: dict[str, Any] = field(default_factory=dict)
    system_attrs: dict[str, Any] = field(default_factory=dict)
    datetime_start: str | None = None
    datetime_complete: str | None = None
    slim: bool = False  # read slim from the snapshot (``read_journal(whole=False)``): steps counted, not kept

    @property
    def _trial_id(self) -> int:  # FrozenTrial's name for the storage id
        return self.storage_id

    @property
    def value(self) -> float | None:
        if self.values is None:
            return None
        if len(self.values) > 1:
            raise RuntimeError("This attribute is not available during multi-objective optimization.")
        return self.values[0]


@dataclass(slots=True)
class StoredStudy:
    study_id: int
    name: str
    directions: list[int]
    user_attrs: dict[str, Any] = field(default_factory=dict)
    system_attrs: dict[str, Any] = field(default_factory=dict)


# --- distributions: Optuna's constructors' checks and external values, for the names Optuna writes ---
_FLOAT, _INT, _CATEGORICAL = "FloatDistribution", "IntDistribution", "CategoricalDistribution"
_ATTRIBUTES = {_FLOAT: {"low", "high", "log", "step"}, _INT: {"low", "high", "log", "step"},
               _CATEGORICAL: {"choices"}}


def _parse_distribution(text: Any) -> tuple[str, tuple[Any, ...]]:
    """(kind, choices) of a distribution's JSON, checked as Optuna's constructor checks it."""
    try:
        d = json.loads(text)
        kind, attrs = d["name"], d["attributes"]
        if kind not in _ATTRIBUTES or not set(attrs) <= _ATTRIBUTES[kind] or "NaN" in text or "Infinity" in text:
            raise Unsupported(f"distribution {text!r}")
        if kind == _CATEGORICAL:
            choices = tuple(attrs["choices"])
            if not choices or not all(c is None or isinstance(c, bool | int | float | str) for c in choices):
                raise Unsupported(f"distribution {text!r}")
            return kind, choices
        low, high, log = attrs["low"], attrs["high"], attrs.get("log", False)
        step = attrs.get("step", None if kind == _FLOAT else 1)
        if not (isinstance(low, int | float) and isinstance(high, int | float) and low <= high
                and log in (True, False) and (step is None or (isinstance(step, int | float) and step > 0))):
            raise Unsupported(f"distribution {text!r}")
        if kind == _FLOAT and (log and (step is not None or low <= 0)):
            raise Unsupported(f"distribution {text!r}")
        if kind == _INT and (step is None or (log and (step != 1 or low < 1))):
            raise Unsupported(f"distribution {text!r}")
        return kind, ()
    except Unsupported:
        raise
    except Exception as err:  # noqa: BLE001 - whatever Optuna would refuse, it refuses itself
        raise Unsupported(f"distribution {text!r}: {err}") from None


def _external(parsed: tuple[str, tuple[Any, ...]], internal: Any) -> Any:
    """Optuna's ``to_external_repr``: a float as stored, an int, a categorical's choice."""
    kind, choices = parsed
    if kind == _FLOAT:
        return internal
    if kind == _INT:
        return int(internal)
    return choices[int(internal)]


# --- the replay ---------------------------------------------------------------------------------------
class Replay:
    """Studies and trials from journal records, by Optuna's ``JournalStorageReplayResult`` rules
    (this reader writes nothing, so no record is ever its own)."""

    def __init__(self) -> None:
        self.n_records = 0
        self.n_bytes = 0
        self.studies: dict[int, StoredStudy] = {}
        self.trials: list[StoredTrial] = []
        self.study_trials: dict[int, list[int]] = {}
        self.next_study_id = 0
        # per study, per param name: the distribution JSON of its first trial with that param
        self.first_distribution: dict[int, dict[str, str]] = {}
        self._parsed: dict[str, tuple[str, tuple[Any, ...]]] = {}
        self.whole = True  # every trial whole (else the snapshot's finished ones are slim: ``read_journal``)

    def distribution(self, text: str) -> tuple[str, tuple[Any, ...]]:
        parsed = self._parsed.get(text)
        if parsed is None:
            parsed = self._parsed[text] = _parse_distribution(text)
        return parsed

    def apply(self, records: Iterable[dict[str, Any]]) -> None:
        try:
            for log in records:
                self.n_records += 1
                self._apply(log)
        except Unsupported:
            raise
        except Exception as err:  # noqa: BLE001 - a record Optuna's replay would fail on
            raise Unsupported(f"record {self.n_records}: {type(err).__name__}: {err}") from None

    def _apply(self, log: dict[str, Any]) -> None:
        op = log["op_code"]  # (the most frequent records first: a journal is mostly attributes and steps)
        if op == Op.SET_TRIAL_USER_ATTR or op == Op.SET_TRIAL_SYSTEM_ATTR:
            user = op == Op.SET_TRIAL_USER_ATTR
            attr = log["user_attr" if user else "system_attr"]
            if len(attr) != 1:
                raise Unsupported("a trial attribute record of more than one key")
            t = self._updatable(log["trial_id"])
            if t is not None:
                (t.user_attrs if user else t.system_attrs).update(attr)
        elif op == Op.SET_TRIAL_INTERMEDIATE_VALUE:
            t = self._updatable(log["trial_id"])
            if t is not None:
                t.intermediate_values[log["step"]] = log["intermediate_value"]
        elif op == Op.SET_TRIAL_STATE_VALUES:
            t = self._updatable(log["trial_id"])
            if t is None:
                return
            state = StoredState(log["state"])
            if state == t.state == StoredState.RUNNING:
                return  # taken by another process already
            if state == StoredState.RUNNING:
                t.datetime_start = _checked_time(log["datetime_start"])
            if state.is_finished():
                t.datetime_complete = _checked_time(log["datetime_complete"])
            t.state = state
            if log["values"] is not None:
                t.values = list(log["values"])
        elif op == Op.SET_TRIAL_PARAM:
            self._set_param(log)
        elif op == Op.CREATE_TRIAL:
            self._create_trial(log)
        elif op == Op.CREATE_STUDY:
            name = log["study_name"]
            directions = list(log["directions"])
            if not all(type(d) is int and d in (0, 1, 2) for d in directions):  # StudyDirection's values
                raise Unsupported(f"directions {directions}")
            if any(s.name == name for s in self.studies.values()):
                return
            sid = self.next_study_id
            self.next_study_id += 1
            self.studies[sid] = StoredStudy(study_id=sid, name=name, directions=directions)
            self.study_trials[sid] = []
            self.first_distribution[sid] = {}
        elif op == Op.DELETE_STUDY:
            self.studies.pop(log["study_id"], None)
        elif op == Op.SET_STUDY_USER_ATTR or op == Op.SET_STUDY_SYSTEM_ATTR:
            study = self.studies.get(log["study_id"])
            user = op == Op.SET_STUDY_USER_ATTR
            attr = log["user_attr" if user else "system_attr"]
            if len(attr) != 1:
                raise Unsupported("a study attribute record of more than one key")
            if study is not None:
                (study.user_attrs if user else study.system_attrs).update(attr)
        elif op == Op.DISCARD_TRIALS:  # Rustuna's, ignored by Optuna
            return
        else:
            raise Unsupported(f"op_code {op!r}")

    def _create_trial(self, log: dict[str, Any]) -> None:
        sid = log["study_id"]
        if sid not in self.studies:
            return
        distributions = dict(log.get("distributions", {}))
        params = {k: _external(self.distribution(distributions[k]), p) for k, p in log.get("params", {}).items()}
        for k in distributions:
            self.distribution(distributions[k])
        value, values = log.get("value"), log.get("values")
        if value is not None and values is not None:
            raise Unsupported("a trial created with both value and values")
        trial = StoredTrial(
            storage_id=len(self.trials), study_id=sid, number=len(self.study_trials[sid]),
            state=StoredState(log.get("state", StoredState.RUNNING.value)), params=params,
            distributions=distributions, values=[value] if value is not None else (
                list(values) if values is not None else None),
            intermediate_values={int(k): v for k, v in log.get("intermediate_values", {}).items()},
            user_attrs=dict(log.get("user_attrs", {})), system_attrs=dict(log.get("system_attrs", {})),
            datetime_start=_checked_time(log["datetime_start"]),
            datetime_complete=_checked_time(log["datetime_complete"]) if "datetime_complete" in log else None)
        self.trials.append(trial)
        self.study_trials[sid].append(trial.storage_id)
        first = self.first_distribution[sid]
        for k in params:
            first.setdefault(k, distributions[k])

    def _set_param(self, log: dict[str, Any]) -> None:
        t = self._updatable(log["trial_id"])
        if t is None:
            return
        name, text = log["param_name"], log["distribution"]
        if not isinstance(text, str):
            raise Unsupported("a distribution that is not JSON text")
        parsed = self.distribution(text)
        first = self.first_distribution[t.study_id]
        if name in first and first[name] != text:  # Optuna may refuse it as incompatible: let it judge
            raise Unsupported(f"parameter {name!r} with another distribution than its first trial's")
        first.setdefault(name, text)
        t.params[name] = _external(parsed, log["param_value_internal"])
        t.distributions[name] = text

    def _updatable(self, trial_id: Any) -> StoredTrial | None:
        if type(trial_id) is not int:  # Optuna looks it up in a dict (1.0 finds trial 1): let it
            raise Unsupported(f"trial id {trial_id!r}")
        if not 0 <= trial_id < len(self.trials):
            return None  # Optuna ignores a record of another process about a trial it has not seen
        t = self.trials[trial_id]
        return None if t.state.is_finished() else t

    # --- reading it
    def study_id(self, name: str) -> int | None:
        return next((s.study_id for s in self.studies.values() if s.name == name), None)

    def study_trials_of(self, study_id: int, states: Container[int] | None = None) -> list[StoredTrial]:
        ids = self.study_trials[study_id]
        return [self.trials[i] for i in ids if states is None or self.trials[i].state in states]


def _checked_time(text: Any) -> str | None:
    """An ISO time as stored (Optuna parses it: a bad one fails its replay, so it fails this one)."""
    if text is None:
        return None
    datetime.datetime.fromisoformat(text)
    return str(text)


def read_records(path: str, offset: int) -> tuple[list[dict[str, Any]], int]:
    """The journal's records after byte ``offset``, by ``JournalFileBackend.read_logs``'s rules, and
    the byte offset after the last one read.

    Only complete lines count (a torn last line is a write in progress); a line that is not JSON ends
    the journal when it is the last one, and makes it corrupt (:class:`Unsupported`) when more follow.
    """
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if size < offset:
            raise Unsupported("the journal is shorter than the offset")
        f.seek(offset)
        data = f.read(size - offset)
    records: list[dict[str, Any]] = []
    end = offset
    bad = None
    for line in io.BytesIO(data):
        if bad is not None:
            raise Unsupported(f"an unreadable line at byte {end}: {bad}")
        if not line.endswith(b"\n"):
            break  # torn tail
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError as err:
            bad = err
            continue
        except Exception as err:  # noqa: BLE001 - not UTF-8, ...: Optuna fails at once, and says so itself
            raise Unsupported(f"an unreadable line at byte {end}: {err}") from None
        end += len(line)
    return records, end


# --- the snapshot -------------------------------------------------------------------------------------
def _whole(t: StoredTrial) -> tuple[Any, ...]:
    return (t.study_id, int(t.state), t.params, t.distributions, t.values, list(t.intermediate_values.items()),
            t.user_attrs, t.system_attrs, t.datetime_start, t.datetime_complete)


# what a slim trial leaves out of its attributes: the bulk of a finished trial, read by no table
SLIM_DROPPED = frozenset({"attempts", "previous_measurements"})


def _slim(t: StoredTrial) -> tuple[Any, ...]:
    """A finished trial as the tables read it (``describe``'s table and CSV, ``best``, ``list``): its
    number, state, parameters, values and attributes, without its steps' contents (its stored
    ``measurements`` become as many ``None``: the tables count them), the attempts, the measurements
    of an earlier run, all but the first line of its error detail, its distributions and times."""
    a = t.user_attrs
    steps = a.get("measurements")
    ivs: list[Any] | None = None
    if isinstance(steps, list):
        attrs = {sys.intern(k): v for k, v in a.items()
                 if k not in SLIM_DROPPED and k != "measurements" and not is_live_attr(k)}
        attrs["measurements"] = [None] * len(steps)
    else:  # (the steps are counted from the intermediate values: kept)
        attrs = {sys.intern(k): v for k, v in a.items() if k not in SLIM_DROPPED}
        ivs = list(t.intermediate_values.items())
    detail = attrs.get("error_detail")
    if isinstance(detail, list):
        attrs["error_detail"] = detail[:1]
    return (int(t.state), {sys.intern(k): v for k, v in t.params.items()}, t.values, attrs, t.system_attrs, ivs)


def _dump_lean(r: Replay) -> dict[str, Any]:
    """The replay as a snapshot's lean part: studies, each finished trial slim, the others whole
    (a record after the snapshot changes only those: Optuna ignores one about a finished trial)."""
    return {
        "next_study_id": r.next_study_id,
        "studies": [(s.study_id, s.name, s.directions, s.user_attrs, s.system_attrs) for s in r.studies.values()],
        "study_trials": list(r.study_trials.items()),
        "first_distribution": list(r.first_distribution.items()),
        "trials": [(t.study_id, _slim(t), None) if t.state.is_finished() else (t.study_id, None, _whole(t))
                   for t in r.trials],
    }


def _dump_whole(r: Replay) -> list[tuple[Any, ...]]:
    """The snapshot's whole part: every finished trial whole, in storage id order."""
    return [_whole(t) for t in r.trials if t.state.is_finished()]


def _load(header: dict[str, Any], d: dict[str, Any], whole: list[tuple[Any, ...]] | None) -> Replay:
    r = Replay()
    r.n_bytes, r.n_records, r.next_study_id = header["n_bytes"], header["n_records"], d["next_study_id"]
    r.studies = {sid: StoredStudy(study_id=sid, name=n, directions=dirs, user_attrs=u, system_attrs=s)
                 for sid, n, dirs, u, s in d["studies"]}
    r.study_trials = dict(d["study_trials"])
    r.first_distribution = dict(d["first_distribution"])
    numbers: dict[int, int] = {}
    for ids in r.study_trials.values():
        numbers.update((tid, n) for n, tid in enumerate(ids))
    finished = iter(whole) if whole is not None else None
    trials: list[StoredTrial] = []
    append = trials.append
    for i, (sid, slim, full) in enumerate(d["trials"]):
        if full is None and finished is not None:
            full = next(finished)
        if full is not None:
            _, state, params, dists, values, ivs, u, s, start, end = full
            append(StoredTrial(i, sid, numbers[i], _STATES[state], params, dists, values, dict(ivs), u, s, start, end))
        else:
            state, params, values, u, s, ivs = slim
            append(StoredTrial(i, sid, numbers[i], _STATES[state], params, {}, values,
                               dict(ivs) if ivs else {}, u, s, None, None, True))
    if finished is not None and next(finished, None) is not None:
        raise ValueError("a snapshot whose parts disagree")
    r.trials = trials
    r.whole = whole is not None
    return r


_STATES = {s.value: s for s in StoredState}


def snapshot_path(journal: str) -> str:
    return journal_cache.cache_path(journal, journal_cache.SNAPSHOT)


def _current_header(journal: str) -> dict[str, Any] | None:
    """The snapshot's header when it is of this journal's current prefix; else None."""
    try:
        kept = journal_cache.open_current(journal, journal_cache.SNAPSHOT)
    except journal_cache.NotCurrent:
        return None
    if kept is None:
        return None
    with kept:
        return kept.header


def load_snapshot(journal: str, *, whole: bool = True) -> Replay | None:
    """The snapshot's replay when it is of this journal's current prefix; else None (it is ignored).
    ``whole=False``: its finished trials slim (see ``read_journal``)."""
    try:
        return _read_snapshot(journal, whole=lambda _: whole)
    except Exception:  # noqa: BLE001 - torn, truncated, foreign or unreadable: replay from the start
        return None


def _read_snapshot(journal: str, whole: Callable[[int], bool]) -> Replay | None:
    """The replay in the journal's snapshot (None: there is none): its lean part, and its whole part
    too when ``whole(n_bytes it covers)`` says so.

    Raises:
        journal_cache.NotCurrent: it is not of the journal's current prefix (or torn, foreign, ...);
            anything else a damaged one raises (a part of another shape).
    """
    kept = journal_cache.open_current(journal, journal_cache.SNAPSHOT)
    if kept is None:
        return None
    with kept:
        lean = kept.part()
        return _load(kept.header, lean, kept.part() if whole(kept.n_bytes) else None)


def write_snapshot(journal: str, r: Replay, summaries: dict[str, Any] | None = None) -> None:
    """Write the snapshot of ``r`` (replayed whole up to ``r.n_bytes``) atomically: its header (with
    ``summaries``), its lean part, its whole part; a job folder this process cannot write keeps its
    old one (reading never needs to write)."""
    if not r.whole:
        raise ValueError("a snapshot is written of a whole replay only")
    journal_cache.write(journal, journal_cache.SNAPSHOT, r.n_bytes, [_dump_lean(r), _dump_whole(r)],
                        n_records=r.n_records, summaries=summaries)


Summarize = Callable[["Replay"], dict[str, Any]]


def read_journal(journal: str, *, snapshot: bool = True, summarize: Summarize | None = None,
                 write_after: int | None = None, whole: bool = True, write: bool = True,
                 stale_ok: bool = True) -> Replay:
    """The whole journal replayed: from its snapshot when that still holds, then its tail.

    Args:
        journal: the journal file.
        snapshot: read and write its snapshot (else replay it all, as for a test's reference).
        summarize: ``replay -> {study name: plain value}``, stored in the snapshot's header when one
            is written (``read_summaries`` returns it from there).
        write_after: write the snapshot when at least this many records were replayed after it
            (default ``SNAPSHOT_AFTER_RECORDS``).
        whole: every trial whole; ``False`` for a table (``describe``'s, ``best``, ``list``): the
            trials that were finished when the snapshot was made come slim from it (``_slim``: no
            steps' contents, no attempts), read in a tenth of the time. A finished trial never
            changes (Optuna ignores any record about it), so what a slim trial holds is what the
            journal holds; trials the tail changes or adds are whole.
        write: ``False``: never write the snapshot (a reader that must leave the job folder as it is).
        stale_ok: ``False``: a snapshot that is there but not of this journal's current prefix (stale,
            torn, foreign, unreadable) raises :class:`Unsupported` instead of being replayed around
            (without any snapshot the journal is still replayed from its start).

    Raises:
        Unsupported: the journal holds what only Optuna reads exactly (open it with Optuna); with
            ``stale_ok=False``, its snapshot is not current.
        OSError: the journal cannot be read.
    """
    after = SNAPSHOT_AFTER_RECORDS if write_after is None else write_after
    with _no_collection():
        r: Replay | None = None
        records: list[dict[str, Any]] = []
        end = 0
        if snapshot:
            # the tail is read before deciding: a long one means the snapshot is written again
            def needs_whole(n_bytes: int) -> bool:
                nonlocal records, end
                records, end = read_records(journal, n_bytes)
                return whole or (write and len(records) >= after)

            try:
                r, stale = _read_snapshot(journal, needs_whole), False  # (none: the journal replayed whole)
            except Exception:  # noqa: BLE001 - stale, torn, foreign or unreadable: replay from the start
                r, stale = None, True
            if stale and not stale_ok:
                raise Unsupported("the journal's snapshot is not of its current prefix (stale, torn or foreign)")
        if r is None:
            r = Replay()
            records, end = read_records(journal, 0)
        since = r.n_records
        r.apply(records)
        r.n_bytes = end
        if snapshot and write and r.whole and r.n_records - since >= after:
            write_snapshot(journal, r, summarize(r) if summarize is not None else None)
    return r


def read_summaries(journal: str, summarize: Summarize) -> dict[str, Any]:
    """``summarize`` of the whole journal: from the snapshot's header alone while the snapshot covers
    the whole journal (same prefix, no record after it), else of the journal read with its
    finished trials slim (``summarize`` reads only what a slim trial holds); without a current
    snapshot, one is written (so the next summary is read from the header alone).

    Raises:
        Unsupported, OSError: as ``read_journal``.
    """
    header = _current_header(journal)
    if header is not None and isinstance(header.get("summaries"), dict):
        records, _ = read_records(journal, header["n_bytes"])
        if not records:
            return dict(header["summaries"])
    if header is None:  # replayed from the start: the snapshot written with its header
        return summarize(read_journal(journal, summarize=summarize, write_after=1))
    return summarize(read_journal(journal, summarize=summarize, whole=False))


@contextlib.contextmanager
def _no_collection() -> Iterator[None]:
    """The cyclic garbage collector off while a journal is read, and what was read moved out of its
    sight (``gc.freeze``): a replay makes millions of small values and no cycle, and the collector's
    passes over them, during the read and after it in whatever the command did next, took most of
    a command's time (measured on a 10,000-trial snapshot: loading it 0.80 s with them, 0.29 s
    without). Values still go when nothing refers to them."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        if was:
            gc.enable()
