"""`trials describe` table/CSV, `trials list` and `trials best` on a finished job, as a user runs them."""

from __future__ import annotations

import csv
import io
import json
import os

from jobkit import fake_job, write_members, write_meta

from trials.cli import main
from trials.controller.jobs import describe
from trials.job_meta import JobMeta


def _run(capsys, *argv: str) -> tuple[int, str]:
    code = main(list(argv))
    return code, capsys.readouterr().out


def test_csv_writes_numbers_exactly_and_the_table_rounds_them(tmp_path, capsys):
    h = fake_job(tmp_path, outcomes=[("ok", [0.9, 0.123456789012345], False), ("ok", [0.8], True),
                                     ("fail", "boom"), None, None, None])
    stored = {str(t.number + 1): t.params["lr"] for t in h.store.frozen_trials() if "lr" in t.params}
    root = str(tmp_path / "jobs")
    code, out = _run(capsys, "describe", "rep", "--root", root, "--format", "csv")
    assert code == 0
    rows = list(csv.DictReader(io.StringIO(out)))
    assert [r["trial"] for r in rows] == ["1", "2", "3"]
    for r in rows:  # exactly what the trial got, every digit
        assert float(r["lr"]) == stored[r["trial"]] and r["lr"] == repr(stored[r["trial"]])
    assert rows[0]["loss"] == "0.123456789012345"
    assert (rows[1]["stopped early"], rows[1]["reason"]) == ("yes", "below the median")
    assert (rows[0]["stopped early"], rows[2]["reason"]) == ("", "boom")
    code, out = _run(capsys, "describe", "rep", "--root", root)
    assert "0.123457" in out and "0.123456789012345" not in out  # the table is for reading
    header = out.splitlines()[1].split("  ")
    assert "stopped early" in [c.strip() for c in header]


def test_display_rounds_floats_only():
    assert describe.display(0.027599337346012304, 3) == "0.0276"
    assert describe.display(1.201889465775844e-06, 3) == "1.2e-06"
    assert describe.display(64.0) == "64" and describe.display(64) == "64" and describe.display("adam") == "adam"


def test_list_counts_trials_as_describe_does(tmp_path, capsys):
    fake_job(tmp_path, outcomes=[("ok", [0.5], False), ("ok", [0.4], False), None, None, None, None])
    root = str(tmp_path / "jobs")
    _, out = _run(capsys, "describe", "rep", "--root", root)
    assert "  2 trials  " in out.splitlines()[0]
    _, out = _run(capsys, "list", "--root", root)
    (row,) = out.splitlines()[1:]
    assert row.split()[:3] == ["rep", "JOB_STATE_SUCCEEDED", "2"]


def test_best_as_json_has_exact_values_flags_and_the_model_folder(tmp_path, capsys):
    h = fake_job(tmp_path, outcomes=[("ok", [0.9, 0.123456789012345], False), ("ok", [0.7], False)])
    lr = next(t.params["lr"] for t in h.store.frozen_trials() if t.number == 0)
    code, out = _run(capsys, "best", "rep", "--root", str(tmp_path / "jobs"), "--format", "json")
    assert code == 0
    data = json.loads(out)
    (best,) = data["best"]
    assert data["job_id"] == "rep" and data["metric_ids"] == ["loss"]
    assert best["trial_id"] == "1" and best["metrics"] == {"loss": 0.123456789012345}
    assert best["parameters"]["lr"] == lr and f"--lr={lr!r}" in best["flags"]
    assert best["model_dir"] is None  # no base output directory, and no model/ in the trial's folder
    model = tmp_path / "jobs" / "rep" / "1" / "model"
    model.mkdir(parents=True)  # the trials runtime's own folder without AIP_MODEL_DIR
    code, out = _run(capsys, "best", "rep", "--root", str(tmp_path / "jobs"), "--format", "json")
    assert json.loads(out)["best"][0]["model_dir"] == str(model) + "/"
    model.rmdir()
    os.symlink("/etc", model)  # a link a trainer planted is not shown as its model
    code, out = _run(capsys, "best", "rep", "--root", str(tmp_path / "jobs"), "--format", "json")
    assert json.loads(out)["best"][0]["model_dir"] is None


def test_best_as_json_of_a_job_with_no_result_exits_1(tmp_path, capsys):
    fake_job(tmp_path, outcomes=[("fail", "boom")])
    code, out = _run(capsys, "best", "rep", "--root", str(tmp_path / "jobs"), "--format", "json")
    assert code == 1 and json.loads(out)["best"] == []


def test_the_table_counts_the_steps_it_does_not_convert(tmp_path):
    from benchmarks.read_scale import build_job
    from trials.controller.jobs import view

    build_job(str(tmp_path), "job", 30, n_running=2, n_waiting=2)
    h = view.read_job("job", root=str(tmp_path), storage=None)
    metric_ids = h.job.study.reported_metric_ids
    local = view.describe_local(h)["trials"]
    full, lean = view.describe(h), view.describe(h, steps=False)
    assert any(t.get("measurements") for t in full["trials"])
    for exact in (False, True):
        assert describe.rows(lean, metric_ids, local=local, exact=exact) == describe.rows(
            full, metric_ids, local=local, exact=exact)


def test_list_reads_the_same_from_the_snapshot_header_as_from_the_journal(tmp_path, capsys):
    from benchmarks.read_scale import build_job
    from trials.study import replay

    root = str(tmp_path)
    for i, name in enumerate(("a", "b")):
        build_job(root, name, 12 + i, n_running=1, n_waiting=1)
    journals = [os.path.join(root, n, "journal.log") for n in ("a", "b")]
    code, first = _run(capsys, "list", "--root", root)  # no snapshot yet: each written
    assert code == 0 and all(os.path.exists(replay.snapshot_path(p)) for p in journals)
    assert _run(capsys, "list", "--root", root)[1] == first
    for p in journals:
        os.unlink(replay.snapshot_path(p))
    assert _run(capsys, "list", "--root", root)[1] == first
    assert [line.split()[0] for line in first.splitlines()[1:]] == ["a", "b"]


def _odd_trials() -> list:
    """Trials a table must show as the REST job does: a NaN, a missing and a text metric, an error
    detail, steps only in the intermediate values, a queued trial with an old run, one never run."""
    from trials.study.replay import StoredState, StoredTrial

    def trial(number: int, stored: StoredState, **attrs) -> StoredTrial:
        return StoredTrial(storage_id=number, study_id=0, number=number, state=stored,
                           params={"learning_rate": 0.01 * (number + 1), "layers": number % 3 + 1},
                           values=[0.5] if stored == StoredState.COMPLETE else None, user_attrs=attrs,
                           intermediate_values={1: 0.25, 2: 0.5} if number == 3 else {})

    final = {"step": 2, "elapsed_s": 1.5, "metrics": {"accuracy": float("nan"), "other": 3}}
    return [
        trial(0, StoredState.COMPLETE, state="SUCCEEDED", final_measurement=final, measurements=[{}, {}],
              start_time="t0", end_time="t1"),
        trial(1, StoredState.COMPLETE, state="SUCCEEDED", final_measurement={"step": 1, "metrics": {"accuracy": "x"}},
              stopped_early=True, stop_reason="below the median", start_time="t0"),
        trial(2, StoredState.FAIL, state="INFEASIBLE", start_time="t0", error_detail=["ValueError: boom", "tb"],
              infeasible_reason="The replica workerpool0-0 exited with a non-zero status of 1. Termination "
                                "reason: Error."),
        trial(3, StoredState.RUNNING, state="ACTIVE", start_time="t0"),
        trial(4, StoredState.WAITING, state="REQUESTED", requeued=True, measurements=[{}], stopped_early=True),
        trial(5, StoredState.WAITING, state="REQUESTED"),
        trial(6, StoredState.COMPLETE, state="SUCCEEDED", final_measurement={"step": 1, "metrics": {}},
              stop_reason="r" * 100, start_time="t0"),
    ]


def test_the_table_made_from_the_trials_is_the_table_of_the_rest_job(tmp_path):
    from benchmarks.read_scale import build_job
    from trials.controller.jobs import view

    build_job(str(tmp_path), "job", 30, n_metrics=2, n_running=2, n_waiting=2)
    h = view.read_job("job", root=str(tmp_path), storage=None)
    metric_ids = h.job.study.reported_metric_ids
    get = view.params_of(h)
    for trials in (h.store.frozen_trials(), _odd_trials()):
        rest = describe.job_to_rest("job", JobMeta(), trials, get, metric_ids, steps=False)
        for exact in (False, True):
            assert describe.trial_rows(trials, get, metric_ids, exact=exact) == describe.rows(
                rest, metric_ids, local=describe.local_details(trials), exact=exact)


def test_describe_and_best_read_the_same_from_a_slim_snapshot_as_from_the_journal(tmp_path, capsys, monkeypatch):
    """The tables read the snapshot's slim trials and its tail: the same lines as a whole replay."""
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    from benchmarks.read_scale import build_job
    from trials.study import replay

    root = str(tmp_path)
    build_job(root, "job", 30, n_metrics=2, n_running=2, n_waiting=2)
    journal = os.path.join(root, "job", "journal.log")
    monkeypatch.setattr(replay, "SNAPSHOT_AFTER_RECORDS", 1)
    replay.read_journal(journal)  # the snapshot, then a record after it
    JournalStorage(JournalFileBackend(journal)).set_study_user_attr(0, "trials:state", "JOB_STATE_CANCELLED")
    monkeypatch.setattr(replay, "SNAPSHOT_AFTER_RECORDS", 10**9)
    assert not replay.read_journal(journal, whole=False).whole
    commands = [("describe", "job", "--root", root), ("describe", "job", "--root", root, "--format", "csv"),
                ("best", "job", "--root", root), ("best", "job", "--root", root, "--format", "json"),
                ("list", "--root", root)]
    slim = [_run(capsys, *c) for c in commands]
    real = replay.read_journal
    monkeypatch.setattr(replay, "read_journal", lambda path, **kw: real(path, **{**kw, "snapshot": False}))
    assert [_run(capsys, *c) for c in commands] == slim
    assert "JOB_STATE_CANCELLED" in slim[0][1] and "JOB_STATE_CANCELLED" in slim[4][1] and slim[2][0] == 0


def test_table_cuts_a_long_reason_at_a_word_with_an_ellipsis_and_csv_keeps_it_whole(tmp_path, capsys):
    stop = ("best value 0.640208 is below 0.730045: at step 2, each of the 2 completed trials (of 6) that "
            "ended in the top quarter had reached 0.730045 or better")
    h = fake_job(tmp_path, outcomes=[("ok", [0.5, 0.4], False), ("fail", stop), None, None, None, None])
    root = str(tmp_path / "jobs")
    lr = {str(t.number + 1): describe.display(t.params["lr"]) for t in h.store.frozen_trials() if "lr" in t.params}
    width = {str(t.number + 1): str(t.params["width"]) for t in h.store.frozen_trials() if "width" in t.params}
    code, out = _run(capsys, "describe", "rep", "--root", root)
    assert code == 0
    w = max(len("lr"), *(len(v) for v in lr.values()))
    assert out.splitlines()[-1].startswith("suggestions: 0 from the gp-warped model, 2 random")  # (issue 48)
    assert out.splitlines()[1:-1] == [
        f"trial  state       loss  {'lr'.ljust(w)}  width  steps  stopped early  reason",
        f"1      SUCCEEDED   0.4   {lr['1'].ljust(w)}  {width['1'].ljust(5)}  2",
        f"2      INFEASIBLE        {lr['2'].ljust(w)}  {width['2'].ljust(5)}  0                     "
        "best value 0.640208 is below 0.730045: at step 2, each of the 2 completed…",
    ]
    _, out = _run(capsys, "describe", "rep", "--root", root, "--format", "csv")
    assert list(csv.DictReader(io.StringIO(out)))[1]["reason"] == stop


def test_cut_words_ends_at_a_whole_word():
    assert describe.cut_words("abc def ghi", 11) == "abc def ghi"
    assert describe.cut_words("abc def ghi", 10) == "abc def…"
    assert describe.cut_words("abc def ghi", 8) == "abc def…"
    assert describe.cut_words("abc def ghi", 7) == "abc…"
    assert describe.cut_words("abc, def", 6) == "abc…"
    assert describe.cut_words("abcdefghijk", 5) == "abcd…"  # one long word: cut inside it


def test_describe_shows_what_the_sampler_process_did_and_only_numbers_from_the_meta(tmp_path, capsys):
    h = fake_job(tmp_path, outcomes=[("ok", [0.5], False), ("ok", [0.4], False)])
    root = str(tmp_path / "jobs")
    _, out = _run(capsys, "describe", "rep", "--root", root)
    assert "suggestions made ahead" not in out  # TPE in the loop: nothing to say
    write_meta(h.store, suggestions=29, suggest_cpu_s=0.812, suggest_wait_s=0.05)
    _, out = _run(capsys, "describe", "rep", "--root", root)
    assert out.splitlines()[1] == ("suggestions made ahead (last run): 29 by the sampler's own process, "
                                   "0.81 s of its CPU; slots waited 0.05 s for them")
    _, out = _run(capsys, "describe", "rep", "--root", root, "--format", "local-json")
    assert json.loads(out)["suggestionsAhead"] == {"suggestions": 29, "cpuSeconds": 0.812, "slotWaitSeconds": 0.05}
    write_members(h.store, suggestions="29\x1b[2J", suggest_cpu_s=float("nan"), suggest_wait_s=-1)  # an edited meta
    _, out = _run(capsys, "describe", "rep", "--root", root)
    assert "suggestions made ahead" not in out and "\x1b" not in out
    write_members(h.store, suggestions=True, suggest_cpu_s=None, suggest_wait_s=0.25)
    _, out = _run(capsys, "describe", "rep", "--root", root)
    assert out.splitlines()[1] == ("suggestions made ahead (last run): 0 by the sampler's own process; "
                                   "slots waited 0.25 s for them")
