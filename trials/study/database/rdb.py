"""SQL on Optuna's database tables for the job loop: one trial without its study, counts by state, a
claim as a compare-and-set, and everything one batch writes to a trial in one transaction.

Optuna's RDBStorage reads a trial in 6 statements (the row, then each of its 5 tables) and writes each
attribute, parameter and step in its own transaction after re-reading the trial row; the job loop
made ~88 statements per trial that way. Here a trial is read in 2 (its row, then one UNION of its
tables) and a batch is written with one statement per table. The functions take an open session;
:class:`trials.study.storage.RetryingRDBStorage` gives them their transaction and outage retries.
"""

from __future__ import annotations

import datetime
import json
import math
from collections.abc import Sequence
from typing import Any

from optuna import distributions
from optuna.exceptions import UpdateFinishedTrialError
from optuna.trial import FrozenTrial, TrialState
from sqlalchemy import Float, Integer, String, Text, cast, func, literal, null, select, text, union_all, update
from sqlalchemy import inspect as sa_inspect
from sqlalchemy.orm import Session

from trials.study.database.writes import NotHeldError as NotHeldError  # re-exported
from trials.study.database.writes import TrialWrite as TrialWrite
from trials.study.database.writes import check_values as check_values
from trials.study.optuna_internals import rdb_models as models

T = models.TrialModel
P, V = models.TrialParamModel, models.TrialValueModel
U, S = models.TrialUserAttributeModel, models.TrialSystemAttributeModel
I = models.TrialIntermediateValueModel  # noqa: E741 - the table of intermediate values
TRIALS: Any = T.__table__


def apply(session: Session, trial_id: int, w: TrialWrite, *, retried: bool) -> None:
    """Write ``w`` (the caller commits). The first statement locks the trial's row and checks it may
    still be written: the state change itself (``RUNNING -> state``), else ``SELECT ... FOR UPDATE``
    (not for a trial the batch claimed: its claim moved it to RUNNING a moment ago, and another worker
    takes a trial over only once its lease went unrenewed for seconds).

    ``retried``: an earlier attempt's answer was lost, so its commit may have landed; a state change
    that finds the trial moved already is then that commit, and nothing is written again.

    Raises:
        UpdateFinishedTrialError: the trial is finished (or no longer RUNNING for a state change).
        NotHeldError: a ``required`` statement changed no row.
    """
    if w.state is not None:
        change: dict[str, Any] = {"state": w.state}
        if w.state.is_finished():
            change["datetime_complete"] = stored_now("datetime_complete")
        moved = _rowcount(session.execute(_move(trial_id, TrialState.RUNNING).values(change)))
        if not moved:
            if retried or w.only_state:
                return
            raise UpdateFinishedTrialError(f"trial {trial_id} is no longer RUNNING and can not be updated")
    elif not w.claimed:
        state = session.execute(select(T.state).where(T.trial_id == trial_id).with_for_update()).scalar()
        if state is None:
            raise KeyError(f"no trial with id {trial_id}")
        if state.is_finished():
            raise UpdateFinishedTrialError(f"trial {trial_id} has already finished and can not be updated")
    if w.params:
        session.execute(P.__table__.insert(), [
            {"trial_id": trial_id, "param_name": name, "param_value": value,
             "distribution_json": distributions.distribution_to_json(dist)}
            for name, (value, dist) in w.params.items()])
    _upsert(session, I, ["trial_id", "step"], [
        dict(zip(("intermediate_value", "intermediate_value_type"),
                 I.intermediate_value_to_stored_repr(v), strict=True), trial_id=trial_id, step=step)
        for step, v in w.steps.items()])
    for model, attrs in ((U, w.user_attrs), (S, w.system_attrs)):
        _upsert(session, model, ["trial_id", "key"], [
            {"trial_id": trial_id, "key": k, "value_json": json.dumps(v)} for k, v in attrs.items()])
    values = w.values
    if w.state is TrialState.PRUNED and values is None:  # Optuna's rule: a pruned trial's value is its last step's
        last = session.execute(select(I.intermediate_value, I.intermediate_value_type)
                               .where(I.trial_id == trial_id).order_by(I.step.desc()).limit(1)).first()
        if last is not None:
            v = I.stored_repr_to_intermediate_value(last[0], last[1])
            values = None if math.isnan(v) else [v]
    if values:
        _upsert(session, V, ["trial_id", "objective"], [
            dict(zip(("value", "value_type"), V.value_to_stored_repr(v), strict=True), trial_id=trial_id,
                 objective=i) for i, v in enumerate(values)])
    for sql, binds in w.required:
        if not _rowcount(session.execute(text(sql), binds)):
            raise NotHeldError(f"trial {trial_id}: {sql.split(' WHERE ')[0]} changed no row")


def _rowcount(result: Any) -> int:
    return int(result.rowcount)  # (a CursorResult: the rows an UPDATE or DELETE changed)


def _upsert(session: Session, model: Any, keys: list[str], rows: list[dict[str, Any]]) -> None:
    """Insert ``rows``, replacing those whose ``keys`` exist: one statement (a multi-row upsert)."""
    if not rows:
        return
    dialect = session.get_bind().dialect.name
    columns = [c for c in rows[0] if c not in keys]
    if dialect in ("postgresql", "sqlite"):
        from sqlalchemy.dialects import postgresql, sqlite

        stmt: Any = (postgresql.insert if dialect == "postgresql" else sqlite.insert)(model).values(rows)
        session.execute(stmt.on_conflict_do_update(index_elements=keys,
                                                   set_={c: stmt.excluded[c] for c in columns}))
        return
    if dialect == "mysql":
        from sqlalchemy.dialects.mysql import insert as mysql_insert

        mstmt = mysql_insert(model).values(rows)
        session.execute(mstmt.on_duplicate_key_update({c: mstmt.inserted[c] for c in columns}))
        return
    for row in rows:  # another database: one row at a time
        existing = session.query(model).filter_by(**{k: row[k] for k in keys}).one_or_none()
        if existing is None:
            session.add(model(**row))
        else:
            for c in columns:
                setattr(existing, c, row[c])
    session.flush()


# -- reads
def claim(session: Session, trial_id: int) -> bool:
    """WAITING -> RUNNING as a compare-and-set: True if this call moved it (one statement)."""
    return bool(_rowcount(session.execute(_move(trial_id, TrialState.WAITING).values(
        state=TrialState.RUNNING, datetime_start=stored_now("datetime_start")))))


def stored_now(column: str) -> Any:
    """Now, as the trials table stores it in ``column``, from the model's own setter (Optuna 5 keeps
    naive UTC behind a property, earlier versions the local time in the column itself)."""
    probe = T()
    setattr(probe, column, datetime.datetime.now())
    key = next(a.key for a in sa_inspect(T).column_attrs if a.columns[0].name == column)
    return getattr(probe, key)


def _move(trial_id: int, old: TrialState) -> Any:
    """An UPDATE of the trial's row if it still is in state ``old`` (through the table: no ORM
    objects to synchronize)."""
    return update(TRIALS).where(TRIALS.c.trial_id == trial_id, TRIALS.c.state == old)


Summary = tuple[str, dict[str, Any], list[tuple[TrialState, dict[str, Any]]]]  # name, attributes, trials


def job_summaries(session: Session, study_keys: Sequence[str], trial_keys: Sequence[str]) -> list[Summary]:
    """Every study's name, its user attributes ``study_keys`` and each trial's state with its user
    attributes ``trial_keys`` (``trials list``: three statements for the whole database, no trial read)."""
    A = models.StudyUserAttributeModel
    names = dict(session.execute(select(models.StudyModel.study_id, models.StudyModel.study_name)).all())
    attrs: dict[int, dict[str, Any]] = {sid: {} for sid in names}
    study_rows: Any = session.execute(select(A.study_id, A.key, A.value_json).where(A.key.in_(list(study_keys))))
    for sid, key, value in study_rows:
        attrs.setdefault(sid, {})[key] = json.loads(value)
    trials: dict[int, tuple[int, TrialState, dict[str, Any]]] = {}
    rows: Any = session.execute(select(T.trial_id, T.study_id, T.state, U.key, U.value_json)
                                .outerjoin(U, (U.trial_id == T.trial_id) & U.key.in_(list(trial_keys))))
    for tid, sid, state, key, value in rows:
        entry = trials.setdefault(tid, (sid, state, {}))
        if key is not None:
            entry[2][key] = json.loads(value)
    by_study: dict[int, list[tuple[TrialState, dict[str, Any]]]] = {sid: [] for sid in names}
    for sid, state, user_attrs in trials.values():
        by_study.setdefault(sid, []).append((state, user_attrs))
    return [(names[sid], attrs.get(sid, {}), by_study.get(sid, [])) for sid in sorted(names)]


def count_states(session: Session, study_id: int) -> dict[TrialState, int]:
    rows = session.execute(select(T.state, func.count(T.trial_id)).where(T.study_id == study_id).group_by(T.state))
    return {state: int(n) for state, n in rows}


def user_attrs_of(session: Session, study_id: int, keys: Sequence[str]) -> dict[int, dict[str, Any]]:
    """{trial number: {key: value}} of the study's trials, only the user attributes ``keys`` (one statement)."""
    out: dict[int, dict[str, Any]] = {}
    for number, key, value in session.execute(select(T.number, U.key, U.value_json).join(T, T.trial_id == U.trial_id)
                                              .where(T.study_id == study_id, U.key.in_(list(keys)))):
        out.setdefault(int(number), {})[key] = json.loads(value)
    return out


def n_sampled(session: Session, study_id: int) -> int:
    """How many of the study's trials have parameters."""
    return int(session.execute(select(func.count(func.distinct(P.trial_id))).join(T, T.trial_id == P.trial_id)
                               .where(T.study_id == study_id)).scalar_one())


def study_user_attrs(session: Session, study_id: int) -> dict[str, Any]:
    """The study's user attributes in one statement (Optuna's reads the study row first)."""
    A = models.StudyUserAttributeModel
    attrs = {k: json.loads(v) for k, v in session.execute(
        select(A.key, A.value_json).where(A.study_id == study_id))}
    if not attrs:
        models.StudyModel.find_or_raise_by_id(study_id, session)  # none, or no such study (KeyError)
    return attrs


def load_trial(session: Session, trial_id: int) -> FrozenTrial:
    """One trial in 2 statements: its row, then its 5 tables in one UNION."""
    row: Any = session.get(T, trial_id)  # (its relationships are not loaded: children reads them at once)
    if row is None:
        raise KeyError(f"no trial with id {trial_id}")
    return frozen_trial(trial_id, number=row.number, state=row.state, start=row.datetime_start,
                        complete=row.datetime_complete, rows=children(session, trial_id))


def children(session: Session, trial_id: int) -> Sequence[Any]:
    """Rows (kind, key, text, number, int, type) of a trial's params, values, attributes and steps."""
    return session.execute(union_all(*_children(lambda model, q: q.where(model.trial_id == trial_id)))).all()


def waiting_with_children(session: Session, study_id: int, *, limit: int) -> list[tuple[int, int, list[Any]]]:
    """(number, trial id, :func:`children` rows) of the first ``limit`` WAITING trials, in one statement."""
    w = (select(T.trial_id, T.number).where(T.study_id == study_id, T.state == TrialState.WAITING)
         .order_by(T.number).limit(limit).subquery())
    members = _children(lambda model, q: q.join(w, w.c.trial_id == model.trial_id), with_id=True)
    rows = session.execute(union_all(*members, select(
        cast(literal("n"), String), *_NONE, cast(null(), Float), w.c.number, _NONE[0], w.c.trial_id))).all()
    by_id: dict[int, list[Any]] = {}
    for r in rows:
        by_id.setdefault(int(r[6]), []).append(r)
    numbers = sorted((int(r[4]), int(r[6])) for r in rows if r[0] == "n")
    return [(n, tid, by_id[tid]) for n, tid in numbers]


_NONE: tuple[Any, ...] = (cast(null(), String), cast(null(), Text))


def _children(where: Any, *, with_id: bool = False) -> list[Any]:
    """The SELECTs of a trial's 5 tables with common columns, each narrowed by ``where(model, select)``."""
    none_s, none_t = _NONE
    none_f, none_i = cast(null(), Float), cast(null(), Integer)

    def member(model: Any, k: str, *columns: Any) -> Any:
        extra = (model.trial_id,) if with_id else ()
        return where(model, select(cast(literal(k), String), *columns, *extra))

    return [
        member(P, "p", P.param_name, P.distribution_json, P.param_value, P.param_id, none_s),
        member(V, "v", none_s, none_t, V.value, V.objective, cast(V.value_type, String)),
        member(U, "u", U.key, U.value_json, none_f, none_i, none_s),
        member(S, "s", S.key, S.value_json, none_f, none_i, none_s),
        member(I, "i", none_s, none_t, I.intermediate_value, I.step, cast(I.intermediate_value_type, String)),
    ]


def frozen_trial(trial_id: int, *, number: int, state: TrialState, start: datetime.datetime | None,
                 complete: datetime.datetime | None, rows: Sequence[Any]) -> FrozenTrial:
    """The FrozenTrial Optuna's ``get_trial`` builds, from :func:`children`'s rows."""
    params = sorted((r for r in rows if r[0] == "p"), key=lambda r: r[4])
    dists = {r[1]: distributions.json_to_distribution(r[2]) for r in params}
    values = {r[4]: V.stored_repr_to_value(r[3], V.TrialValueType[r[5]]) for r in rows if r[0] == "v"}
    return FrozenTrial(
        number=number, state=state, value=None,
        values=[values[i] for i in sorted(values)] if values else None,
        datetime_start=start, datetime_complete=complete,
        params={r[1]: dists[r[1]].to_external_repr(r[3]) for r in params}, distributions=dists,
        user_attrs={r[1]: json.loads(r[2]) for r in rows if r[0] == "u"},
        system_attrs={r[1]: json.loads(r[2]) for r in rows if r[0] == "s"},
        intermediate_values={r[4]: I.stored_repr_to_intermediate_value(r[3], I.TrialIntermediateValueType[r[5]])
                             for r in rows if r[0] == "i"},
        trial_id=trial_id,
    )


