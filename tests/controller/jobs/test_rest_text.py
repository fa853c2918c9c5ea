"""`describe --format json` writes each finished trial from the text kept of it (`journal.log.rest`): the
same text as converting the whole journal, and a kept text only for the trial it was made of."""

from __future__ import annotations

import json
import os

import pytest

from benchmarks.read_scale import build_job
from trials.cli import main
from trials.controller.jobs import view
from trials.jsontext import dumps_indented
from trials.study import replay
from trials.study.journal import cache as journal_cache


@pytest.fixture
def job(tmp_path, monkeypatch):
    """A 30-trial journal job (running, waiting, requeued, stopped, failed trials) with a snapshot
    and a record after it; the clock of the REST job's updateTime fixed."""
    root = str(tmp_path)
    build_job(root, "job", 30, n_running=2, n_waiting=2)
    journal = os.path.join(root, "job", "journal.log")
    monkeypatch.setattr(replay, "SNAPSHOT_AFTER_RECORDS", 1)
    replay.read_journal(journal)
    monkeypatch.setattr(replay, "SNAPSHOT_AFTER_RECORDS", 10**9)
    _storage(journal).set_study_user_attr(0, "trials:note", "after the snapshot")
    monkeypatch.setattr(view, "rfc3339", lambda _t: "2026-12-02T00:00:00Z")
    return root, journal


def _storage(journal):
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    return JournalStorage(JournalFileBackend(journal))


def _reference(root):
    """The REST job converted whole from the journal, no snapshot, no kept text."""
    real = replay.read_journal
    try:
        replay.read_journal = lambda path, **kw: real(path, **{**kw, "snapshot": False})
        return dumps_indented(view.describe(view.read_job("job", root=root, storage=None)))
    finally:
        replay.read_journal = real


def _describe(capsys, root):
    assert main(["describe", "job", "--root", root, "--format", "json"]) == 0
    return capsys.readouterr().out.removesuffix("\n")


@pytest.fixture
def conversions(monkeypatch):
    """The trials converted to the REST shape, by storage id."""
    seen: list[int] = []
    real = view.trial_to_rest

    def counted(t, *a, **kw):
        seen.append(t.storage_id)
        return real(t, *a, **kw)

    monkeypatch.setattr(view, "trial_to_rest", counted)
    return seen


def _finished(journal):
    return {t.storage_id for t in replay.read_journal(journal, snapshot=False).trials if t.state.is_finished()}


def test_describe_json_is_the_whole_conversion_and_converts_a_finished_trial_once(job, capsys, conversions):
    root, journal = job
    expected = _reference(root)
    conversions.clear()
    assert _describe(capsys, root) == expected
    assert os.path.exists(journal_cache.cache_path(journal, journal_cache.TEXTS))
    finished = _finished(journal)
    assert finished <= set(conversions)
    conversions.clear()
    assert _describe(capsys, root) == expected  # from the kept texts now
    assert conversions and not set(conversions) & finished  # only the trials that change yet
    json.loads(expected)["trials"]  # (it parses)


def test_a_trial_that_finished_after_the_texts_were_kept_is_converted_from_the_journal(job, capsys, conversions):
    root, journal = job
    _describe(capsys, root)
    running = next(t for t in replay.read_journal(journal, snapshot=False).trials
                   if t.state == replay.StoredState.RUNNING)
    from optuna.trial import TrialState

    storage = _storage(journal)
    storage.set_trial_user_attr(running.storage_id, "state", "SUCCEEDED")
    storage.set_trial_state_values(running.storage_id, TrialState.COMPLETE, [0.5])
    expected = _reference(root)
    conversions.clear()
    assert _describe(capsys, root) == expected
    assert running.storage_id in conversions
    conversions.clear()
    assert _describe(capsys, root) == expected
    assert running.storage_id not in conversions  # kept now, with the texts of before


def test_texts_of_another_journal_or_another_spec_are_not_used(job, capsys, conversions, tmp_path, monkeypatch):
    root, journal = job
    _describe(capsys, root)
    kept = journal_cache.cache_path(journal, journal_cache.TEXTS)
    # the job made again under the same name: another journal, the old texts beside it
    other = tmp_path / "other"
    build_job(str(other), "job", 40, n_running=2, n_waiting=2, seed=7)
    kept_bytes = journal_cache.load_texts(journal).n_bytes
    assert os.path.getsize(other / "job" / "journal.log") > kept_bytes  # (only its CRC differs)
    os.replace(other / "job" / "journal.log", journal)
    assert os.path.exists(kept)
    assert _describe(capsys, root) == _reference(root)
    # another spec digest (another study spec): every finished trial converted again
    monkeypatch.setattr(journal_cache, "spec_digest", lambda spec, metric_ids: "another spec")
    conversions.clear()
    assert _describe(capsys, root) == _reference(root)
    assert _finished(journal) <= set(conversions)


@pytest.mark.parametrize("damage", ["symlink", "fifo", "garbage", "torn", "escape", "foreign"])
def test_a_damaged_or_planted_cache_is_ignored_and_written_again(job, capsys, conversions, damage, tmp_path):
    root, journal = job
    expected = _reference(root)
    path = journal_cache.cache_path(journal, journal_cache.TEXTS)
    _describe(capsys, root)
    if damage == "symlink":
        target = tmp_path / "elsewhere"
        os.replace(path, target)
        os.symlink(target, path)  # (a valid cache, through a link: not followed)
    elif damage == "fifo":
        os.unlink(path)
        os.mkfifo(path)  # (opening it must not block)
    elif damage == "garbage":
        with open(path, "wb") as f:
            f.write(os.urandom(4096))
    elif damage == "torn":
        os.truncate(path, os.path.getsize(path) // 2)
    elif damage == "escape":  # a kept text that would put a terminal escape on the screen
        cache = journal_cache.load_texts(journal)
        digest, texts = cache.jobs["job"]
        sid = next(iter(texts))
        journal_cache.save_texts(journal, cache.n_bytes, {"job": (digest, {**texts, sid: texts[sid] + "\x1b[2J"})})
    elif damage == "foreign":  # a pickle that names a class: never unpickled
        import pickle

        with open(path, "wb") as f:
            digest = journal_cache.prefix_hash(journal, 0)
            pickle.dump({"format": journal_cache.FORMAT, "n_bytes": 0, "digest": digest}, f)
            pickle.dump(os.getcwd, f)
    conversions.clear()
    assert _describe(capsys, root) == expected
    assert _finished(journal) <= set(conversions)
    assert os.path.isfile(path) and not os.path.islink(path)  # (a planted link replaced, its target untouched)
    assert journal_cache.load_texts(journal).jobs["job"][1]  # written again


def test_a_cache_longer_than_the_journal_is_not_used(job, capsys):
    root, journal = job
    _describe(capsys, root)
    assert journal_cache.load_texts(journal).jobs
    with open(journal, "rb+") as f:
        f.truncate(os.path.getsize(journal) - 1)  # (a torn last record: the journal is shorter than its prefix)
    assert not journal_cache.load_texts(journal).jobs


def test_a_database_job_is_described_whole(tmp_path, capsys):
    from jobkit import fake_job

    url = f"sqlite:///{tmp_path}/jobs.db"
    fake_job(tmp_path, outcomes=[("ok", [0.9, 0.5], False), ("fail", "boom")], storage=url)
    root = str(tmp_path / "jobs")
    assert main(["describe", "rep", "--root", root, "--storage", url, "--format", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert [t["state"] for t in out["trials"]] == ["SUCCEEDED", "INFEASIBLE"]
    assert [m["value"] for m in out["trials"][0]["measurements"][1]["metrics"]] == [0.5]
    assert not [p for p in tmp_path.rglob("*") if p.name.endswith(".rest")]


@pytest.mark.parametrize("text, ok", [
    ('{\n  "a": "b ~"\n}', True), ("", True), ("a\tb", False), ("a\rb", False), ("a\x7fb", False),
    ("a\x00b", False), ("caf\u00e9", False), ("\u2028", False), ("a\x1b[2J", False)])
def test_only_printable_ascii_and_newlines_pass(text: str, ok: bool) -> None:
    assert journal_cache._is_printable(text) is ok
