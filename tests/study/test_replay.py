"""The journal replayed without Optuna gives exactly what Optuna's own replay gives, from its snapshot too."""

from __future__ import annotations

import json
import os
import random
from pathlib import Path

import optuna
import pytest
from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution, json_to_distribution
from optuna.storages import JournalStorage
from optuna.storages.journal import JournalFileBackend
from optuna.trial import TrialState

from benchmarks.read_scale import build_job
from trials.study import replay


def optuna_replay(path: str) -> dict:
    """Every study and trial as Optuna's JournalStorage reads the journal."""
    storage = JournalStorage(JournalFileBackend(path))
    out = {}
    for s in storage.get_all_studies():
        trials = [(t._trial_id, t.number, t.state.name, t.params,
                   {k: d for k, d in t.distributions.items()}, t.values, t.intermediate_values, t.user_attrs,
                   t.system_attrs) for t in storage.get_all_trials(s._study_id, deepcopy=False)]
        out[s.study_name] = ([int(d) for d in s.directions], s.user_attrs, s.system_attrs, trials)
    return out


def lean_replay(path: str, *, snapshot: bool = True) -> dict:
    r = replay.read_journal(path, snapshot=snapshot)
    out = {}
    for s in r.studies.values():
        trials = [(t.storage_id, t.number, t.state.name, t.params,
                   {k: json_to_distribution(d) for k, d in t.distributions.items()}, t.values,
                   t.intermediate_values, t.user_attrs, t.system_attrs) for t in r.study_trials_of(s.study_id)]
        out[s.name] = (s.directions, s.user_attrs, s.system_attrs, trials)
    return out


def same(path: str) -> None:
    expected = optuna_replay(path)
    assert lean_replay(path, snapshot=False) == expected
    assert lean_replay(path) == expected  # replayed again and snapshot written (or used)
    assert lean_replay(path) == expected  # from the snapshot


@pytest.mark.parametrize("n_metrics", [1, 2])
def test_a_job_the_loop_wrote_reads_the_same(tmp_path, n_metrics, monkeypatch):
    monkeypatch.setattr(replay, "SNAPSHOT_AFTER_RECORDS", 50)
    job_dir = build_job(str(tmp_path), "job", 40, n_metrics=n_metrics, seed=n_metrics, n_running=3, n_waiting=4)
    path = os.path.join(job_dir, "journal.log")
    same(path)
    assert os.path.exists(replay.snapshot_path(path))
    states = {t[2] for t in optuna_replay(path)["job"][3]}
    assert states == {"COMPLETE", "PRUNED", "FAIL", "RUNNING", "WAITING"}


def _random_ops(storage: JournalStorage, rng: random.Random, n: int) -> None:
    """Optuna's storage API at random: studies made and deleted, trials in every state, params with
    the same or another distribution, attributes, values, writes to finished trials refused."""
    dists = [FloatDistribution(0.0, 1.0), FloatDistribution(1e-3, 1.0, log=True), IntDistribution(1, 8),
             CategoricalDistribution(["a", "b", 3]), CategoricalDistribution(["a", "c"])]
    studies: list[int] = []
    trials: list[int] = []
    for _ in range(n):
        op = rng.random()
        try:
            if op < 0.05 or not studies:
                directions = [optuna.study.StudyDirection(rng.choice([1, 2])) for _ in range(rng.choice([1, 2]))]
                studies.append(storage.create_new_study(directions, f"s{rng.randrange(4)}"))
            elif op < 0.07:
                storage.delete_study(studies.pop(rng.randrange(len(studies))))
            elif op < 0.12:
                storage.set_study_user_attr(rng.choice(studies), rng.choice("xyz"), rng.random())
            elif op < 0.3 or not trials:
                state = rng.choice([TrialState.WAITING, TrialState.RUNNING])
                template = None
                if rng.random() < 0.5:
                    i = rng.randrange(3)
                    d = dists[i]
                    template = optuna.trial.create_trial(state=state, params={f"p{i}": d.to_external_repr(
                        d.to_internal_repr(d.low))}, distributions={f"p{i}": d}, user_attrs={"u": [1, {"a": None}]},
                        intermediate_values={3: 0.5})
                trials.append(storage.create_new_trial(rng.choice(studies), template_trial=template))
            elif op < 0.5:
                i = rng.randrange(len(dists))
                d = dists[i]
                value = d.to_internal_repr(rng.choice(d.choices) if isinstance(d, CategoricalDistribution) else d.low)
                name = "q" if rng.random() < 0.02 else f"p{i}"  # now and then another distribution for q
                storage.set_trial_param(rng.choice(trials), name, value, d)
            elif op < 0.6:
                storage.set_trial_intermediate_value(rng.choice(trials), rng.randrange(5), rng.random())
            elif op < 0.75:
                storage.set_trial_user_attr(rng.choice(trials), rng.choice("abc"), {"v": rng.random(), "n": None})
            elif op < 0.8:
                storage.set_trial_system_attr(rng.choice(trials), "fixed_params", {"p": 0.5})
            else:
                state = rng.choice([TrialState.RUNNING, TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL,
                                    TrialState.WAITING])
                values = [rng.random()] if state == TrialState.COMPLETE else None
                storage.set_trial_state_values(rng.choice(trials), state, values)
        except (KeyError, ValueError, RuntimeError, optuna.exceptions.UpdateFinishedTrialError,
                optuna.exceptions.DuplicatedStudyError):
            pass  # refused by Optuna as it writes: the record is (or is not) in the journal either way


@pytest.mark.parametrize("seed", range(12))
def test_random_histories_of_optuna_writes_read_the_same(tmp_path, seed, monkeypatch):
    monkeypatch.setattr(replay, "SNAPSHOT_AFTER_RECORDS", 20)
    path = str(tmp_path / "journal.log")
    rng = random.Random(seed)
    storage = JournalStorage(JournalFileBackend(path))
    for _ in range(3):  # snapshots of each prefix, then more records after them
        _random_ops(storage, rng, 80)
        try:
            same(path)
        except replay.Unsupported as err:  # only what it leaves to Optuna on purpose
            assert "another distribution" in str(err)
            return
    assert lean_replay(path)  # (most seeds get here)


def test_another_distribution_for_a_parameter_is_left_to_optuna(tmp_path):
    path = str(tmp_path / "journal.log")
    storage = JournalStorage(JournalFileBackend(path))
    sid = storage.create_new_study([optuna.study.StudyDirection.MINIMIZE], "s")
    storage.set_trial_param(storage.create_new_trial(sid), "p", 0.0, FloatDistribution(0, 1))
    with pytest.raises(ValueError):  # Optuna refuses it on replay; the record stays in the journal
        storage.set_trial_param(storage.create_new_trial(sid), "p", 0.0, IntDistribution(0, 1))
    with pytest.raises(replay.Unsupported):
        replay.read_journal(path)


def _journal(tmp_path, n: int = 12) -> str:
    path = str(tmp_path / "journal.log")
    storage = JournalStorage(JournalFileBackend(path))
    sid = storage.create_new_study([optuna.study.StudyDirection.MINIMIZE], "s")
    for i in range(n):
        tid = storage.create_new_trial(sid)
        storage.set_trial_param(tid, "x", i / n, FloatDistribution(0, 1))
        storage.set_trial_user_attr(tid, "i", i)
        storage.set_trial_state_values(tid, TrialState.COMPLETE, [i / n])
    return path


def test_a_torn_last_line_ends_the_journal_as_for_optuna(tmp_path):
    path = _journal(tmp_path)
    with open(path, "ab") as f:
        f.write(b'{"op_code": 8, "worker_id": "w", "trial_id": 0, "user_at')
    same(path)


def test_an_unreadable_last_line_ends_the_journal_as_for_optuna(tmp_path):
    path = _journal(tmp_path)
    with open(path, "ab") as f:
        f.write(b'{"op_code": \n')
    same(path)


def test_an_unreadable_line_inside_the_journal_is_left_to_optuna(tmp_path):
    path = _journal(tmp_path)
    first = Path(path).read_bytes().splitlines(keepends=True)[0]
    with open(path, "ab") as f:
        f.write(b"not json\n" + first)
    with pytest.raises(replay.Unsupported):
        replay.read_journal(path)
    with pytest.raises(json.JSONDecodeError):
        optuna_replay(path)


def test_a_snapshot_is_used_only_for_the_journal_it_was_made_of(tmp_path, monkeypatch):
    monkeypatch.setattr(replay, "SNAPSHOT_AFTER_RECORDS", 1)
    path = _journal(tmp_path)
    same(path)
    snap = replay.snapshot_path(path)
    assert replay.load_snapshot(path) is not None
    # stale: records appended since are read from the snapshot's end
    storage = JournalStorage(JournalFileBackend(path))
    storage.set_trial_user_attr(storage.create_new_trial(0), "late", True)
    before = os.path.getmtime(snap)
    assert replay.load_snapshot(path) is not None
    same(path)
    # rewritten behind its back, same length: the prefix's hash no longer matches
    data = Path(path).read_bytes()
    with open(path, "wb") as f:
        f.write(data.replace(b'"i":3', b'"i":4'))
    assert replay.load_snapshot(path) is None
    same(path)
    # rewritten shorter (as `trials repair` drops lines)
    with open(path, "wb") as f:
        f.write(b"".join(data.splitlines(keepends=True)[:-5]))
    assert replay.load_snapshot(path) is None
    same(path)
    assert os.path.getmtime(snap) >= before


@pytest.mark.parametrize("damage", ["truncated", "empty", "garbage", "foreign pickle", "other format"])
def test_a_damaged_snapshot_is_ignored_and_written_again(tmp_path, damage, monkeypatch):
    import pickle

    monkeypatch.setattr(replay, "SNAPSHOT_AFTER_RECORDS", 1)
    path = _journal(tmp_path)
    same(path)
    snap = replay.snapshot_path(path)
    data = Path(snap).read_bytes()
    damaged = {"truncated": data[: len(data) // 2], "empty": b"", "garbage": b"\x00garbage",
               "foreign pickle": pickle.dumps(optuna.distributions.FloatDistribution(0, 1)),
               "other format": pickle.dumps({"format": 999})}[damage]
    with open(snap, "wb") as f:
        f.write(damaged)
    assert replay.load_snapshot(path) is None
    same(path)
    assert replay.load_snapshot(path) is not None


def test_the_stored_states_are_optunas():
    assert {s.name: s.value for s in replay.StoredState} == {s.name: s.value for s in TrialState}


def _counts(r: replay.Replay) -> dict:
    """A summary as ``list`` keeps one: per study, its attributes and trial count."""
    return {s.name: {"attrs": s.user_attrs, "n": len(r.study_trials_of(s.study_id))} for s in r.studies.values()}


def test_summaries_come_from_the_snapshot_header_only_while_it_covers_the_whole_journal(tmp_path, monkeypatch):
    path = _journal(tmp_path)
    truth = lambda: _counts(replay.read_journal(path, snapshot=False))  # noqa: E731
    assert replay.read_summaries(path, _counts) == truth()  # no snapshot: replayed, and one written
    assert os.path.exists(replay.snapshot_path(path))
    monkeypatch.setattr(replay, "read_journal", lambda *a, **k: pytest.fail("read the whole journal"))
    assert replay.read_summaries(path, _counts)["s"]["n"] == 12  # the header alone
    monkeypatch.undo()
    # stale: a record after the snapshot, so the journal is read (and the snapshot written again)
    storage = JournalStorage(JournalFileBackend(path))
    storage.set_study_user_attr(0, "late", True)
    storage.create_new_trial(0)
    assert replay.read_summaries(path, _counts) == truth()
    assert replay.read_summaries(path, _counts)["s"] == {"attrs": {"late": True}, "n": 13}
    # rewritten behind its back, same length: the header's hash no longer matches
    data = Path(path).read_bytes()
    Path(path).write_bytes(data.replace(b'"late":true', b'"late":3e00'))
    assert replay.read_summaries(path, _counts)["s"]["attrs"] == {"late": 3.0} == truth()["s"]["attrs"]


@pytest.mark.parametrize("damage", ["torn header", "torn body", "old format", "another version", "pickle"])
def test_a_damaged_snapshot_of_the_new_format_is_rebuilt(tmp_path, damage, monkeypatch):
    import pickle

    monkeypatch.setattr(replay, "SNAPSHOT_AFTER_RECORDS", 1)
    path = _journal(tmp_path)
    same(path)
    snap = replay.snapshot_path(path)
    data = Path(snap).read_bytes()
    header_end = data.index(b"\n") + 1
    header = json.loads(data[:header_end])
    damaged = {"torn header": data[: header_end // 2], "torn body": data[: header_end + 10],
               "old format": json.dumps({**header, "format": 0}).encode() + b"\n" + data[header_end:],
               "another version": json.dumps({**header, "trials": "0.0.1"}).encode() + b"\n" + data[header_end:],
               "pickle": pickle.dumps(header)}[damage]
    Path(snap).write_bytes(damaged)
    assert replay.load_snapshot(path) is None
    if damage != "torn body":  # a torn body after a good header: the header alone is still right
        assert replay.read_summaries(path, _counts) == _counts(replay.read_journal(path, snapshot=False))
    same(path)
    assert replay.load_snapshot(path) is not None


def test_importances_are_computed_over_a_seeded_sample_of_a_big_job():
    from trials.study.importances import sample

    kept = list(range(500))
    assert sample(kept[:20], 200) == kept[:20]
    chosen = sample(kept, 200)
    assert len(chosen) == 200 == len(set(chosen)) and chosen == sorted(chosen)
    assert sample(kept, 200) == chosen  # the same job, the same sample
