"""Opening a journal with Optuna from a snapshot of Optuna's own replay, then only its tail.

A command that writes a job (``resume``, ``sweep`` into an existing job, ``cancel``) needs Optuna's
``JournalStorage``, and opening it replays every record (a 10,000-trial journal: seconds). Optuna
supports starting from a snapshot of its replay (``BaseJournalSnapshot``, used by its Redis
backend): the storage restores it and reads the records after it. This backend gives it one kept
beside the journal (``journal.log.optuna``), named, like the lean replay's, by the length and hash of
the journal prefix it is the replay of: it is used only while the journal still starts with exactly
those bytes, and a torn, foreign or stale one is ignored (the journal is replayed whole) and
written again. Its pickle is read by an unpickler that makes only Optuna's trial and study types
and builtins, so a file put there runs nothing.
"""

from __future__ import annotations

import contextlib
import io
import os
import pickle
from typing import Any

from optuna.storages import JournalStorage
from optuna.storages.journal import JournalFileBackend
from optuna.storages.journal._base import BaseJournalSnapshot  # (not re-exported; Optuna 3.1-5 has it)
from optuna.storages.journal._storage import JournalStorageReplayResult

from trials.study import replay

SUFFIX = ".optuna"
FORMAT = 2  # 2: the prefix named by its CRC-32 (replay.prefix_hash)
_ALLOWED = {("builtins", "set"), ("builtins", "frozenset"), ("datetime", "datetime"), ("datetime", "timezone"),
            ("datetime", "timedelta"), ("copyreg", "_reconstructor"), ("builtins", "object")}


class _OptunaUnpickler(pickle.Unpickler):
    """Only Optuna's own value types (trials, studies, distributions, states) and plain values."""

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in _ALLOWED or module.startswith(("optuna.trial.", "optuna.study.",
                                                            "optuna.distributions", "optuna.storages.journal.")):
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
        try:
            with open(snapshot_path(self._file_path), "rb") as f:
                header = pickle.load(f)  # plain values: a dict of ints and a str
                if not (isinstance(header, dict) and header.get("format") == FORMAT):
                    return None
                n_bytes, n_records = int(header["n_bytes"]), int(header["n_records"])
                if (os.stat(self._file_path).st_size < n_bytes
                        or replay.prefix_hash(self._file_path, n_bytes) != header["digest"]):
                    return None  # the journal was rewritten (or truncated) since
                body = f.read()
        except Exception:  # noqa: BLE001 - missing, torn, foreign or unreadable: replay from the start
            return None
        self._log_number_offset[n_records] = n_bytes  # its tail is read from there, not line by line
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
            self._backend._log_number_offset = {0: 0}  # type: ignore[attr-defined]
            self._backend.n_restored = 0  # type: ignore[attr-defined]
            return
        r._worker_id_prefix = self._worker_id_prefix
        r._worker_id_to_owned_trial_id = {}
        r._last_created_trial_id_by_this_process = -1
        self._replay_result = r


def write_snapshot(storage: JournalStorage, backend: SnapshotBackend) -> None:
    """Write the snapshot of ``storage``'s replay so far (atomically; a folder this process cannot
    write keeps the old one)."""
    result = storage._replay_result
    n_records = result.log_number_read
    n_bytes = backend._log_number_offset.get(n_records)
    if n_bytes is None:
        return
    path = snapshot_path(backend._file_path)
    tmp = f"{path}.{os.getpid()}.tmp"
    try:
        with open(tmp, "wb") as f:
            pickle.dump({"format": FORMAT, "n_bytes": n_bytes, "n_records": n_records,
                         "digest": replay.prefix_hash(backend._file_path, n_bytes)}, f)
            pickle.dump(result, f, protocol=pickle.HIGHEST_PROTOCOL)
        os.replace(tmp, path)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(tmp)


def open_journal(path: str, **kwargs: Any) -> JournalStorage:
    """Optuna's storage of the journal at ``path``: from its snapshot and the records after it; the
    snapshot is written again when many records were replayed after it."""
    backend = SnapshotBackend(path, **kwargs)
    storage = SnapshotStorage(backend)
    if storage._replay_result.log_number_read - backend.n_restored >= replay.SNAPSHOT_AFTER_RECORDS:
        write_snapshot(storage, backend)
    return storage
