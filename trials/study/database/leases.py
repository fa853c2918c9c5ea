"""Many workers on one job in a database: trial leases, heartbeats, a global cap, stale takeover.

Every RUNNING trial has a lease row ``(trial, owner, heartbeat, generation)`` in the table
``trials_leases`` of the job's own database; heartbeats and staleness use the database's clock, so
hosts need not agree on the time. A worker claims under a per-job lock (a PostgreSQL advisory lock;
elsewhere an optimistic re-check), so the job's ``parallelTrialCount`` holds across workers. A
lease whose heartbeat is older than ``stale_after_s`` belongs to a dead worker: another worker
takes it over with a compare-and-set on the generation and runs the trial again, same id and
parameters. Owners renew with ``owner = me``, so a worker that lost its lease learns it at once.
"""

from __future__ import annotations

import contextlib
import functools
import os
import socket
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from typing import Any, TypeVar

from sqlalchemy import exc as sa_exc
from sqlalchemy import text

from trials import protocol
from trials.records import TrialState
from trials.spec import StudySpec
from trials.study.database.outages import Outages
from trials.study.database.rdb import stored_now
from trials.study.optuna_internals import STORED_STATES
from trials.study.storage import RetryingRDBStorage
from trials.study.store import Claimed, JobStore

T = TypeVar("T")

LEASE_TABLE = "trials_leases"
DEFAULT_STALE_AFTER_S = 30.0
# The lease timeout is the job's (stored with it, the same for every worker): never so short that a
# scheduling hiccup of a healthy worker loses its trials. Heartbeats come 6 times per timeout.
MIN_STALE_AFTER_S = 2.0
ADVISORY_LOCK_CLASS = 0x7472  # "tr": first key of pg_advisory_xact_lock(class, study_id)

_NOW_SQL = {
    "postgresql": "EXTRACT(EPOCH FROM CLOCK_TIMESTAMP())",
    "sqlite": "((julianday('now') - 2440587.5) * 86400.0)",
    "mysql": "UNIX_TIMESTAMP(NOW(6))",
}
_RUNNING, _WAITING = STORED_STATES["RUNNING"], STORED_STATES["WAITING"]  # Optuna's trials.state: the state's name
_CREATE = (f"CREATE TABLE IF NOT EXISTS {LEASE_TABLE} (trial_id INTEGER PRIMARY KEY, "
           f"study_id INTEGER NOT NULL, owner VARCHAR(255) NOT NULL, "
           f"heartbeat DOUBLE PRECISION NOT NULL, generation INTEGER NOT NULL)")


@dataclass(frozen=True, slots=True, kw_only=True)
class Lease:
    trial_id: int  # the storage's trial id
    owner: str
    heartbeat: float  # database clock, seconds since the epoch
    generation: int


def worker_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def heartbeat_interval(stale_after_s: float) -> float:
    """Six beats per grace period, between 0.2 s and 5 s."""
    return min(5.0, max(0.2, stale_after_s / 6))


def is_stale(lease: Lease | None, *, db_now: float, stale_after_s: float,
             unleased_for_s: float) -> bool:
    """A lease not renewed for ``stale_after_s``; a RUNNING trial nobody leased for as long."""
    if lease is None:
        return unleased_for_s >= stale_after_s
    return db_now - lease.heartbeat >= stale_after_s


def reconcile(leases: Mapping[int, Lease], *, me: str, held: AbstractSet[int], running: AbstractSet[int],
              claiming: int | None) -> tuple[list[int], list[int]]:
    """(to run, leases to drop): what this worker holds in the database that its job loop does not run.

    A lease of ``me`` on a RUNNING trial the loop was never given (its claim committed, the answer was
    lost) is run; one on a trial no longer RUNNING is dropped. The trial being claimed when the
    connection dropped (``claiming``) is run when it is RUNNING with no lease: nobody else leased it.
    """
    adopt = sorted(tid for tid, lease in leases.items()
                   if lease.owner == me and tid not in held and tid in running)
    drop = sorted(tid for tid, lease in leases.items()
                  if lease.owner == me and tid not in held and tid not in running)
    if claiming is not None and claiming not in held and claiming in running and claiming not in leases:
        adopt.append(claiming)
    return adopt, drop


def takeover_reason(lease: Lease | None, *, db_now: float, me: str) -> str:
    if lease is None:
        return f"no worker held the trial; re-run by {me}"
    return (f"worker {lease.owner} stopped heartbeating ({db_now - lease.heartbeat:.1f}s since its "
            f"last heartbeat); re-run by {me}")


def _lose_answer_if_testing() -> None:
    """Tests only (``TRIALS_TEST_LOSE_CLAIM_ANSWER``): the claim committed, but its answer is lost once."""
    path = os.environ.get(protocol.ENV_TEST_LOSE_CLAIM_ANSWER)
    if not path:
        return
    try:
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))
    except FileExistsError:
        return
    raise sa_exc.OperationalError("COMMIT", {}, ConnectionError(
        f"server closed the connection unexpectedly (test: {protocol.ENV_TEST_LOSE_CLAIM_ANSWER})"))


class SharedJob:
    """One worker's view of a job shared with other workers through a database storage.

    Args:
        store: the job, opened on a database storage (``store.storage.engine`` is used).
        stale_after_s: a trial whose lease was not renewed this long is taken over.
        outages: retries calls through connection outages (None: fail at once).
    """

    def __init__(self, store: JobStore, *, stale_after_s: float = DEFAULT_STALE_AFTER_S,
                 me: str | None = None, outages: Outages | None = None,
                 clock: Callable[[], float] = time.monotonic):
        if not stale_after_s >= MIN_STALE_AFTER_S:
            raise ValueError(f"stale_after_s must be >= {MIN_STALE_AFTER_S}, got {stale_after_s}")
        self.store = store
        if not isinstance(store.storage, RetryingRDBStorage):
            raise TypeError(f"a shared job needs a database storage, got {type(store.storage).__name__}")
        self.engine = store.storage.engine
        self.study_id = store._study_id
        self.me = me or worker_name()
        self.stale_after_s = stale_after_s
        self.heartbeat_s = heartbeat_interval(stale_after_s)
        self.outages = outages
        self.clock = clock
        self.n_waiting = 0
        self.n_running = 0  # in the whole job, at the last claim attempt
        self._unleased: dict[int, float] = {}
        self._held: set[int] = set()  # trials this worker handed to its job loop and still runs
        self._claiming: int | None = None  # the trial whose claim is under way (it may have committed)
        self._last_beat = -float("inf")
        self._now_sql = _NOW_SQL.get(self.engine.dialect.name)
        self._call(self._create_table)

    # -- plumbing
    def _call(self, fn: Callable[..., T], *args: Any) -> T:
        if self.outages is None:
            return fn(*args)
        result: T = self.outages.call(fn, *args)
        return result

    def _create_table(self) -> None:
        try:
            with self.engine.begin() as conn:
                conn.execute(text(_CREATE))
        except (sa_exc.IntegrityError, sa_exc.ProgrammingError):
            # Two workers creating it at once (PostgreSQL's catalog race): it exists now.
            with self.engine.begin() as conn:
                conn.execute(text(f"SELECT 1 FROM {LEASE_TABLE} WHERE 1 = 0"))

    @contextlib.contextmanager
    def _claim_lock(self) -> Iterator[Any]:
        """Serialize count + claim per job across workers; yields the lock's connection (None: no
        real lock, elsewhere than PostgreSQL), whose transaction also writes the claim's lease."""
        if self.engine.dialect.name != "postgresql":
            yield None
            return
        with self.engine.begin() as conn:
            conn.execute(text("SELECT pg_advisory_xact_lock(:a, :b)"),
                         {"a": ADVISORY_LOCK_CLASS, "b": self.study_id})
            yield conn  # released when this transaction ends, or when its connection dies

    def _snapshot(self, conn: Any) -> tuple[set[int], dict[int, Lease], float]:
        """(RUNNING trial ids, their leases and this worker's leases of any other trial, the database's
        clock) in one statement: the claim's view of the job, without reading any trial."""
        now = self._now_sql or ":now"
        sql = (f"SELECT t.trial_id, l.owner, l.heartbeat, l.generation, 1, {now} FROM trials t "
               f"LEFT JOIN {LEASE_TABLE} l ON l.trial_id = t.trial_id "
               f"WHERE t.study_id = :s AND t.state = {_RUNNING} "
               f"UNION ALL SELECT l.trial_id, l.owner, l.heartbeat, l.generation, 0, {now} FROM {LEASE_TABLE} l "
               f"JOIN trials t ON t.trial_id = l.trial_id "
               f"WHERE l.study_id = :s AND l.owner = :o AND t.state <> {_RUNNING} "
               f"UNION ALL SELECT NULL, NULL, NULL, NULL, 0, {now}")
        with self._txn(conn) as c:
            rows = c.execute(text(sql), {"s": self.study_id, "o": self.me, "now": time.time()}).all()
        running = {int(r[0]) for r in rows if r[4]}
        leases = {int(r[0]): Lease(trial_id=int(r[0]), owner=r[1], heartbeat=float(r[2]), generation=int(r[3]))
                  for r in rows if r[0] is not None and r[1] is not None}
        return running, leases, float(rows[-1][5])

    def leases(self, trial_ids: Sequence[int], *, every: bool = False) -> dict[int, Lease]:
        """The leases of ``trial_ids`` (``every``: and this worker's leases of any other trial)."""
        if not trial_ids and not every:
            return {}
        with self.engine.begin() as conn:
            rows = conn.execute(text(
                f"SELECT trial_id, owner, heartbeat, generation FROM {LEASE_TABLE} "
                f"WHERE study_id = :s"), {"s": self.study_id}).all()
        wanted = set(trial_ids)
        return {r[0]: Lease(trial_id=r[0], owner=r[1], heartbeat=float(r[2]), generation=r[3])
                for r in rows if r[0] in wanted or (every and r[1] == self.me)}

    # -- claiming
    def claim(self, study: StudySpec, *, cap: int, params: Mapping[str, Any] | None = None,
              system_attrs: Mapping[str, Any] | None = None) -> Claimed | None:
        """A trial this worker leased but does not run (its claim was cut by an outage), else a stale
        trial to take over, else a WAITING trial if the job runs fewer than ``cap`` (with ``params``
        when they were suggested ahead: see ``JobStore.claim``)."""
        return self._call(self._claim, study, cap, params, system_attrs)

    def _claim(self, study: StudySpec, cap: int, params: Mapping[str, Any] | None = None,
               system_attrs: Mapping[str, Any] | None = None) -> Claimed | None:
        # the claim's own writes (the trial's parameters) go in one transaction after the lock's
        with self.store.batch(), self._claim_lock() as conn:
            running, leases, db_now = self._snapshot(conn)
            self.n_running = len(running)
            claimed = self._reconcile(conn, running, leases, study)
            if claimed is None:
                claimed = self._take_over_one(running, leases, db_now, study)
            fresh = claimed is None
            if fresh:
                self.n_waiting = -1  # unknown: only counted when nothing could be claimed
                if len(running) >= cap:
                    self._claiming = None
                    return None
                move = None if conn is None else functools.partial(self._move_and_lease, conn)
                claimed = self.store.claim(study, before=self._note_claiming, move=move, params=params,
                                           system_attrs=system_attrs)
                if claimed is None:
                    self._claiming = None
                    self.n_waiting = 0
                    return None
                if conn is None:
                    self._acquire(conn, claimed.storage_id)
                self.n_running += 1
        assert claimed is not None  # (each branch without a trial returned above)
        _lose_answer_if_testing()
        # committed, and this worker knows it: from here the job loop runs the trial
        self._claiming = None
        self._held.add(claimed.storage_id)
        if conn is None and fresh and self.store.waiting_running()[1] > cap:
            self.release(claimed.storage_id)  # over the cap after all: give it back
            self.store.requeue(claimed.storage_id)
            return None
        return claimed

    def _note_claiming(self, storage_id: int) -> None:
        self._claiming = storage_id  # its WAITING -> RUNNING may commit although the answer is lost

    def _reconcile(self, conn: Any, running: AbstractSet[int], leases: Mapping[int, Lease],
                   study: StudySpec) -> Claimed | None:
        """Finish a claim an outage cut short: a trial leased to this worker (or being claimed by it)
        that it does not run is run now; its lease on a trial no longer RUNNING is dropped."""
        adopt, drop = reconcile(leases, me=self.me, held=self._held, running=running,
                                claiming=self._claiming)
        for tid in drop:
            self._delete_lease(conn, tid)
        for tid in adopt:
            if not self._lease_for_adoption(conn, tid, leases.get(tid)):
                continue  # another worker's now
            frozen = self.store.storage.get_trial(tid)
            if frozen.user_attrs.get("attempts"):  # it ran before (a takeover whose answer was lost)
                return self.store.reclaim(frozen, study, reason=f"its claim by {self.me} was cut by a "
                                          f"database outage; run by {self.me}")
            return self.store.started(frozen, study)
        return None

    def _lease_for_adoption(self, conn: Any, trial_id: int, lease: Lease | None) -> bool:
        """Renew this worker's lease, or insert it where none is (never over another worker's)."""
        now = self._now_sql or ":now"
        values = {"t": trial_id, "s": self.study_id, "o": self.me, "now": time.time()}
        if lease is not None:
            with self._txn(conn) as c:
                result = c.execute(text(
                    f"UPDATE {LEASE_TABLE} SET heartbeat = {now} WHERE trial_id = :t AND owner = :o"), values)
                return bool(result.rowcount == 1)
        insert = text(f"INSERT INTO {LEASE_TABLE} (trial_id, study_id, owner, heartbeat, generation) "
                      f"VALUES (:t, :s, :o, {now}, 1)")
        try:
            if conn is not None:  # a savepoint: a failed insert must not end the lock's transaction
                with conn.begin_nested():
                    conn.execute(insert, values)
            else:
                with self.engine.begin() as own:
                    own.execute(insert, values)
        except sa_exc.IntegrityError:
            return False  # another worker leased it first
        return True

    def _delete_lease(self, conn: Any, trial_id: int) -> None:
        with self._txn(conn) as c:
            c.execute(text(f"DELETE FROM {LEASE_TABLE} WHERE trial_id = :t AND owner = :o"),
                      {"t": trial_id, "o": self.me})

    @contextlib.contextmanager
    def _txn(self, conn: Any) -> Iterator[Any]:
        """The claim lock's transaction when there is one (its writes commit, or vanish, with it)."""
        if conn is not None:
            yield conn
            return
        with self.engine.begin() as own:
            yield own

    def _take_over_one(self, running: AbstractSet[int], leases: Mapping[int, Lease], db_now: float,
                       study: StudySpec) -> Claimed | None:
        now_mono = self.clock()
        for tid in list(self._unleased):
            if tid not in running or tid in leases:
                del self._unleased[tid]
        for tid in sorted(running):
            lease = leases.get(tid)
            if lease is not None and lease.owner == self.me:
                continue
            if lease is None:
                self._unleased.setdefault(tid, now_mono)
            unleased_for = now_mono - self._unleased.get(tid, now_mono)
            if not is_stale(lease, db_now=db_now, stale_after_s=self.stale_after_s,
                            unleased_for_s=unleased_for):
                continue
            if self._take(tid, lease):
                reason = takeover_reason(lease, db_now=db_now, me=self.me)
                return self.store.reclaim(self.store.storage.get_trial(tid), study, reason=reason,
                                          previous_worker=lease.owner if lease else "")
        return None

    def _take(self, trial_id: int, lease: Lease | None) -> bool:
        """Compare-and-set: only one worker wins a stale trial."""
        if lease is None:
            try:
                with self.engine.begin() as conn:
                    conn.execute(text(
                        f"INSERT INTO {LEASE_TABLE} (trial_id, study_id, owner, heartbeat, generation) "
                        f"VALUES (:t, :s, :o, {self._now_sql or ':now'}, 1)"),
                        {"t": trial_id, "s": self.study_id, "o": self.me, "now": time.time()})
            except sa_exc.IntegrityError:
                return False  # another worker inserted first
            return True
        with self.engine.begin() as conn:
            result = conn.execute(text(
                f"UPDATE {LEASE_TABLE} SET owner = :o, heartbeat = {self._now_sql or ':now'}, "
                f"generation = generation + 1 WHERE trial_id = :t AND generation = :g AND owner = :old"),
                {"o": self.me, "t": trial_id, "g": lease.generation, "old": lease.owner, "now": time.time()})
            return result.rowcount == 1

    def _move_and_lease(self, conn: Any, trial_id: int) -> bool:
        """WAITING -> RUNNING and this worker's lease, in one statement of the claim lock's transaction
        (PostgreSQL): the move and the lease commit together, or neither does."""
        sql = (f"WITH moved AS (UPDATE trials SET state = {_RUNNING}, datetime_start = :start "
               f"WHERE trial_id = :t AND state = {_WAITING} RETURNING trial_id) "
               f"INSERT INTO {LEASE_TABLE} (trial_id, study_id, owner, heartbeat, generation) "
               f"SELECT trial_id, :s, :o, {self._now_sql}, 1 FROM moved ON CONFLICT (trial_id) DO UPDATE "
               f"SET owner = :o, heartbeat = {self._now_sql}, generation = {LEASE_TABLE}.generation + 1")
        result = conn.execute(text(sql), {"t": trial_id, "s": self.study_id, "o": self.me,
                                          "start": stored_now("datetime_start")})
        return bool(result.rowcount == 1)

    def _acquire(self, conn: Any, trial_id: int) -> None:
        """Lease a trial this worker just claimed (WAITING -> RUNNING made it ours alone), in the
        claim lock's transaction: a connection lost before its commit takes the lease with it."""
        now = self._now_sql or ":now"
        values = {"t": trial_id, "s": self.study_id, "o": self.me, "now": time.time()}
        with self._txn(conn) as c:
            if self.engine.dialect.name in ("postgresql", "sqlite"):  # one statement
                c.execute(text(
                    f"INSERT INTO {LEASE_TABLE} (trial_id, study_id, owner, heartbeat, generation) "
                    f"VALUES (:t, :s, :o, {now}, 1) ON CONFLICT (trial_id) DO UPDATE SET owner = :o, "
                    f"heartbeat = {now}, generation = {LEASE_TABLE}.generation + 1"), values)
                return
            result = c.execute(text(
                f"UPDATE {LEASE_TABLE} SET owner = :o, heartbeat = {now}, generation = generation + 1 "
                f"WHERE trial_id = :t"), values)
            if result.rowcount == 0:
                c.execute(text(
                    f"INSERT INTO {LEASE_TABLE} (trial_id, study_id, owner, heartbeat, generation) "
                    f"VALUES (:t, :s, :o, {now}, 1)"), values)

    # -- while running
    def beat_due(self) -> bool:
        return self.clock() - self._last_beat >= self.heartbeat_s

    def beat(self, trial_ids: Sequence[int]) -> list[int]:
        """Renew this worker's leases; returns the trials it no longer owns (taken over)."""
        self._last_beat = self.clock()
        if not trial_ids:
            return []
        return self._call(self._beat, list(trial_ids))

    def _beat(self, trial_ids: list[int]) -> list[int]:
        lost: list[int] = []
        with self.engine.begin() as conn:
            for tid in trial_ids:
                result = conn.execute(text(
                    f"UPDATE {LEASE_TABLE} SET heartbeat = {self._now_sql or ':now'} "
                    f"WHERE trial_id = :t AND owner = :o"), {"t": tid, "o": self.me, "now": time.time()})
                if result.rowcount == 0:
                    lost.append(tid)
        self._held.difference_update(lost)
        return lost

    def owns(self, trial_id: int) -> bool:
        def run() -> bool:
            with self.engine.begin() as conn:
                owner = conn.execute(text(f"SELECT owner FROM {LEASE_TABLE} WHERE trial_id = :t"),
                                     {"t": trial_id}).scalar()
            return bool(owner == self.me)
        return self._call(run)

    def release(self, trial_id: int) -> None:
        """Drop this worker's lease (the trial finished or went back to the queue).

        Inside the store's batch (the trial's end) the lease goes in the batch's transaction, and
        must be this worker's: if another worker took the trial over, nothing of the batch is written
        (:class:`~trials.study.store.NotHeldError`)."""
        sql, binds = f"DELETE FROM {LEASE_TABLE} WHERE trial_id = :t AND owner = :o", {"t": trial_id, "o": self.me}
        self._held.discard(trial_id)
        if self.store.require_in_batch(trial_id, sql, binds):
            return

        def run() -> None:
            with self.engine.begin() as conn:
                conn.execute(text(sql), binds)
        self._call(run)

    # -- job level
    def counts(self) -> tuple[int, int]:
        """(WAITING, RUNNING) trials of the whole job."""
        return self._call(self.store.waiting_running)

    def others_active(self) -> int:
        """RUNNING trials held by other workers whose leases are fresh."""
        def run() -> int:
            running, leases, db_now = self._snapshot(None)
            return sum(1 for tid in running
                       if (lease := leases.get(tid)) is not None and lease.owner != self.me
                       and not is_stale(lease, db_now=db_now, stale_after_s=self.stale_after_s,
                                        unleased_for_s=0.0))
        return self._call(run)

    def requeue_stale(self) -> int:
        """On cancel: send dead workers' trials back to the queue so the job can end."""
        def run() -> int:
            running, leases, db_now = self._snapshot(None)
            n = 0
            for tid in sorted(running):
                lease = leases.get(tid)
                if lease is None or lease.owner == self.me:
                    continue
                if is_stale(lease, db_now=db_now, stale_after_s=self.stale_after_s, unleased_for_s=0.0) \
                        and self._take(tid, lease):
                    with self.store.batch():  # REQUESTED and back in the queue, lease dropped: one transaction
                        self.store.set_trial_attrs(tid, state=TrialState.REQUESTED.value)
                        self.store.requeue(tid)
                        self.release(tid)
                    n += 1
            return n
        return self._call(run)

