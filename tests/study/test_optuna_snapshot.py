"""Optuna's storage opened from its replay's snapshot gives exactly what its full replay gives."""

from __future__ import annotations

import os
import pickle
from pathlib import Path

import pytest
from optuna.storages import JournalStorage
from optuna.storages.journal import JournalFileBackend
from optuna.trial import TrialState

from benchmarks.read_scale import build_job
from trials.study import journal as journal_storage
from trials.study import replay


def dump(storage: JournalStorage) -> list:
    out = []
    for s in storage.get_all_studies():
        out.append((s._study_id, s.study_name, s.directions, s.user_attrs, s.system_attrs,
                    [(t._trial_id, t.number, t.state, t.params, t.distributions, t.values, t.intermediate_values,
                      t.user_attrs, t.system_attrs, t.datetime_start, t.datetime_complete)
                     for t in storage.get_all_trials(s._study_id, deepcopy=False)]))
    return out


def full(path: str) -> list:
    return dump(JournalStorage(JournalFileBackend(path)))


@pytest.fixture
def journal(tmp_path, monkeypatch) -> str:
    monkeypatch.setattr(replay, "SNAPSHOT_AFTER_RECORDS", 1)
    return os.path.join(build_job(str(tmp_path), "job", 25, n_running=2, n_waiting=2), "journal.log")


def test_a_journal_opened_from_its_snapshot_reads_as_replayed_whole_and_writes_on(journal):
    storage = journal_storage.open_journal(journal)
    snap = journal_storage.snapshot_path(journal)
    assert os.path.exists(snap) and dump(storage) == full(journal)
    again = journal_storage.open_journal(journal)
    assert again._backend.n_restored > 0 and dump(again) == full(journal)
    # writes after a restore, and by another process meanwhile, land as in a full replay
    running = again.get_all_trials(0, states=(TrialState.RUNNING,))[0]
    again.set_trial_user_attr(running._trial_id, "late", 1)
    JournalStorage(JournalFileBackend(journal)).set_trial_state_values(running._trial_id, TrialState.COMPLETE, [0.5])
    tid = again.create_new_trial(0)
    assert dump(again) == full(journal)
    assert dump(journal_storage.open_journal(journal)) == full(journal)
    assert tid == max(t._trial_id for t in again.get_all_trials(0))


@pytest.mark.parametrize("damage", ["rewritten", "shorter", "torn", "garbage", "foreign pickle"])
def test_a_stale_or_damaged_snapshot_is_ignored_and_written_again(journal, damage):
    journal_storage.open_journal(journal)
    snap = journal_storage.snapshot_path(journal)
    data, log = Path(snap).read_bytes(), Path(journal).read_bytes()
    if damage == "rewritten":  # same length, another value: the prefix's hash no longer matches
        Path(journal).write_bytes(log.replace(b'"accuracy":0.', b'"accuracy":1.', 1))
    elif damage == "shorter":  # as `trials repair` drops lines
        Path(journal).write_bytes(b"".join(log.splitlines(keepends=True)[:-7]))
    else:
        with open(snap, "rb") as f:
            header = pickle.load(f)
        evil = pickle.dumps(header) + b"cos\nsystem\n(S'echo pwned'\ntR."
        Path(snap).write_bytes({"torn": data[: len(data) - 50], "garbage": b"\x00garbage",
                                "foreign pickle": evil}[damage])
    storage = journal_storage.open_journal(journal)
    assert storage._backend.n_restored == 0
    assert dump(storage) == full(journal)
    assert journal_storage.open_journal(journal)._backend.n_restored > 0  # written again
