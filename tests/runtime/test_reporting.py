"""Tests for trials.runtime.reporting: the real hypertune file, metrics.jsonl, dedupe after restarts."""

import json
import math
import os
from pathlib import Path

import pytest

from trials.errors import MetricsError
from trials.records import parse_records
from trials.runtime.reporting import (
    Reporter,
    check_metrics,
    check_step,
    read_hypertune_file,
    read_metrics_log,
)


class FakeScalars:
    def __init__(self):
        self.added, self.closed = [], False

    def add(self, step, metrics, timestamp):
        self.added.append((step, dict(metrics), timestamp))

    def close(self, failed=False):
        self.closed = True


@pytest.fixture
def paths(tmp_path, monkeypatch):
    metric_file = tmp_path / "hp" / "nested" / "hypertune.metrics"
    monkeypatch.setenv("CLOUD_ML_HP_METRIC_FILE", str(metric_file))
    monkeypatch.setenv("CLOUD_ML_TRIAL_ID", "4")
    return str(tmp_path / "trial" / "metrics.jsonl"), str(metric_file)


def test_each_metric_goes_through_hypertune_and_one_line_to_metrics_jsonl(paths):
    log, metric_file = paths
    scalars = FakeScalars()
    reporter = Reporter(metrics_log=log, metric_file=metric_file, attempt=2, scalars=scalars)
    assert reporter.report(1, {"accuracy": 0.5, "loss": 2})
    assert reporter.report(2, {"accuracy": 0.75, "loss": 1})
    reporter.close()
    lines = [json.loads(line) for line in Path(metric_file).read_text().splitlines()]
    assert len(lines) == 4  # hypertune writes one line per metric per call
    assert lines[0]["accuracy"] == "0.5" and lines[0]["global_step"] == "1" and lines[0]["trial"] == "4"
    assert lines[1]["loss"] == "2.0"
    records = parse_records(Path(log).read_text())
    assert [(m.step, dict(m.metrics), m.attempt) for m in records] == [
        (1, {"accuracy": 0.5, "loss": 2.0}, 2), (2, {"accuracy": 0.75, "loss": 1.0}, 2)]
    assert records[0].timestamp == lines[0]["timestamp"]  # the same timestamp in both files
    assert [s for s, _, _ in scalars.added] == [1, 2] and scalars.closed
    assert [(m.step, dict(m.metrics)) for m in read_hypertune_file(metric_file)] == [
        (1, {"accuracy": 0.5, "loss": 2.0}), (2, {"accuracy": 0.75, "loss": 1.0})]


def test_a_restart_never_reports_a_step_twice(paths):
    log, metric_file = paths
    first = Reporter(metrics_log=log, metric_file=metric_file)
    for step in (1, 2, 3):
        first.report(step, {"accuracy": step / 10})
    first.close()
    skipped = []
    second = Reporter(metrics_log=log, metric_file=metric_file, attempt=1,
                      on_skip=lambda s, last: skipped.append((s, last)))
    assert second.last_step == 3 and second.last_metrics == {"accuracy": 0.3}
    assert not second.report(2, {"accuracy": 0.2}) and not second.report(3, {"accuracy": 0.3})
    assert second.report(4, {"accuracy": 0.4})
    second.close()
    assert skipped == [(2, 3), (3, 3)]
    assert [m.step for m in read_metrics_log(log)] == [1, 2, 3, 4]
    assert [m.step for m in read_hypertune_file(metric_file)] == [4]  # a fresh library queue


def test_steps_must_increase_within_one_process(paths):
    log, metric_file = paths
    reporter = Reporter(metrics_log=log, metric_file=metric_file)
    reporter.report(5, {"a": 1})
    assert not reporter.report(5, {"a": 2})
    assert len(read_metrics_log(log)) == 1


def test_metric_file_directory_is_created_with_exist_ok(paths):
    log, metric_file = paths
    os.makedirs(os.path.dirname(metric_file))  # the library's own makedirs would raise here
    reporter = Reporter(metrics_log=log, metric_file=metric_file)
    assert reporter.report(0, {"a": 1})


def test_local_path_overrides_the_library_default(tmp_path, monkeypatch):
    monkeypatch.delenv("CLOUD_ML_HP_METRIC_FILE", raising=False)
    monkeypatch.setattr("trials.runtime.reporting.HYPERTUNE_DEFAULT_FILE", str(tmp_path / "d" / "x"))
    target = str(tmp_path / "run" / "hypertune.metrics")
    reporter = Reporter(metrics_log=str(tmp_path / "run" / "metrics.jsonl"), metric_file=target)
    reporter._hypertune_instance()
    assert reporter._hypertune.metric_path == target
    reporter.report(1, {"a": 1.0})
    assert os.path.exists(target)


def test_nonfinite_is_reported_only_when_allowed(paths):
    log, metric_file = paths
    reporter = Reporter(metrics_log=log, metric_file=metric_file)
    with pytest.raises(MetricsError, match="metric 'loss' is nan; pass allow_nonfinite=True"):
        reporter.report(1, {"loss": float("nan")})
    assert reporter.report(1, {"loss": float("nan")}, allow_nonfinite=True)
    assert json.loads(Path(metric_file).read_text().splitlines()[0])["loss"] == "nan"
    assert math.isnan(read_metrics_log(log)[0].metrics["loss"])


@pytest.mark.parametrize("metrics, needle", [
    ({}, "at least one metric"),
    ({"a": "0.5"}, "metric 'a' must be a number, got '0.5'"),
    ({"a": True}, "must be a number"),
    ({"a": None}, "must be a number"),
    ({"": 1.0}, "metric name"),
    ({"a": float("inf")}, "is inf"),
    ({"a": [1]}, "must be a number"),
])
def test_bad_metrics(metrics, needle):
    with pytest.raises(MetricsError, match=None) as info:
        check_metrics(metrics)
    assert needle in str(info.value)


@pytest.mark.parametrize("step", [-1, 1.5, "2", True, None])
def test_bad_steps(step):
    with pytest.raises(MetricsError, match="step must be an integer >= 0"):
        check_step(step)


def test_numpy_like_values_are_accepted():
    class Scalar:
        def __float__(self):
            return 0.25

        def __index__(self):
            return 3

    assert check_metrics({"a": Scalar()}) == {"a": 0.25}
    assert check_step(Scalar()) == 3


def test_reading_skips_torn_lines(tmp_path):
    path = tmp_path / "h"
    path.write_text('{"a": "1.0", "global_step": "1", "timestamp": 1.0, "trial": "1"}\n{"a": "2.')
    assert [(m.step, dict(m.metrics)) for m in read_hypertune_file(str(path))] == [(1, {"a": 1.0})]
    assert read_hypertune_file(str(tmp_path / "missing")) == []
    assert read_metrics_log(str(tmp_path / "missing")) == []
