"""The journal read with its finished trials slim (what the tables read) gives what Optuna's replay
gives of them: from a current, stale, torn, foreign or concurrently appended snapshot."""

from __future__ import annotations

import json
import os
import pickle
import random
from pathlib import Path

import optuna
import pytest
from optuna.storages import JournalStorage
from optuna.storages.journal import JournalFileBackend
from optuna.trial import TrialState
from test_replay import _random_ops, optuna_replay

from benchmarks.read_scale import build_job
from trials.study import replay
from trials.study.journal import cache as journal_cache

_STEPS = {"measurements", "live_elapsed_s", "live_metrics"}


def _slim_view(number, state, params, values, intermediate, attrs) -> tuple:
    """What a table reads of a trial: its steps only counted, no attempts, the first error line."""
    attrs = dict(attrs)
    steps = attrs.get("measurements")
    n_steps = len(steps) if isinstance(steps, list) else None
    if n_steps is not None:
        attrs = {k: v for k, v in attrs.items()  # (the live ones also as chunks: live_elapsed_s.0, ...)
                 if k not in _STEPS and not (k.rpartition(".")[0] in _STEPS and k.rpartition(".")[2].isdigit())}
        intermediate = {}
    attrs = {k: v for k, v in attrs.items() if k not in replay.SLIM_DROPPED}
    if isinstance(attrs.get("error_detail"), list):
        attrs["error_detail"] = attrs["error_detail"][:1]
    return number, state, params, values, dict(intermediate), attrs, n_steps


def expected(path: str) -> dict:
    out = {}
    for name, (_, study_attrs, _, trials) in optuna_replay(path).items():
        out[name] = (study_attrs, [_slim_view(n, state, params, values, ivs, attrs)
                                   for _, n, state, params, _, values, ivs, attrs, _ in trials])
    return out


def lean(path: str) -> dict:
    r = replay.read_journal(path, whole=False)
    out = {}
    for s in r.studies.values():
        trials = []
        for t in r.study_trials_of(s.study_id):
            view = _slim_view(t.number, t.state.name, t.params, t.values, t.intermediate_values, t.user_attrs)
            steps = t.user_attrs.get("measurements")
            if view[-1] is not None:  # slim: as many placeholders as steps
                assert steps is None or len(steps) == view[-1]
            trials.append(view)
        out[s.name] = (s.user_attrs, trials)
    return out


def test_a_slim_read_of_a_job_the_loop_wrote_shows_what_optuna_reads(tmp_path, monkeypatch):
    monkeypatch.setattr(replay, "SNAPSHOT_AFTER_RECORDS", 50)
    path = os.path.join(build_job(str(tmp_path), "job", 40, n_metrics=2, n_running=3, n_waiting=4), "journal.log")
    replay.read_journal(path)  # the snapshot
    r = replay.read_journal(path, whole=False)
    assert not r.whole
    slim = [t for t in r.trials if t.state.is_finished()]
    assert slim and all(t.distributions == {} and "attempts" not in t.user_attrs for t in slim)
    assert all(t.user_attrs["measurements"] == [None] * len(t.user_attrs["measurements"]) for t in slim)
    assert all(t.user_attrs == replay.read_journal(path).trials[t.storage_id].user_attrs
               for t in r.trials if not t.state.is_finished())  # the trials a record may still change: whole
    assert lean(path) == expected(path)


@pytest.mark.parametrize("seed", range(12))
def test_random_histories_read_slim_from_a_stale_snapshot_show_what_optuna_reads(tmp_path, seed, monkeypatch):
    """Records after the snapshot, some about trials it holds finished (Optuna ignores them)."""
    monkeypatch.setattr(replay, "SNAPSHOT_AFTER_RECORDS", 1)
    path = str(tmp_path / "journal.log")
    storage = JournalStorage(JournalFileBackend(path))
    rng = random.Random(seed)
    _random_ops(storage, rng, 80)
    try:
        replay.read_journal(path)  # the snapshot of this prefix
        monkeypatch.setattr(replay, "SNAPSHOT_AFTER_RECORDS", 10**9)  # not written again: the tail read each time
        before = Path(replay.snapshot_path(path)).read_bytes()
        for _ in range(3):
            _random_ops(JournalStorage(JournalFileBackend(path)), rng, 40)
            assert lean(path) == expected(path)
    except replay.Unsupported as err:  # only what it leaves to Optuna on purpose
        assert "another distribution" in str(err)
        pytest.skip("a history only Optuna reads")
    assert Path(replay.snapshot_path(path)).read_bytes() == before


def test_a_long_tail_after_a_slim_read_writes_the_snapshot_whole(tmp_path, monkeypatch):
    monkeypatch.setattr(replay, "SNAPSHOT_AFTER_RECORDS", 1)
    path = os.path.join(build_job(str(tmp_path), "job", 12, n_running=2, n_waiting=1), "journal.log")
    replay.read_journal(path)
    storage = JournalStorage(JournalFileBackend(path))
    running = storage.get_all_trials(0, states=(TrialState.RUNNING,))[0]
    storage.set_trial_state_values(running._trial_id, TrialState.COMPLETE, [0.5])
    replay.read_journal(path, whole=False)  # one record after it: read slim, and the snapshot written whole
    whole = replay.load_snapshot(path)
    assert whole is not None and whole.whole and whole.n_bytes == os.path.getsize(path)
    assert whole.trials[running._trial_id].user_attrs == replay.read_journal(path, snapshot=False).trials[
        running._trial_id].user_attrs
    assert lean(path) == expected(path)


def test_a_record_appended_while_the_snapshot_is_read_is_in_the_tail(tmp_path, monkeypatch):
    """Another process appends between the snapshot's read and its tail's: the tail has it (a torn
    line it is writing is left for the next read, as Optuna leaves it)."""
    monkeypatch.setattr(replay, "SNAPSHOT_AFTER_RECORDS", 1)
    path = os.path.join(build_job(str(tmp_path), "job", 12, n_running=2, n_waiting=1), "journal.log")
    replay.read_journal(path)
    monkeypatch.setattr(replay, "SNAPSHOT_AFTER_RECORDS", 10**9)
    storage = JournalStorage(JournalFileBackend(path))
    running = storage.get_all_trials(0, states=(TrialState.RUNNING,))[0]
    real = replay.read_records

    def appended_meanwhile(journal: str, offset: int):
        storage.set_trial_user_attr(running._trial_id, "late", 1)
        storage.set_trial_state_values(running._trial_id, TrialState.COMPLETE, [0.25])
        with open(journal, "ab") as f:
            f.write(b'{"op_code": 8, "worker_id": "w", "trial_id": 0, "user_')  # being written
        return real(journal, offset)

    monkeypatch.setattr(replay, "read_records", appended_meanwhile)
    r = replay.read_journal(path, whole=False)
    monkeypatch.setattr(replay, "read_records", real)
    t = r.trials[running._trial_id]
    assert (t.state, t.values, t.user_attrs["late"]) == (replay.StoredState.COMPLETE, [0.25], 1)
    with open(path, "ab") as f:
        f.write(b'attr": {"x": 1}}\n')  # the torn line completed: a record about a finished trial
    assert lean(path) == expected(path)


@pytest.mark.parametrize("damage", ["torn lean part", "torn whole part", "format 2", "foreign pickle",
                                    "parts disagree"])
def test_a_damaged_or_foreign_snapshot_is_ignored_by_a_slim_read(tmp_path, damage, monkeypatch):
    monkeypatch.setattr(replay, "SNAPSHOT_AFTER_RECORDS", 1)
    path = os.path.join(build_job(str(tmp_path), "job", 12, n_running=1, n_waiting=1), "journal.log")
    replay.read_journal(path)
    snap = replay.snapshot_path(path)
    data = Path(snap).read_bytes()
    header_line, lean_line, whole_line = data.splitlines(keepends=True)
    header_end, lean_end = len(header_line), len(header_line) + len(lean_line)
    header, whole_part = json.loads(header_line), json.loads(whole_line)
    damaged = {
        "torn lean part": data[: header_end + (lean_end - header_end) // 2],
        "torn whole part": data[: lean_end + 20],
        "format 2": json.dumps({**header, "format": 2}).encode() + b"\n" + data[header_end:],
        "foreign pickle": data[:header_end] + pickle.dumps(optuna.distributions.FloatDistribution(0, 1)),
        "parts disagree": data[:lean_end] + json.dumps(whole_part[:-1]).encode() + b"\n",
    }[damage]
    Path(snap).write_bytes(damaged)
    if damage not in ("torn whole part", "parts disagree"):  # a slim read needs only the header, the lean part
        assert replay.load_snapshot(path, whole=False) is None
    assert replay.load_snapshot(path) is None
    assert lean(path) == expected(path)
    assert replay.read_journal(path).whole  # a whole read replays it all, and writes the snapshot again
    assert replay.load_snapshot(path) is not None


def test_a_snapshot_of_a_rewritten_journal_is_ignored_by_a_slim_read(tmp_path, monkeypatch):
    monkeypatch.setattr(replay, "SNAPSHOT_AFTER_RECORDS", 1)
    path = os.path.join(build_job(str(tmp_path), "job", 12, n_running=1, n_waiting=1), "journal.log")
    replay.read_journal(path)
    log = Path(path).read_bytes()
    Path(path).write_bytes(log.replace(b'"state":"SUCCEEDED"', b'"state":"INFEASIBLE"', 1))  # same length
    assert replay.load_snapshot(path, whole=False) is None
    assert lean(path) == expected(path)


def test_prefix_hash_names_the_bytes_and_their_length(tmp_path):
    path = tmp_path / "j"
    path.write_bytes(b"a" * 3000)
    assert journal_cache.prefix_hash(str(path), 3000) != journal_cache.prefix_hash(str(path), 2999)
    path.write_bytes(b"a" * 2999 + b"b")
    assert journal_cache.prefix_hash(str(path), 2999) == journal_cache.prefix_hash(str(path), 2999)
    before = journal_cache.prefix_hash(str(path), 3000)
    path.write_bytes(b"b" + b"a" * 2999)
    assert journal_cache.prefix_hash(str(path), 3000) != before
    assert journal_cache.prefix_hash(str(path), 5000).endswith(":3000")  # a shorter file: never its prefix's name


def test_hashing_once_continues_a_prefix_and_never_outlives_a_change(tmp_path, monkeypatch):
    path = tmp_path / "j"
    path.write_bytes(bytes(range(256)) * 40)
    plain = {n: journal_cache.prefix_hash(str(path), n) for n in (0, 100, 5000, 10240, 20000)}
    reads: list[int] = []
    real_open = open

    def counting_open(file, *args, **kwargs):
        f = real_open(file, *args, **kwargs)
        if str(file) == str(path):
            real_seek = f.seek
            f.seek = lambda pos, *a: (reads.append(pos), real_seek(pos, *a))[1]  # type: ignore[method-assign]
        return f

    with journal_cache.hashing_once():
        assert journal_cache.prefix_hash(str(path), 5000) == plain[5000]
        monkeypatch.setattr("builtins.open", counting_open)
        assert {n: journal_cache.prefix_hash(str(path), n) for n in (0, 100, 5000, 10240, 20000)} == plain
        assert 5000 in reads  # (10240 and 20000 continued from 5000's hash)
        monkeypatch.setattr("builtins.open", real_open)
        path.write_bytes(b"x" + bytes(range(256)) * 40)  # longer: another file
        assert journal_cache.prefix_hash(str(path), 5000) != plain[5000]
    assert journal_cache._HASHED is None
    assert journal_cache.prefix_hash(str(path), 100) != plain[100]  # (outside: always read)


def test_an_unchanged_journal_is_not_hashed_again_and_any_rewrite_is_seen(tmp_path, monkeypatch):
    path = tmp_path / "j"
    path.write_bytes(b"a" * 5000)
    digest, stat_key = journal_cache.prefix_digest(str(path), 4000)
    assert digest == journal_cache.prefix_hash(str(path), 4000) and stat_key is not None
    hashed: list[int] = []
    real = journal_cache.prefix_hash
    monkeypatch.setattr(journal_cache, "prefix_hash", lambda p, n: hashed.append(n) or real(p, n))
    assert journal_cache.prefix_holds(str(path), 4000, digest, stat_key) and hashed == []  # the same file, untouched
    assert journal_cache.prefix_holds(str(path), 4000, digest, None) and hashed == [4000]  # (no identity kept: hashed)
    with open(path, "r+b") as f:  # in place, the same size, at once: its change time moves
        f.write(b"b")
    assert not journal_cache.prefix_holds(str(path), 4000, digest, stat_key)
    path.write_bytes(b"a" * 5000)  # the same bytes again: hashed, and they hold
    assert journal_cache.prefix_holds(str(path), 4000, digest, stat_key)
    with open(path, "ab") as f:  # appended: the prefix holds, found by hashing
        f.write(b"c")
    hashed.clear()
    assert journal_cache.prefix_holds(str(path), 4000, digest, stat_key) and hashed == [4000]
    (tmp_path / "k").write_bytes(b"b" + b"a" * 5000)
    os.replace(tmp_path / "k", path)  # a new file in its place (``trials repair``)
    assert not journal_cache.prefix_holds(str(path), 4000, digest, stat_key)
    assert not journal_cache.prefix_holds(str(path), 6000, digest, stat_key)  # shorter than the prefix
