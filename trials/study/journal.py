"""Optuna's JournalStorage over a job's journal file: opened from a snapshot of its replay, and several
journal operations written as one.

A command that writes a job (``resume``, ``sweep`` into an existing job, ``cancel``) needs Optuna's
``JournalStorage``, and opening it replays every record (a 10,000-trial journal: seconds). Optuna
supports starting from a snapshot of its replay (``BaseJournalSnapshot``, used by its Redis
backend): the storage restores it and reads the records after it. :class:`SnapshotBackend` gives it one kept
beside the journal (``journal.log.optuna``), named, like the lean replay's, by the length and hash of
the journal prefix it is the replay of: it is used only while the journal still starts with exactly
those bytes, and a torn, foreign or stale one is ignored (the journal is replayed whole) and
written again. Its pickle is read by an unpickler that makes only Optuna's trial and study types
and builtins, so a file put there runs nothing.

Optuna writes (and fsyncs) each operation alone; :func:`append` and :func:`one_write` reach into its
JournalStorage to write several at once, used only when its internals are exactly as expected
(otherwise the callers fall back to the public setters).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import pickle
from collections.abc import Iterator, Sequence
from typing import Any, TypeGuard

import optuna
from optuna.storages import BaseStorage, JournalStorage
from optuna.storages.journal import JournalFileBackend

from trials.study import optuna_internals as internals
from trials.study.optuna_internals import BaseJournalSnapshot, JournalStorageReplayResult

try:  # the journal's operation codes
    from trials.study.optuna_internals import JournalOperation

    INTERMEDIATE_VALUE = int(JournalOperation.SET_TRIAL_INTERMEDIATE_VALUE)
    USER_ATTR = int(JournalOperation.SET_TRIAL_USER_ATTR)
except (ImportError, AttributeError):  # another Optuna layout: use the public setters
    INTERMEDIATE_VALUE = USER_ATTR = -1

# --- opening: from Optuna's snapshot ------------------------------------------------------------------------
SUFFIX = ".optuna"
FORMAT = 2  # 2: the prefix named by its CRC-32 (replay.prefix_hash)
_ALLOWED = {("builtins", "set"), ("builtins", "frozenset"), ("datetime", "datetime"), ("datetime", "timezone"),
            ("datetime", "timedelta"), ("copyreg", "_reconstructor"), ("builtins", "object")}


class _OptunaUnpickler(pickle.Unpickler):
    """Only Optuna's own value types (trials, studies, distributions, states) and plain values."""

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in _ALLOWED or module.startswith(internals.SNAPSHOT_MODULES):
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"a snapshot names {module}.{name}")


def snapshot_path(journal: str) -> str:
    return journal + SUFFIX


class SnapshotBackend(JournalFileBackend, BaseJournalSnapshot):
    """``JournalFileBackend`` whose ``load_snapshot`` is the journal's Optuna snapshot, when it holds."""

    def __init__(self, file_path: str, **kwargs: Any) -> None:
        super().__init__(file_path, **kwargs)
        self.n_restored = 0  # records the restored snapshot covered (0: none, replayed from the start)

    def load_snapshot(self) -> bytes | None:
        from trials.study import replay  # (a journal job's writes need none of it)

        path = internals.file_path(self)
        try:
            with open(snapshot_path(path), "rb") as f:
                header = pickle.load(f)  # plain values: a dict of ints and a str
                if not (isinstance(header, dict) and header.get("format") == FORMAT):
                    return None
                n_bytes, n_records = int(header["n_bytes"]), int(header["n_records"])
                if os.stat(path).st_size < n_bytes or replay.prefix_hash(path, n_bytes) != header["digest"]:
                    return None  # the journal was rewritten (or truncated) since
                body = f.read()
        except Exception:  # noqa: BLE001 - missing, torn, foreign or unreadable: replay from the start
            return None
        internals.log_offsets(self)[n_records] = n_bytes  # its tail is read from there, not line by line
        self.n_restored = n_records
        return body

    def save_snapshot(self, snapshot: bytes) -> None:
        """Optuna saves one only when a study is made (every 100th): ``write_snapshot`` does it here."""


class SnapshotStorage(JournalStorage):
    """``JournalStorage`` restoring its snapshot through ``_OptunaUnpickler`` (Optuna's own restore
    unpickles anything), once; what follows is Optuna's ``restore_replay_result``."""

    def restore_replay_result(self, snapshot: bytes) -> None:
        try:
            r = _OptunaUnpickler(io.BytesIO(snapshot)).load()
        except Exception:  # noqa: BLE001 - torn, foreign: replayed from the start
            r = None
        if not isinstance(r, JournalStorageReplayResult):
            backend = internals.journal_backend(self)
            internals.forget_offsets(backend)
            backend.n_restored = 0  # type: ignore[attr-defined]
            return
        internals.adopt_replay_result(self, r)


def write_snapshot(storage: JournalStorage, backend: SnapshotBackend) -> None:
    """Write the snapshot of ``storage``'s replay so far (atomically; a folder this process cannot
    write keeps the old one)."""
    from trials.study import replay

    result = internals.replay_result(storage)
    n_records = result.log_number_read
    n_bytes = internals.log_offsets(backend).get(n_records)
    if n_bytes is None:
        return
    journal = internals.file_path(backend)
    path = snapshot_path(journal)
    tmp = f"{path}.{os.getpid()}.tmp"
    try:
        with open(tmp, "wb") as f:
            pickle.dump({"format": FORMAT, "n_bytes": n_bytes, "n_records": n_records,
                         "digest": replay.prefix_hash(journal, n_bytes)}, f)
            pickle.dump(result, f, protocol=pickle.HIGHEST_PROTOCOL)
        os.replace(tmp, path)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(tmp)


def open_journal(path: str, **kwargs: Any) -> JournalStorage:
    """Optuna's storage of the journal at ``path``: from its snapshot and the records after it; the
    snapshot is written again when many records were replayed after it."""
    from trials.study import replay

    backend = SnapshotBackend(path, **kwargs)
    storage = SnapshotStorage(backend)
    if internals.replay_result(storage).log_number_read - backend.n_restored >= replay.SNAPSHOT_AFTER_RECORDS:
        write_snapshot(storage, backend)
    return storage


# --- writing: several operations at once --------------------------------------------------------------------
def _is_journal(storage: BaseStorage) -> TypeGuard[optuna.storages.JournalStorage]:
    """Optuna's JournalStorage, or a subclass that writes as it does (``SnapshotStorage`` only changes
    how it opens): a subclass seen as foreign silently lost the one-write guarantee."""
    cls = type(storage)
    return isinstance(storage, optuna.storages.JournalStorage) and all(
        getattr(cls, name) is getattr(optuna.storages.JournalStorage, name) for name in internals.JOURNAL_WRITE_PATH)


def append(storage: BaseStorage, records: Sequence[tuple[int, dict[str, Any]]]) -> bool:
    """Write several journal operations with one lock, one write and one fsync; False if it cannot.

    Optuna's JournalStorage writes (and fsyncs) each operation alone; its backend takes a list.
    This takes the same two steps each public setter takes. Measured on the controller benchmark:
    ~27 journal writes per trial, each 0.5-1 ms.
    """
    if not records:
        return True
    if not _is_journal(storage) or USER_ATTR < 0 or not internals.has_internals(storage, "JournalStorage"):
        return False
    with internals.thread_lock(storage):
        worker_id = internals.replay_result(storage).worker_id
        internals.journal_backend(storage).append_logs(
            [{"op_code": op, "worker_id": worker_id, **fields} for op, fields in records])
        internals.sync_with_backend(storage)
    return True


class _Deferred:
    """Stands in for a JournalFileBackend inside :func:`one_write`: writes are kept (and replayed in
    memory at once), then reach the file together."""

    def __init__(self, inner: JournalFileBackend, n_in_file: int):
        self.inner = inner
        self.n_in_file = n_in_file
        self.pending: list[dict[str, Any]] = []

    def read_logs(self, log_number_from: int) -> Iterator[dict[str, Any]]:
        return iter(self.pending[max(0, log_number_from - self.n_in_file):])

    def append_logs(self, logs: list[dict[str, Any]]) -> None:
        self.pending.extend(logs)

    def flush(self) -> bool:
        """Append the kept records with one lock, one write and one fsync. False when another process
        appended since the block read the journal (its records are before these in the file, not in
        this storage's replay: the caller replays the file again)."""
        if not self.pending:
            return True
        lines = [(json.dumps(log, separators=(",", ":")) + "\n").encode("utf-8") for log in self.pending]
        with internals.get_lock_file(internals.file_lock(self.inner)), \
                open(internals.file_path(self.inner), "ab") as f:
            start = f.seek(0, os.SEEK_END)
            f.write(b"".join(lines))
            f.flush()
            os.fsync(f.fileno())
        offsets = internals.log_offsets(self.inner)  # where each record starts: the next read seeks there
        if start != offsets.get(self.n_in_file):
            return False
        for i, line in enumerate(lines, start=self.n_in_file):
            offsets[i + 1] = offsets[i] + len(line)
        return True


@contextlib.contextmanager
def one_write(storage: BaseStorage) -> Iterator[None]:
    """Every journal write inside the block reaches the file at its end: one lock, one write, one fsync.

    Inside, the storage sees its own writes at once (they are replayed in memory as they are made).
    The journal's file lock is taken only for the write: a block that stalls (a stopped or starved
    controller) never holds off other processes, which Optuna's lock would let break it as stale after
    its grace period. When another process appended meanwhile, the storage replays the file again
    after the write, so its state follows the records' order in the file. Use it for short runs of
    writes such as a claim (RUNNING, each suggested parameter, the trial's attributes). Any other
    storage, or an Optuna whose journal internals differ: the block changes nothing.
    """
    if not _is_journal(storage) or not internals.has_internals(storage, "JournalStorage"):
        yield
        return
    backend = internals.journal_backend(storage)
    if isinstance(backend, _Deferred):  # already inside a block: its end writes
        yield
        return
    if (not isinstance(backend, JournalFileBackend) or type(backend).append_logs is not JournalFileBackend.append_logs
            or not internals.has_internals(backend, "JournalFileBackend")):
        yield
        return
    with internals.thread_lock(storage):
        internals.sync_with_backend(storage)
    n_in_file = internals.replay_result(storage).log_number_read
    if n_in_file not in internals.log_offsets(backend):  # nothing read yet: where records end is unknown
        yield
        return
    deferred = _Deferred(backend, n_in_file)
    internals.set_journal_backend(storage, deferred)
    try:
        yield
    finally:
        internals.set_journal_backend(storage, backend)
        if not deferred.flush():
            # records of another process landed between the block's read and its write: the file's order
            # is the truth, so the storage's replay is rebuilt from the whole file
            with internals.thread_lock(storage):
                internals.replay_from_start(storage)
