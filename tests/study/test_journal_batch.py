"""journal.one_write: a claim's writes (RUNNING, each parameter, the trial's attributes) in one fsync,
and the journal file stays exactly what plain Optuna would read."""

from __future__ import annotations

import os
from pathlib import Path

import optuna
import pytest
from optuna.storages import JournalStorage
from optuna.storages.journal import JournalFileBackend

from trials.job_meta import JobMeta
from trials.spec.load import loads_spec
from trials.study.journal.log import one_write
from trials.study.storage import open_storage
from trials.study.store import JobStore

SPEC = """\
metrics: {loss: minimize}
parameters:
  x: {type: double, min: 0.0, max: 1.0}
  n: {type: integer, min: 1, max: 9}
  kind: {type: categorical, values: [a, b]}
max_trial_count: 4
"""


def open_store(path: Path, opener: str = "product") -> tuple[JobStore, object]:
    """The store over the storage the product opens (``open_storage``), or
    over plain Optuna's ``JournalStorage``."""
    job = loads_spec(SPEC, source="t.yaml")
    storage = open_storage(str(path)) if opener == "product" else JournalStorage(JournalFileBackend(str(path)))
    store = JobStore.create(storage, "j", job, {}, JobMeta(), sampler_name="tpe", seed=1)
    return store, job


def plain(path: Path) -> list[optuna.trial.FrozenTrial]:
    return optuna.load_study(study_name="j", storage=JournalStorage(JournalFileBackend(str(path)))).trials


@pytest.mark.parametrize("opener", ["product", "plain"])
def test_a_claim_in_one_write_is_one_fsync_and_plain_optuna_reads_it(tmp_path: Path, monkeypatch, opener) -> None:
    path = tmp_path / "journal.log"
    store, job = open_store(path, opener)
    calls = []
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (calls.append(fd), real_fsync(fd))[1])
    with store.batch():
        claimed = store.claim(job.study)
        assert claimed is not None
        store.set_trial_attrs(claimed.storage_id, state="ACTIVE", trial_id=claimed.trial_id)
        # inside the block the store sees its own writes
        assert store.storage.get_trial(claimed.storage_id).user_attrs["state"] == "ACTIVE"
    assert len(calls) == 1
    monkeypatch.setattr(os, "fsync", real_fsync)
    first = plain(path)[0]
    assert first.state.name == "RUNNING" and first.user_attrs == {"state": "ACTIVE", "trial_id": "1"}
    assert set(first.params) == {"x", "n", "kind"}
    # the store goes on from where the block left it, and another writer's records interleave right
    other = JournalStorage(JournalFileBackend(str(path)))
    other.set_trial_user_attr(claimed.storage_id, "from_other", 1)
    store.set_trial_attrs(claimed.storage_id, after=2)
    with store.batch():
        second = store.claim(job.study)
    assert second is not None
    attrs = store.storage.get_trial(claimed.storage_id).user_attrs
    assert attrs["from_other"] == 1 and attrs["after"] == 2
    trials = plain(path)
    assert [t.state.name for t in trials] == ["RUNNING", "RUNNING", "WAITING", "WAITING"]
    assert trials[0].user_attrs == attrs
    assert trials[1].params == store.storage.get_trial(second.storage_id).params


def test_writes_before_an_error_in_the_block_still_reach_the_file(tmp_path: Path) -> None:
    path = tmp_path / "journal.log"
    store, job = open_store(path)
    with pytest.raises(RuntimeError), store.batch():
        claimed = store.claim(job.study)
        assert claimed is not None
        with one_write(store.storage):  # nested: the outer block writes
            store.set_trial_attrs(claimed.storage_id, state="ACTIVE")
        raise RuntimeError("boom")
    assert plain(path)[0].user_attrs == {"state": "ACTIVE"}


def test_a_new_job_is_one_fsync_and_plain_optuna_reads_its_waiting_trials(tmp_path: Path, monkeypatch) -> None:
    calls = []
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (calls.append(fd), real_fsync(fd))[1])
    store, _ = open_store(tmp_path / "journal.log")
    assert len(calls) == 1  # the study, its settings and its 4 WAITING trials (was one fsync each)
    monkeypatch.setattr(os, "fsync", real_fsync)
    trials = plain(tmp_path / "journal.log")
    assert [t.state.name for t in trials] == ["WAITING"] * 4
    assert store.meta().sampler == "tpe"


def test_a_trial_told_through_the_store_is_what_study_tell_records(tmp_path: Path) -> None:
    """The store tells Optuna without the deep copy ``Study.tell`` returns: same records, same checks."""
    from trials.study import store as store_module

    assert store_module._tell_with_warning is not None  # this Optuna has it: a rename must be seen here
    store, job = open_store(tmp_path / "journal.log")
    done, stopped, failed = (store.claim(job.study) for _ in range(3))
    assert done and stopped and failed
    store.complete(done.number, [0.5])
    store.complete(stopped.number, [0.7], stopped_early=True)
    store.fail(failed.number)
    store.fail(failed.number)  # finished already: skipped, as skip_if_finished does
    got = plain(tmp_path / "journal.log")
    assert [(t.state.name, t.values) for t in got[:3]] == [("COMPLETE", [0.5]), ("PRUNED", None), ("FAIL", None)]
    with pytest.raises(ValueError):
        store.complete(got[3].number, [1.0])  # a WAITING trial, never claimed: Optuna's own check refuses it


def test_a_reported_step_and_its_attributes_are_one_record_write(tmp_path: Path, monkeypatch) -> None:
    """A step's intermediate value and its elapsed time land together: a controller SIGKILLed between
    two separate writes left a step without its elapsed time (the storage ``open_storage`` gives is a
    subclass of Optuna's, which the one-write path once took for a foreign storage)."""
    path = tmp_path / "journal.log"
    store, job = open_store(path)
    claimed = store.claim(job.study)
    assert claimed is not None
    calls = []
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (calls.append(fd), real_fsync(fd))[1])
    store.report_many(claimed.storage_id, [(1, 0.5), (2, 0.25)], {"live_elapsed_s": {"1": 0.1, "2": 0.2}})
    assert len(calls) == 1
    monkeypatch.setattr(os, "fsync", real_fsync)
    got = plain(path)[0]
    assert got.intermediate_values == {1: 0.5, 2: 0.25}
    assert got.user_attrs["live_elapsed_s"] == {"1": 0.1, "2": 0.2}


def test_another_process_writing_during_a_block_is_neither_held_off_nor_lost(tmp_path: Path) -> None:
    """A block takes the journal's lock only for its write: another writer inside it goes through at
    once (it used to wait for the lock, and after Optuna's 30 s grace broke it as stale, which left
    this storage's record offsets wrong: a later read began mid-line). The storage then replays the
    file, so what it holds is what the file says, in the file's order."""
    path = tmp_path / "journal.log"
    store, job = open_store(path)
    first = store.claim(job.study)
    assert first is not None
    other = JournalStorage(JournalFileBackend(str(path)))
    with store.batch():
        store.set_trial_attrs(first.storage_id, mine=1)
        other.set_trial_user_attr(first.storage_id, "theirs", 2)  # (would block on a held lock)
        store.set_trial_attrs(first.storage_id, mine_too=3)
    attrs = store.storage.get_trial(first.storage_id).user_attrs
    assert {k: attrs[k] for k in ("mine", "theirs", "mine_too")} == {"mine": 1, "theirs": 2, "mine_too": 3}
    # its offsets are right again: the next writes and reads go on, and plain Optuna agrees
    store.set_trial_attrs(first.storage_id, after=4)
    other.set_trial_user_attr(first.storage_id, "theirs_after", 5)
    second = store.claim(job.study)
    assert second is not None
    assert store.storage.get_trial(first.storage_id).user_attrs["theirs_after"] == 5
    got = plain(path)
    assert got[0].user_attrs == store.storage.get_trial(first.storage_id).user_attrs
    assert [t.state.name for t in got] == [t.state.name for t in store.storage.get_all_trials(store._study_id)]
