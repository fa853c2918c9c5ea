"""Optuna's JournalStorage over a job's journal file, and several journal operations written as one.

A command that writes a job (``resume``, ``sweep`` into an existing job, ``cancel``) opens the journal
with Optuna, which replays every record (a 10,000-trial journal: ~1.3 s on a quiet machine). It used
to start from a pickle of that replay kept beside the journal (``journal.log.optuna``); that file is
no longer written or read: a file beside the journal is input (a Slurm trainer can write the job
folder) and unpickling one ran its code, and the benchmark of reads showed it earned nothing for
``describe``, ``best`` or ``resume`` of an ended job, which read the lean replay (``benchmarks/README.md``
part 10).

Optuna writes (and fsyncs) each operation alone; :func:`append` and :func:`one_write` reach into its
JournalStorage to write several at once, used only when its internals are exactly as expected
(otherwise the callers fall back to the public setters).
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator, Sequence
from typing import Any, TypeGuard

import optuna
from optuna.storages import BaseStorage, JournalStorage
from optuna.storages.journal import JournalFileBackend

from trials.study import optuna_internals as internals

try:  # the journal's operation codes
    from trials.study.optuna_internals import JournalOperation

    INTERMEDIATE_VALUE = int(JournalOperation.SET_TRIAL_INTERMEDIATE_VALUE)
    USER_ATTR = int(JournalOperation.SET_TRIAL_USER_ATTR)
except (ImportError, AttributeError):  # another Optuna layout: use the public setters
    INTERMEDIATE_VALUE = USER_ATTR = -1


def open_journal(path: str, **kwargs: Any) -> JournalStorage:
    """Optuna's storage of the journal at ``path`` (``kwargs``: its file backend's), replayed whole."""
    return JournalStorage(JournalFileBackend(path, **kwargs))


# --- writing: several operations at once --------------------------------------------------------------------
def _is_journal(storage: BaseStorage) -> TypeGuard[optuna.storages.JournalStorage]:
    """Optuna's JournalStorage, or a subclass that writes as it does: a subclass seen as foreign
    silently lost the one-write guarantee."""
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
