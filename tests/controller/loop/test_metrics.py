"""Unit tests of what a trial's run stores and how a resumed run starts from the storage: the
stored form of measurements, which steps are stored, and the union with what the reader reads."""

from __future__ import annotations

import math

from trials.controller.loop.metrics import steps_to_store
from trials.controller.trial.metrics_reader import TrialMetricsReader, conflicting, merge_step
from trials.records import Measurement, format_record, live_metrics, measurement_to_dict, stored_measurements


def m(step, elapsed=None, timestamp=None, attempt=0, **metrics):
    return Measurement(step=step, metrics=metrics, elapsed_s=elapsed, timestamp=timestamp, attempt=attempt)


def test_live_metrics_hold_what_an_intermediate_value_cannot():
    assert live_metrics({"loss": 0.5}, "loss") == {}
    assert live_metrics({"loss": 0.5, "acc": 0.9}, "loss") == {"acc": 0.9}
    assert live_metrics({"loss": math.nan, "acc": math.inf}, "loss") == {"loss": "nan", "acc": "inf"}


def test_stored_measurements_join_intermediate_values_and_live_attributes():
    attrs = {"live_elapsed_s": {"1": 0.3, "2": 0.6}, "live_metrics": {"2": {"acc": 0.8}, "3": {"loss": "nan"}}}
    got = stored_measurements({1: 0.5, 2: 0.4}, attrs, "loss")
    assert [measurement_to_dict(x) for x in got] == [
        {"step": 1, "elapsed_s": 0.3, "metrics": {"loss": 0.5}},
        {"step": 2, "elapsed_s": 0.6, "metrics": {"loss": 0.4, "acc": 0.8}},
        {"step": 3, "elapsed_s": None, "metrics": {"loss": "nan"}},
    ]


def test_stored_measurements_never_raise_on_odd_attributes():
    attrs = {"live_elapsed_s": {"1": "x", "2": True}, "live_metrics": {"x": {}, "2": {"a": "bad", "b": [1]}, "3": 7}}
    got = stored_measurements({1: 0.5}, attrs, "loss")
    assert [(x.step, dict(x.metrics), x.elapsed_s) for x in got] == [(1, {"loss": 0.5}, None)]
    assert stored_measurements({}, {"live_metrics": None, "live_elapsed_s": []}, "loss") == []


def test_merge_step_later_reads_win_per_metric_and_stored_elapsed_is_kept():
    stored = m(2, elapsed=0.6, loss=0.4, acc=0.8)
    read = m(2, timestamp=5.0, loss=0.45)
    merged = merge_step(stored, read, None)
    assert dict(merged.metrics) == {"loss": 0.45, "acc": 0.8} and merged.elapsed_s == 0.6
    assert merged.timestamp is None  # the stored elapsed is not recomputed from this controller's start
    assert conflicting(stored, merged) == ["loss"]
    assert merge_step(stored, None, None) is stored
    assert merge_step(None, read, None) is read
    jl = m(2, timestamp=5.0, loss=0.5)
    assert dict(merge_step(m(2, acc=0.1), m(2, loss=0.3, f1=0.2), jl).metrics) == {"acc": 0.1, "loss": 0.5, "f1": 0.2}
    assert merge_step(None, None, None) is None


def test_steps_to_store_takes_new_and_changed_steps_first_report_of_a_step_only():
    ms = [m(1, loss=0.5), m(2, loss=0.4), m(2, loss=0.1), m(3, loss=0.3, acc=0.2)]
    assert steps_to_store(ms, {}) == [ms[0], ms[1], ms[3]]
    assert steps_to_store(ms, {1: {"loss": 0.5}, 2: {"loss": 0.4}, 3: {"loss": 0.3, "acc": 0.2}}) == []
    assert steps_to_store(ms, {1: {"loss": 0.6}, 2: {"loss": 0.4}, 3: {"loss": 0.3}}) == [ms[0], ms[3]]
    assert steps_to_store([m(0, loss=math.nan)], {0: {"loss": math.nan}}) == []


def test_a_seeded_reader_is_the_union_of_the_storage_and_its_files(tmp_path):
    ht, jl = tmp_path / "h.metrics", tmp_path / "metrics.jsonl"
    reader = TrialMetricsReader(ht, jl, ["loss", "acc"], start_time=100.0)
    reader.seed([m(1, elapsed=0.3, loss=0.5, acc=0.1), m(2, elapsed=0.6, loss=0.4)])
    assert [x.step for x in reader.measurements()] == [1, 2] and reader.conflicts == 0
    assert reader.reported_tags == {"loss", "acc"}
    # the resumed process's lossless log: step 2 again (same value, plus acc), then step 3
    jl.write_text(format_record(2, {"loss": 0.4, "acc": 0.2}, 200.0) + format_record(3, {"loss": 0.3}, 201.0))
    reader.poll(final=True)
    got = [(x.step, dict(x.metrics), x.elapsed_s) for x in reader.measurements()]
    assert got == [(1, {"loss": 0.5, "acc": 0.1}, 0.3), (2, {"loss": 0.4, "acc": 0.2}, 0.6),
                   (3, {"loss": 0.3}, 101.0)]
    assert reader.conflicts == 0


def test_a_seeded_step_reported_again_with_another_value_is_a_conflict_and_the_later_wins(tmp_path):
    jl = tmp_path / "metrics.jsonl"
    reader = TrialMetricsReader(tmp_path / "h.metrics", jl, ["loss"], start_time=0.0)
    reader.seed([m(1, elapsed=0.3, loss=0.5)])
    jl.write_text(format_record(1, {"loss": 0.7}, 5.0))
    reader.poll(final=True)
    assert [dict(x.metrics) for x in reader.measurements()] == [{"loss": 0.7}]
    assert reader.conflicts == 1
    reader.poll(final=True)
    assert reader.conflicts == 1  # counted once


def test_first_start_is_the_stored_start_when_it_is_earlier():
    from trials.controller.loop.metrics import first_start
    from trials.timefmt import rfc3339

    assert first_start(rfc3339(100.5), 200.0) == 100.5
    assert first_start(rfc3339(300.0), 200.0) == 200.0  # a clock that went back: now
    assert first_start(None, 200.0) == 200.0
    assert first_start("yesterday", 200.0) == 200.0


# --- a running trial's live attributes, kept in chunks of steps -----------------------------------
def test_a_live_attribute_is_its_unchunked_form_and_its_chunks_merged_later_chunks_winning():
    from trials.records import live_attr

    attrs = {"live_elapsed_s": {"1": 0.1, "2": 0.2}, "live_elapsed_s.1": {"3": 0.3, "2": 9.0},
             "live_elapsed_s.0": {"2": 0.25}, "live_elapsed_s.x": {"4": 1.0}, "live_elapsed_s.2": [1],
             "live_elapsed_sx.0": {"5": 1.0}}
    assert live_attr(attrs, "live_elapsed_s") == {"1": 0.1, "2": 9.0, "3": 0.3}
    assert live_attr({}, "live_metrics") == {}
    got = stored_measurements({1: 0.5, 3: 0.7}, {"live_elapsed_s.0": {"1": 0.1}, "live_metrics.0": {"3": {"acc": 0.9}}},
                              "loss")
    assert [(m.step, m.metrics, m.elapsed_s) for m in got] == [(1, {"loss": 0.5}, 0.1),
                                                               (3, {"loss": 0.7, "acc": 0.9}, None)]


def test_each_poll_writes_only_the_chunks_it_changed_so_the_journal_grows_linearly():
    from trials.records import LIVE_CHUNK_STEPS, LiveChunks, live_attr

    chunks, elapsed, stored, written = LiveChunks(), {}, {}, 0
    n = 5 * LIVE_CHUNK_STEPS + 7
    for step in range(1, n + 1):  # one new step a poll: the worst case of the old whole attribute
        elapsed[str(step)] = step / 10
        chunks.touch(str(step))
        attrs = chunks.attrs(elapsed, {})
        assert list(attrs) == [f"live_elapsed_s.{(step - 1) // LIVE_CHUNK_STEPS}"]
        written += sum(len(v) for v in attrs.values())
        stored.update(attrs)  # what the storage holds: each attribute's last write
    assert written <= n * LIVE_CHUNK_STEPS  # linear (the whole attribute each poll: n (n + 1) / 2 = 55,278 here)
    assert live_attr(stored, "live_elapsed_s") == elapsed
    assert chunks.attrs(elapsed, {}) == {}  # nothing changed since


def test_a_step_changed_later_rewrites_its_own_chunk_and_metrics_share_the_step_s_chunk():
    from trials.records import LIVE_CHUNK_STEPS, LiveChunks

    chunks, elapsed, live = LiveChunks(), {}, {}
    for step in range(1, LIVE_CHUNK_STEPS + 3):
        elapsed[str(step)] = float(step)
        chunks.touch(str(step))
    chunks.attrs(elapsed, live)
    live["2"] = {"acc": 0.5}  # step 2's other metrics changed (a later report wins)
    chunks.touch("2")
    first = {str(s): float(s) for s in range(1, LIVE_CHUNK_STEPS + 1)}
    assert chunks.attrs(elapsed, live) == {"live_elapsed_s.0": first, "live_metrics.0": {"2": {"acc": 0.5}}}


def test_a_resumed_trial_goes_on_after_its_last_chunk_and_rechunks_only_what_it_writes_again():
    from trials.records import LIVE_CHUNK_STEPS, LiveChunks, live_attr

    stored = {"live_elapsed_s": {"1": 0.1, "2": 0.2},  # an older journal's unchunked attribute
              "live_elapsed_s.0": {"3": 0.3}, "live_elapsed_s.1": {"4": 0.4, "5": 0.5},
              "live_metrics.1": {"5": {"acc": 1.0}}}
    chunks = LiveChunks.from_attrs(stored)
    elapsed = live_attr(stored, "live_elapsed_s")
    live = live_attr(stored, "live_metrics")
    elapsed["6"] = 0.6
    chunks.touch("6")  # a new step: the last chunk has room
    elapsed["1"] = 0.15
    chunks.touch("1")  # a step only in the unchunked attribute, changed: it joins the current chunk
    got = chunks.attrs(elapsed, live)
    assert got == {"live_elapsed_s.1": {"4": 0.4, "5": 0.5, "6": 0.6, "1": 0.15}, "live_metrics.1": {"5": {"acc": 1.0}}}
    assert live_attr({**stored, **got}, "live_elapsed_s") == {"1": 0.15, "2": 0.2, "3": 0.3, "4": 0.4, "5": 0.5,
                                                             "6": 0.6}
    full = LiveChunks.from_attrs({f"live_elapsed_s.{i}": {str(i * 1000 + j): 0.0 for j in range(LIVE_CHUNK_STEPS)}
                                  for i in range(2)})
    full.touch("new")
    assert full.steps_in[2] == ["new"]  # the last chunk was full: a new one
