"""The metrics reader against real processes writing through the real cloudml-hypertune library."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from trials import protocol
from trials.controller.trial.metrics_reader import TrialMetricsReader

pytestmark = pytest.mark.integration
pytest.importorskip("hypertune")

N_STEPS = 300
METRICS = ("acc", "loss")

# Reports N_STEPS steps of two metrics; with "jsonl" it also appends every report to metrics.jsonl
# as the trials runtime does (one write of a whole line, then flush). After step 0 it waits for the
# go file, so the reader has read the fresh file once (as a controller polling from the trial's
# start does); then it reports the rest back to back.
CHILD = """
import os
import sys
import time
import hypertune
from trials.records import format_record

n_steps, mode, jsonl_path, go_path = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
ht = hypertune.HyperTune()
log = open(jsonl_path, "a") if mode == "jsonl" else None
for step in range(n_steps):
    if step == 1:
        deadline = time.monotonic() + 30
        while not os.path.exists(go_path) and time.monotonic() < deadline:
            time.sleep(0.001)
    acc, loss = step / 1000, 1 - step / 1000
    if log is not None:
        log.write(format_record(step, {"acc": acc, "loss": loss}, time.time()))
        log.flush()
    ht.report_hyperparameter_tuning_metric("acc", acc, step)
    ht.report_hyperparameter_tuning_metric("loss", loss, step)
"""


def expected(step: int) -> dict[str, float]:
    return {"acc": step / 1000, "loss": 1 - step / 1000}


def check(reader: TrialMetricsReader, *, running: bool) -> None:
    """What must hold at every poll: sorted unique steps, right values, complete unless flagged."""
    ms = reader.measurements()
    steps = [m.step for m in ms]
    assert steps == sorted(set(steps))
    last = steps[-1] if steps else None
    for m in ms:
        assert 0 <= m.step < N_STEPS
        assert set(m.metrics) <= set(METRICS)
        for tag, value in m.metrics.items():
            assert value == pytest.approx(expected(m.step)[tag]), (m.step, tag)
        if set(m.metrics) != set(METRICS):
            # half a step: the newest step mid-report, or the edge of a flagged gap
            assert (running and m.step == last) or reader.missing_steps_warning, m
    assert reader.unknown_tags == set() and reader.conflicts == 0


def run_child(tmp_path, mode: str) -> tuple[TrialMetricsReader, int, str, str]:
    ht_path = str(tmp_path / protocol.HYPERTUNE_FILE)
    jsonl_path = str(tmp_path / protocol.METRICS_LOG)
    env = dict(os.environ, **{protocol.ENV_METRIC_FILE: ht_path, protocol.ENV_TRIAL_ID: "7"})
    reader = TrialMetricsReader(ht_path, jsonl_path, METRICS, start_time=time.time())
    go_path = tmp_path / "go"
    proc = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(N_STEPS), mode, jsonl_path, str(go_path)], env=env)
    n_polls = 0
    deadline = time.monotonic() + 60
    try:
        while proc.poll() is None:  # a tight loop: the worst case for torn and empty reads
            reader.poll()
            n_polls += 1
            check(reader, running=True)
            got = reader.measurements()
            if not go_path.exists() and len(got) == 1 and len(got[0].metrics) == len(METRICS):
                go_path.touch()
            assert time.monotonic() < deadline, "the child did not finish"
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
    assert proc.returncode == 0
    reader.poll()
    check(reader, running=False)
    return reader, n_polls, ht_path, jsonl_path


def test_real_hypertune_back_to_back_reports(tmp_path, capsys):
    reader, n_polls, ht_path, jsonl_path = run_child(tmp_path, "hypertune")
    steps = {m.step for m in reader.measurements()}
    assert reader.source == "hypertune"
    assert set(range(N_STEPS - 50, N_STEPS)) <= steps  # the last 100 entries are always there
    for m in reader.measurements():
        if m.step >= N_STEPS - 50:
            assert dict(m.metrics) == pytest.approx(expected(m.step))
    if steps != set(range(N_STEPS)):
        assert reader.missing_steps_warning is not None
    with capsys.disabled():
        print(f"\nlive hypertune: {n_polls} polls while running, {len(steps)}/{N_STEPS} steps "
              f"caught, warning: {reader.missing_steps_warning is not None}")

    late = TrialMetricsReader(ht_path, jsonl_path, METRICS, start_time=0)  # read only after exit
    late.poll()
    assert [m.step for m in late.measurements()] == list(range(N_STEPS - 50, N_STEPS))
    assert f"before step {N_STEPS - 50}" in late.missing_steps_warning


def test_real_hypertune_with_metrics_jsonl_loses_nothing(tmp_path):
    reader, _, _, _ = run_child(tmp_path, "jsonl")
    assert reader.source == protocol.METRICS_LOG
    ms = reader.measurements()
    assert [m.step for m in ms] == list(range(N_STEPS))
    assert all(dict(m.metrics) == pytest.approx(expected(m.step)) for m in ms)
    assert reader.missing_steps_warning is None
