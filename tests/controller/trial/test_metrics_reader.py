"""Unit tests of the tolerant metrics reader: hypertune file quirks, metrics.jsonl, merging."""

from __future__ import annotations

import collections
import json
import math
import os
import statistics
import time

import pytest

from trials.controller.trial import metrics_reader
from trials.controller.trial.metrics_reader import TrialMetricsReader
from trials.hypertune_file import HypertuneLine, parse_hypertune_text
from trials.records import format_record

T0 = 1_000_000.0


class FakeHypertune:
    """Writes exactly what cloudml-hypertune 0.1.0.dev6 writes, with a controllable clock."""

    def __init__(self, path, trial="7", t0=T0):
        self.path = path
        self.trial = trial
        self.now = t0
        self.queue = collections.deque(maxlen=100)

    def report(self, tag, value, step=None):
        self._append(tag, value, step)
        self._write()

    def report_steps(self, steps, tags=("acc", "loss"), value=lambda tag, step: step / 1000):
        """Many reports; the file is written once, as it would read after the last of them."""
        for step in steps:
            for tag in tags:
                self._append(tag, value(tag, step), step)
        self._write()

    def _append(self, tag, value, step):
        self.now += 0.5
        self.queue.append({
            "timestamp": self.now, "trial": self.trial,
            tag or "training/hptuning/metric": str(float(value)),
            "global_step": str(int(step) if step else 0), "checkpoint_path": "",
        })

    def _write(self):
        with open(self.path, "w") as f:
            for m in self.queue:
                f.write(json.dumps(m, sort_keys=True) + "\n")


@pytest.fixture
def paths(tmp_path):
    return str(tmp_path / "hypertune.metrics"), str(tmp_path / "metrics.jsonl")


def make_reader(paths, metric_ids=("acc", "loss")):
    return TrialMetricsReader(paths[0], paths[1], metric_ids, start_time=T0)


def steps_of(reader):
    return [m.step for m in reader.measurements()]


# --- parse_hypertune_text --------------------------------------------------------------------------
def test_parse_real_line_with_string_values():
    text = ('{"accuracy": "0.9", "checkpoint_path": "", "global_step": "10", '
            '"timestamp": 1796013114.3, "trial": "7"}\n')
    assert parse_hypertune_text(text) == [HypertuneLine(
        tag="accuracy", value=0.9, step=10, timestamp=1796013114.3, trial="7", checkpoint_path="")]


def test_parse_matches_the_real_library(tmp_path, monkeypatch):
    hypertune = pytest.importorskip("hypertune")
    path = tmp_path / "h.metrics"
    monkeypatch.setenv("CLOUD_ML_HP_METRIC_FILE", str(path))
    monkeypatch.setenv("CLOUD_ML_TRIAL_ID", "3")
    ht = hypertune.HyperTune()
    ht.report_hyperparameter_tuning_metric("acc", 0.5, 4)
    ht.report_hyperparameter_tuning_metric("loss", float("nan"), None)
    lines = parse_hypertune_text(path.read_text())
    assert [(x.tag, x.step, x.trial) for x in lines] == [("acc", 4, "3"), ("loss", 0, "3")]
    assert lines[0].value == 0.5 and math.isnan(lines[1].value)


def test_parse_empty_and_blank():
    assert parse_hypertune_text("") == []
    assert parse_hypertune_text("\n\n  \n") == []


def test_parse_skips_torn_and_foreign_lines():
    good = '{"acc": "0.5", "global_step": "1", "timestamp": 1.0, "trial": "1"}'
    text = "\n".join([
        good,
        '{"acc": "0.6", "global_step": "2", "timest',  # torn
        "not json at all",
        "[1, 2, 3]",
        '"a string"',
        "{" * 100_000,  # deep nesting must not raise
        good.replace('"1"', '"1"'),
    ])
    assert [x.step for x in parse_hypertune_text(text)] == [1, 1]


@pytest.mark.parametrize("raw_step, expected", [
    ('"10"', [10]), ('"0"', [0]), ("5", [5]), ('"7.0"', [7]),
    ('"-1"', []), ('"7.5"', []), ('"abc"', []), ("true", []), ('"inf"', []), ("null", [0]),
])
def test_parse_steps(raw_step, expected):
    line = f'{{"acc": "0.5", "global_step": {raw_step}, "timestamp": 1.0}}'
    assert [x.step for x in parse_hypertune_text(line)] == expected


def test_parse_missing_step_is_zero_like_the_library():
    assert parse_hypertune_text('{"acc": "0.5"}')[0].step == 0


@pytest.mark.parametrize("raw, ok", [
    ('"0.9"', True), ("0.9", True), ("3", True), ('"nan"', True), ('"inf"', True), ('"-inf"', True),
    ('"oops"', False), ("true", False), ("null", False), ("[1]", False), ('{"a": 1}', False),
])
def test_parse_values(raw, ok):
    lines = parse_hypertune_text(f'{{"acc": {raw}, "global_step": "1", "timestamp": 1.0}}')
    assert len(lines) == (1 if ok else 0)
    if ok:
        assert isinstance(lines[0].value, float)


def test_parse_nan_is_a_float_nan():
    (line,) = parse_hypertune_text('{"acc": "nan", "global_step": "1", "timestamp": 1.0}')
    assert isinstance(line.value, float) and math.isnan(line.value)


def test_parse_keeps_unknown_tags_and_several_tags_per_line():
    lines = parse_hypertune_text('{"a": "1", "zz/custom": "2", "global_step": "3", "trial": "1"}')
    assert sorted((x.tag, x.value) for x in lines) == [("a", 1.0), ("zz/custom", 2.0)]


def test_parse_bad_timestamp_becomes_none():
    (line,) = parse_hypertune_text('{"a": "1", "global_step": "3", "timestamp": "soon"}')
    assert line.timestamp is None


# --- the reader on the hypertune file -------------------------------------------------------------
def test_missing_files(paths):
    reader = make_reader(paths)
    assert reader.poll() is False
    assert reader.measurements() == [] and reader.source is None
    assert reader.missing_steps_warning is None and reader.reported_tags == set()


def test_empty_file_then_content(paths):
    open(paths[0], "w").close()
    reader = make_reader(paths)
    reader.poll()
    assert reader.measurements() == [] and reader.source == "hypertune"
    FakeHypertune(paths[0]).report_steps([1])
    assert reader.poll() is True
    assert steps_of(reader) == [1]


def test_groups_the_metrics_of_one_step_into_one_measurement(paths):
    FakeHypertune(paths[0]).report_steps([1, 2, 3])
    reader = make_reader(paths)
    assert reader.poll() is True
    ms = reader.measurements()
    assert [m.step for m in ms] == [1, 2, 3]
    assert all(set(m.metrics) == {"acc", "loss"} for m in ms)
    assert ms[0].metrics["acc"] == pytest.approx(0.001)
    # elapsed_s: the step's last report (loss of step 1 at T0 + 1.0) minus the start time
    assert ms[0].elapsed_s == pytest.approx(1.0) and ms[0].timestamp == pytest.approx(T0 + 1.0)


def test_dedupe_across_repeated_polls(paths):
    fake = FakeHypertune(paths[0])
    fake.report_steps([1, 2])
    reader = make_reader(paths)
    assert reader.poll() is True
    assert reader.poll() is False
    fake.report_steps([3])
    assert reader.poll() is True
    assert reader.poll() is False
    assert steps_of(reader) == [1, 2, 3] and reader.conflicts == 0


def settle(path):
    """Backdate a file's mtime: the reader then trusts it as no longer being written."""
    past = time.time_ns() - 10 * metrics_reader.RACY_WINDOW_NS
    os.utime(path, ns=(past, past))


def torn_steps(path, fake=None):
    """The file as cloudml-hypertune leaves it after reporting steps 1-3, cut in the middle of a rewrite
    (what a reader sees between the truncation and the last write); returns the whole text."""
    (fake or FakeHypertune(path)).report_steps([1, 2, 3])
    with open(path) as f:
        full = f.read()
    with open(path, "w") as f:
        f.write(full[: len(full) // 2 + 10])
    return full


def test_torn_read_is_left_for_the_next_poll(paths):
    full = torn_steps(paths[0])
    reader = make_reader(paths)
    reader.poll()
    assert steps_of(reader) == []
    with open(paths[0], "w") as f:
        f.write(full)
    assert reader.poll() is True
    assert steps_of(reader) == [1, 2, 3] and reader.conflicts == 0
    assert all(set(m.metrics) == {"acc", "loss"} for m in reader.measurements())


def test_a_read_in_the_middle_of_a_rewrite_asks_to_be_made_again_soon(paths):
    """The file keeps only its last 100 reports: a reader that waits a whole period after finding it torn
    or empty (truncated, not yet written) may find the reports it held gone."""
    fake = FakeHypertune(paths[0])
    full = torn_steps(paths[0], fake)
    reader = make_reader(paths)
    reader.poll()
    assert reader.reread_soon and reader.new_reports == 0
    open(paths[0], "w").close()  # truncated, the rewrite not begun
    reader.poll()
    assert reader.reread_soon and reader.new_reports == 0
    with open(paths[0], "w") as f:
        f.write(full)
    assert reader.poll() is True
    assert not reader.reread_soon and reader.new_reports == 6  # 3 steps of 2 tags: 6 reports
    assert reader.poll() is False
    assert not reader.reread_soon and reader.new_reports == 0  # unchanged
    fake.report_steps([4])
    reader.poll()
    assert reader.new_reports == 2  # only the new ones


def test_a_huge_torn_file_is_not_read_again_at_once(paths):
    with open(paths[0], "w") as f:  # no hypertune file is this big: a trainer keeping it torn is not hurried
        f.write(("x" * 1000 + "\n") * (metrics_reader.REREAD_MAX_BYTES // 1000) + '{"acc": "0.5", "glo')
    reader = make_reader(paths)
    reader.poll()
    assert not reader.reread_soon


def test_an_old_empty_file_is_not_a_rewrite_in_progress(paths):
    open(paths[0], "w").close()
    settle(paths[0])
    reader = make_reader(paths)
    reader.poll()
    assert not reader.reread_soon


def test_a_trial_with_metrics_jsonl_needs_no_haste(paths):
    torn_steps(paths[0])
    with open(paths[1], "w") as f:
        f.write(format_record(1, {"acc": 0.5}, T0 + 1) + "\n")
    reader = make_reader(paths)
    reader.poll()
    assert reader.source == "metrics.jsonl" and not reader.reread_soon  # lossless: nothing to lose


def test_settled_torn_file_is_read_up_to_its_bad_tail(paths):
    torn_steps(paths[0])
    settle(paths[0])
    reader = make_reader(paths)
    assert reader.poll() is True
    assert 1 in steps_of(reader) and 3 not in steps_of(reader)


def test_nan_value_kept(paths):
    FakeHypertune(paths[0]).report("acc", float("nan"), 4)
    reader = make_reader(paths)
    reader.poll()
    (m,) = reader.measurements()
    assert math.isnan(m.metrics["acc"])


def test_unknown_tags_are_listed_not_measured(paths):
    fake = FakeHypertune(paths[0])
    fake.report("acc", 0.5, 1)
    fake.report("", 0.7, 1)  # an empty tag: the library writes its default tag
    reader = make_reader(paths, metric_ids=["acc"])
    reader.poll()
    assert reader.reported_tags == {"acc", "training/hptuning/metric"}
    assert reader.unknown_tags == {"training/hptuning/metric"}
    assert [dict(m.metrics) for m in reader.measurements()] == [{"acc": 0.5}]


def test_only_unknown_tags_gives_no_measurement(paths):
    FakeHypertune(paths[0]).report("accuracy", 0.5, 1)
    reader = make_reader(paths, metric_ids=["acc"])
    assert reader.poll() is True
    assert reader.measurements() == [] and reader.reported_tags == {"accuracy"}


def test_no_metric_ids_keeps_every_tag(paths):
    FakeHypertune(paths[0]).report_steps([1], tags=("a", "b"))
    reader = make_reader(paths, metric_ids=())
    reader.poll()
    assert set(reader.measurements()[0].metrics) == {"a", "b"} and reader.unknown_tags == set()


def test_reports_without_global_step_are_each_their_own_measurement_in_order(paths):
    fake = FakeHypertune(paths[0])
    for value in (0.1, 0.9, 0.3):
        fake.report("acc", value)  # no global_step: every line says "0"
    reader = make_reader(paths, metric_ids=["acc"])
    reader.poll()
    ms = reader.measurements()
    assert [(m.step, m.metrics["acc"]) for m in ms] == [(0, 0.1), (0, 0.9), (0, 0.3)]
    assert "repeated a step" in reader.repeated_steps_warning
    from trials.controller.policy.exits import select_final
    from trials.spec import MetricSpec

    acc = MetricSpec(metric_id="acc")
    assert select_final(ms, [acc], best=True).metrics["acc"] == 0.9  # BEST is the best, not the last
    assert select_final(ms, [acc], best=False).metrics["acc"] == 0.3


def test_two_metrics_at_one_step_are_one_measurement_and_a_repeat_starts_another(paths):
    fake = FakeHypertune(paths[0])
    fake.report("acc", 0.5, step=3)
    fake.report("loss", 1.5, step=3)
    fake.report("acc", 0.6, step=3)
    fake.report("loss", 1.4, step=3)
    reader = make_reader(paths, metric_ids=["acc", "loss"])
    reader.poll()
    assert [dict(m.metrics) for m in reader.measurements()] == [{"acc": 0.5, "loss": 1.5},
                                                               {"acc": 0.6, "loss": 1.4}]


def test_a_restart_that_reports_a_step_again_replaces_it(paths):
    fake = FakeHypertune(paths[0])
    fake.report("acc", 0.5, step=1)
    reader = make_reader(paths, metric_ids=["acc"])
    reader.poll(final=True)
    reader.on_restart()
    fake.queue.clear()  # the restarted process's HyperTune starts a fresh file
    fake.report("acc", 0.5, step=1)
    fake.report("acc", 0.7, step=2)
    reader.poll(final=True)
    assert [(m.step, m.metrics["acc"]) for m in reader.measurements()] == [(1, 0.5), (2, 0.7)]
    assert reader.repeated_steps_warning is None


# --- the 100-entry cap ------------------------------------------------------------------------------
def test_reading_in_time_loses_nothing(paths):
    fake, reader = FakeHypertune(paths[0]), make_reader(paths)
    for start in range(0, 300, 30):  # 60 reports between polls: under the cap
        fake.report_steps(range(start, start + 30))
        reader.poll()
    assert steps_of(reader) == list(range(300))
    assert reader.missing_steps_warning is None


def test_cap_drop_is_detected_and_named(paths):
    fake, reader = FakeHypertune(paths[0]), make_reader(paths)
    fake.report_steps(range(30))
    reader.poll()
    fake.report_steps(range(30, 230))  # 400 reports: the file keeps steps 180..229
    reader.poll()
    assert steps_of(reader) == list(range(30)) + list(range(180, 230))
    warning = reader.missing_steps_warning
    assert warning is not None and "between step 29 and step 180" in warning
    assert paths[0] in warning and "100" in warning


def test_full_file_on_first_read_warns(paths):
    FakeHypertune(paths[0]).report_steps(range(300))
    reader = make_reader(paths)
    reader.poll()
    assert steps_of(reader) == list(range(250, 300))
    assert "before step 250" in reader.missing_steps_warning


def test_file_not_yet_full_on_first_read_does_not_warn(paths):
    FakeHypertune(paths[0]).report_steps(range(49))  # 98 entries
    reader = make_reader(paths)
    reader.poll()
    assert len(reader.measurements()) == 49 and reader.missing_steps_warning is None


def test_exactly_100_reports_between_reads_is_not_a_loss(paths):
    fake, reader = FakeHypertune(paths[0]), make_reader(paths)
    fake.report_steps(range(30))
    reader.poll()
    fake.report_steps(range(30, 80))  # 100 reports: the file shares no entry with the last read
    reader.poll()
    assert steps_of(reader) == list(range(80)) and reader.missing_steps_warning is None


def test_gap_inside_one_repeated_step_loses_reports_and_says_so(paths):
    fake, reader = FakeHypertune(paths[0]), make_reader(paths, metric_ids=["acc"])
    fake.report("acc", 0.1)
    reader.poll()
    for i in range(150):  # no global_step: every report is step 0, each its own measurement
        fake.report("acc", i / 1000)
    reader.poll()
    ms = reader.measurements()
    assert len(ms) == 101 and ms[-1].metrics["acc"] == 0.149  # the file kept only the last 100
    assert "may be missing" in reader.missing_steps_warning


def test_full_file_overlapping_what_was_read_does_not_warn(paths):
    fake, reader = FakeHypertune(paths[0]), make_reader(paths)
    fake.report_steps(range(40))
    reader.poll()
    fake.report_steps(range(40, 80))  # file full (100 entries, steps 30..79) but overlaps
    reader.poll()
    assert steps_of(reader) == list(range(80)) and reader.missing_steps_warning is None


def test_several_gaps_are_all_named(paths):
    fake, reader = FakeHypertune(paths[0]), make_reader(paths)
    for start in (0, 100, 200):
        fake.report_steps(range(start, start + 100))
        reader.poll()
    warning = reader.missing_steps_warning
    assert "before step 50" in warning and "between step 99 and step 150" in warning
    assert "between step 199 and step 250" in warning


# --- restarts ---------------------------------------------------------------------------------------
def test_restart_keeps_old_steps_and_replaces_re_reported_ones(paths):
    reader = make_reader(paths)
    FakeHypertune(paths[0]).report_steps(range(48))
    reader.poll()
    reader.on_restart()
    restarted = FakeHypertune(paths[0], t0=T0 + 1000)  # a fresh queue: the file shrinks
    restarted.report_steps(range(40, 45), value=lambda tag, step: 1.0 + step)
    reader.poll()
    ms = {m.step: m for m in reader.measurements()}
    assert sorted(ms) == list(range(48))
    assert ms[39].metrics["acc"] == pytest.approx(0.039) and ms[39].attempt == 0
    assert ms[40].metrics["acc"] == 41.0 and ms[40].attempt == 1
    assert reader.conflicts == 10  # 5 steps x 2 metrics re-reported with other values
    assert reader.missing_steps_warning is None
    restarted.report_steps(range(45, 60))
    reader.poll()
    assert steps_of(reader) == list(range(60)) and reader.missing_steps_warning is None


def test_restart_without_on_restart_is_taken_once_the_file_settles(paths):
    reader = make_reader(paths)
    FakeHypertune(paths[0]).report_steps(range(48))
    reader.poll()
    FakeHypertune(paths[0], t0=T0 + 1000).report_steps(range(48, 60))
    # A short file that starts with an unread entry: a fresh file, or the first chunk of a rewrite
    # after an overflow? Only a settled file tells.
    assert reader.poll() is False and steps_of(reader) == list(range(48))
    settle(paths[0])
    assert reader.poll() is True
    ms = reader.measurements()
    assert [m.step for m in ms] == list(range(60)) and reader.missing_steps_warning is None
    assert ms[47].attempt == 0 and ms[48].attempt == 1


def test_short_read_after_an_overflow_waits_for_the_whole_file(paths):
    fake, reader = FakeHypertune(paths[0]), make_reader(paths)
    fake.report_steps(range(10))
    reader.poll()
    fake.report_steps(range(10, 110))  # overflow: the file now holds steps 60..109
    with open(paths[0]) as f:
        whole = f.read().splitlines(keepends=True)
    with open(paths[0], "w") as f:
        f.writelines(whole[:70])  # a rewrite's first 8 KiB chunk ends at a line end
    assert reader.poll() is False
    with open(paths[0], "w") as f:
        f.writelines(whole)
    assert reader.poll() is True
    assert steps_of(reader) == list(range(10)) + list(range(60, 110))
    assert "between step 9 and step 60" in reader.missing_steps_warning


def test_restart_that_overflows_before_the_first_read_warns(paths):
    reader = make_reader(paths)
    FakeHypertune(paths[0]).report_steps(range(20))
    reader.poll()
    reader.on_restart()
    FakeHypertune(paths[0], t0=T0 + 1000).report_steps(range(20, 120))
    reader.poll()
    assert "before step 70" in reader.missing_steps_warning
    assert steps_of(reader) == list(range(20)) + list(range(70, 120))


def test_file_deleted_keeps_what_was_read(paths):
    FakeHypertune(paths[0]).report_steps([1, 2])
    reader = make_reader(paths)
    reader.poll()
    os.remove(paths[0])
    assert reader.poll() is False and steps_of(reader) == [1, 2]


# --- metrics.jsonl -----------------------------------------------------------------------------------
def write_jsonl(path, steps, mode="a", value=lambda step: step / 1000, attempt=0):
    with open(path, mode) as f:
        for step in steps:
            f.write(format_record(step, {"acc": value(step), "loss": value(step)}, T0 + step, attempt))


def test_jsonl_alone(paths):
    write_jsonl(paths[1], range(5))
    reader = make_reader(paths)
    assert reader.poll() is True and reader.source == "metrics.jsonl"
    assert steps_of(reader) == list(range(5))
    assert reader.measurements()[3].elapsed_s == pytest.approx(3.0)
    assert reader.poll() is False


def test_jsonl_preferred_over_hypertune(paths):
    FakeHypertune(paths[0]).report_steps(range(5), value=lambda tag, step: -1.0)
    write_jsonl(paths[1], range(5))
    reader = make_reader(paths)
    reader.poll()
    assert reader.source == "metrics.jsonl"
    assert [m.metrics["acc"] for m in reader.measurements()] == [s / 1000 for s in range(5)]


def test_lagging_jsonl_still_shows_hypertune_steps(paths):
    FakeHypertune(paths[0]).report_steps(range(10))
    write_jsonl(paths[1], range(5))
    reader = make_reader(paths)
    reader.poll()
    assert steps_of(reader) == list(range(10))


def test_jsonl_makes_hypertune_losses_harmless(paths):
    FakeHypertune(paths[0]).report_steps(range(300))
    write_jsonl(paths[1], range(300))
    reader = make_reader(paths)
    reader.poll()
    assert steps_of(reader) == list(range(300)) and reader.missing_steps_warning is None


def test_jsonl_torn_last_line_is_read_next_poll(paths):
    write_jsonl(paths[1], range(2))
    line = format_record(2, {"acc": 0.5, "loss": 0.5}, T0 + 2)
    with open(paths[1], "a") as f:
        f.write(line[:20])
    reader = make_reader(paths)
    reader.poll()
    assert steps_of(reader) == [0, 1]
    assert reader.poll() is False
    with open(paths[1], "a") as f:
        f.write(line[20:])
    assert reader.poll() is True
    assert steps_of(reader) == [0, 1, 2] and reader.measurements()[2].metrics["acc"] == 0.5


def test_jsonl_restart_attempts_replace_values(paths):
    write_jsonl(paths[1], range(5))
    reader = make_reader(paths)
    reader.poll()
    write_jsonl(paths[1], range(3, 6), value=lambda step: 9.0, attempt=1)
    reader.poll()
    ms = reader.measurements()
    assert [m.metrics["acc"] for m in ms] == [0.0, 0.001, 0.002, 9.0, 9.0, 9.0]
    assert reader.conflicts == 4


def test_jsonl_replaced_is_reread_without_duplicates(paths):
    write_jsonl(paths[1], range(5))
    reader = make_reader(paths)
    reader.poll()
    os.remove(paths[1])
    write_jsonl(paths[1], range(3), mode="w")  # shorter, new inode: read from the start again
    reader.poll()
    assert steps_of(reader) == list(range(5)) and reader.conflicts == 0


def test_jsonl_record_without_known_metrics_gives_no_measurement(paths):
    with open(paths[1], "w") as f:
        f.write(format_record(1, {}, T0) + format_record(2, {"other": 1.0}, T0))
    reader = make_reader(paths)
    assert reader.poll() is True
    assert reader.measurements() == [] and reader.unknown_tags == {"other"}


def test_garbage_and_invalid_utf8(paths):
    with open(paths[1], "wb") as f:
        f.write(b"\xff\xfe garbage \x00\n")
        f.write(format_record(1, {"acc": 0.1}, T0 + 1).encode())
        f.write(b'{"step": 2, "metrics": {"acc": "\xc3\x28"}}\n')
        f.write(format_record(3, {"acc": 0.3}, T0 + 3).encode())
    with open(paths[0], "wb") as f:
        f.write(b"\x80\x81\n" + b'{"acc": "0.4", "global_step": "4", "timestamp": 9.0}\n' + b"\xff")
    settle(paths[0])
    reader = make_reader(paths)
    reader.poll()
    assert steps_of(reader) == [1, 3, 4]


def test_huge_files_are_fine(paths):
    junk_line = ("{junk " * 80_000)[:500_000] + "\n"  # long, JSON-looking, not JSON
    with open(paths[1], "w") as f:
        f.writelines([junk_line] * 20)  # 10 MB
        f.writelines(format_record(i, {"acc": 0.5}, T0 + i) for i in range(1000))
    with open(paths[0], "wb") as f:
        f.write(os.urandom(10 * 1024 * 1024) + b"\n")
        f.write(b'{"acc": "0.9", "global_step": "5000", "timestamp": 1.0}\n')
    reader = make_reader(paths)
    t = time.perf_counter()
    reader.poll()
    elapsed = time.perf_counter() - t
    assert steps_of(reader) == list(range(1000)) + [5000]
    assert elapsed < 10, f"two 10 MB files took {elapsed:.1f} s"  # well under 2 s when quiet; 10 s holds under load
    assert reader.poll() is False


def test_over_long_jsonl_line_is_skipped_to_its_end(paths, monkeypatch):
    monkeypatch.setattr(metrics_reader, "MAX_LINE_BYTES", 1000)
    with open(paths[1], "w") as f:
        f.write("x" * 5000)
    reader = make_reader(paths)
    reader.poll()
    with open(paths[1], "a") as f:  # the garbage line ends with what looks like a record
        f.write(format_record(6, {"acc": 0.6}, T0) + format_record(7, {"acc": 0.7}, T0))
    reader.poll()
    assert steps_of(reader) == [7]


def test_jsonl_wins_per_metric_and_hypertune_fills_the_rest(paths):
    fake = FakeHypertune(paths[0])
    fake.report("acc", -1.0, 1)
    fake.report("loss", 0.25, 1)
    with open(paths[1], "w") as f:
        f.write(format_record(1, {"acc": 0.5}, T0 + 9))
    reader = make_reader(paths)
    reader.poll()
    (m,) = reader.measurements()
    assert dict(m.metrics) == {"acc": 0.5, "loss": 0.25} and m.elapsed_s == 9


# --- cost ------------------------------------------------------------------------------------------
def test_unchanged_poll_does_not_open_files(paths, monkeypatch):
    FakeHypertune(paths[0]).report_steps(range(50))
    write_jsonl(paths[1], range(5))
    settle(paths[0])
    reader = make_reader(paths)
    reader.poll()

    def no_open(*args, **kwargs):
        raise AssertionError("an unchanged poll opened a file")

    monkeypatch.setattr(metrics_reader, "open", no_open, raising=False)
    assert reader.poll() is False and reader.poll() is False


def test_same_size_rewrite_within_the_same_mtime_is_not_missed(paths):
    # A coarse filesystem clock can give two rewrites of one size the same mtime ("racy clean").
    line = '{"acc": "%s", "global_step": "%d", "timestamp": %s}\n'
    with open(paths[0], "w") as f:
        f.write(line % ("0.1", 1, "1000001.5") + line % ("0.1", 2, "1000002.5"))
    mtime = os.stat(paths[0]).st_mtime_ns
    reader = make_reader(paths, metric_ids=["acc"])
    reader.poll()
    with open(paths[0], "w") as f:  # same size, one more report of step 2
        f.write(line % ("0.1", 1, "1000001.5") + line % ("0.2", 2, "1000003.5"))
    os.utime(paths[0], ns=(mtime, mtime))
    assert reader.poll() is True
    assert reader.measurements()[-1].metrics["acc"] == 0.2


def test_poll_cost(paths, capsys):
    fake = FakeHypertune(paths[0])
    fake.report_steps(range(50))  # a full 100-line file
    write_jsonl(paths[1], range(5))
    settle(paths[0])

    def per_call_us(fn, n):
        samples = []
        for _ in range(5):
            t = time.perf_counter()
            for _ in range(n):
                fn()
            samples.append((time.perf_counter() - t) / n * 1e6)
        return min(samples)

    reader = make_reader(paths)
    reader.poll()
    unchanged_us = per_call_us(reader.poll, 2000)
    first_read_us = per_call_us(lambda: make_reader(paths).poll(), 50)
    one_new_us = []
    for step in range(50, 150):  # each poll sees the full file with one new report
        fake.report("acc", 0.5, step)
        t = time.perf_counter()
        reader.poll()
        one_new_us.append((time.perf_counter() - t) * 1e6)
    one_new_us = statistics.median(one_new_us)
    with capsys.disabled():
        print(f"\npoll cost: unchanged {unchanged_us:.1f} us; full 100-line hypertune file with one "
              f"new report {one_new_us:.0f} us; first read of the 100-line file + 5-line jsonl "
              f"{first_read_us:.0f} us")
    # the costs are printed, not asserted (a loaded machine moves them; the rule: no timing bounds in tests)
    assert steps_of(reader) == list(range(150)) and reader.missing_steps_warning is None


# --- junk lines (issue 23 item 4) --------------------------------------------------------------------
HT_LINE = '{"acc": "%s", "global_step": "%d", "timestamp": %s}\n'


def test_a_junk_line_past_the_old_window_keeps_the_line_before_it(paths):
    with open(paths[0], "w") as f:
        f.write(HT_LINE % ("0.1", 1, T0 + 1) + "j" * (8 << 20) + "\n" + HT_LINE % ("0.3", 3, T0 + 3))
    settle(paths[0])
    reader = make_reader(paths)
    reader.poll()
    assert steps_of(reader) == [1, 3]
    warning = reader.missing_steps_warning
    assert warning and f"skipped a line of {8 << 20} bytes" in warning and paths[0] in warning


def test_a_hypertune_file_growing_around_a_junk_line_is_read_on_and_warned_once(paths):
    with open(paths[0], "w") as f:
        f.write(HT_LINE % ("0.1", 1, T0 + 1))
    reader = make_reader(paths)
    reader.poll(final=True)
    with open(paths[0], "a") as f:
        f.write("j" * (3 << 20))
    reader.poll(final=True)
    with open(paths[0], "a") as f:
        f.write("j\n" + HT_LINE % ("0.3", 3, T0 + 3))
    reader.poll(final=True)
    reader.poll(final=True)
    assert steps_of(reader) == [1, 3]
    assert reader.missing_steps_warning.count("skipped a line") == 1
    assert f"of {(3 << 20) + 1} bytes" in reader.missing_steps_warning


def test_a_junk_line_in_metrics_jsonl_is_skipped_with_a_warning(paths):
    with open(paths[1], "w") as f:
        f.write(format_record(1, {"acc": 0.1}, T0 + 1) + "x" * (2 << 20) + "\n")
        f.write(format_record(3, {"acc": 0.3}, T0 + 3))
    reader = make_reader(paths)
    reader.poll()
    assert steps_of(reader) == [1, 3]
    assert "metrics.jsonl: skipped a line of" in reader.missing_steps_warning


def test_a_500_mb_junk_line_is_never_held_in_memory(paths):
    import tracemalloc

    with open(paths[1], "wb") as f:
        f.write(format_record(1, {"acc": 0.1}, T0 + 1).encode())
        f.truncate(f.tell() + (500 << 20))  # a hole: read as NUL bytes, no disk space used
        f.seek(0, os.SEEK_END)
        f.write(b"\n" + format_record(3, {"acc": 0.3}, T0 + 3).encode())
    reader = make_reader(paths)
    tracemalloc.start()
    try:
        while reader.poll():  # a poll reads at most MAX_SCAN_BYTES: the rest on the next ones
            pass
        reader.poll(final=True)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert steps_of(reader) == [1, 3]
    assert peak < 16 << 20, f"peak {peak} bytes"


def test_a_file_larger_than_one_polls_read_is_read_on_by_the_next_polls(paths, monkeypatch):
    monkeypatch.setattr(metrics_reader, "MAX_SCAN_BYTES", 1 << 20)
    with open(paths[0], "w") as f:  # still being written (not settled): junk, then reports
        f.write(("x" * 1000 + "\n") * 3000 + HT_LINE % ("0.1", 1, T0 + 1) + HT_LINE % ("0.2", 2, T0 + 2))
    reader = make_reader(paths)
    for _ in range(4):
        reader.poll()
    assert steps_of(reader) == [1, 2]


# --- a rewrite its process's death cut short ---------------------------------------------------------
def cut(path, n_lines):
    """What a process killed in the middle of cloudml-hypertune's rewrite leaves: the file truncated,
    then its first ``n_lines`` entries (the library writes its buffer out at line ends)."""
    with open(path) as f:
        lines = f.readlines()
    with open(path, "w") as f:
        f.writelines(lines[:n_lines])


def test_an_empty_file_after_its_process_ended_is_a_cut_rewrite(paths):
    fake, reader = FakeHypertune(paths[0]), make_reader(paths)
    fake.report_steps(range(1, 11))
    reader.poll()
    fake.report_steps([11])
    cut(paths[0], 0)
    reader.poll()  # (its writer may still be writing: nothing said yet)
    assert reader.missing_steps_warning is None
    reader.poll(final=True)
    assert steps_of(reader) == list(range(1, 11))
    warning = reader.missing_steps_warning
    assert warning is not None and f"{paths[0]} was empty after its process ended" in warning
    assert "metrics.jsonl" in warning
    reader.poll(final=True)
    assert reader.missing_steps_warning == warning  # said once


def test_fewer_entries_than_read_before_is_a_cut_rewrite_and_what_was_read_is_kept(paths):
    fake, reader = FakeHypertune(paths[0]), make_reader(paths)
    fake.report_steps(range(1, 61))  # 120 entries: the file keeps the last 100 (steps 11..60)
    reader.poll()
    fake.report_steps([61])
    cut(paths[0], 74)
    reader.poll(final=True)
    assert steps_of(reader) == list(range(11, 61))
    assert "held 74 of its 100 entries after its process ended" in reader.missing_steps_warning


def test_a_whole_file_at_the_end_or_a_restarts_fresh_file_is_no_cut(paths):
    fake, reader = FakeHypertune(paths[0]), make_reader(paths)
    fake.report_steps(range(1, 31))
    reader.poll()
    cut(paths[0], 20)  # read in the middle of a rewrite while its process lives...
    reader.poll()
    fake.report_steps([31])  # ...which then ends whole
    reader.poll(final=True)
    assert reader.missing_steps_warning is None
    reader.on_restart()  # a restarted process: its file starts again with fewer entries
    fresh = FakeHypertune(paths[0], t0=T0 + 1000)
    fresh.report_steps([32])
    reader.poll(final=True)
    assert steps_of(reader) == list(range(1, 33)) and reader.missing_steps_warning is None


def test_a_resumed_reader_notes_the_empty_file_its_earlier_attempt_left(paths):
    FakeHypertune(paths[0]).report_steps(range(1, 5))
    cut(paths[0], 0)
    reader = make_reader(paths)  # a new controller reads what its dead predecessor's trainer left
    reader.poll(final=True)
    reader.on_restart()
    assert "was empty after its process ended" in reader.missing_steps_warning


def test_no_cut_is_said_when_the_lossless_log_is_there(paths):
    fake, reader = FakeHypertune(paths[0]), make_reader(paths)
    with open(paths[1], "w") as f:
        f.write(format_record(step=1, metrics={"acc": 0.5}, timestamp=T0))
    fake.report_steps([1])
    reader.poll()
    cut(paths[0], 0)
    reader.poll(final=True)
    assert reader.missing_steps_warning is None
