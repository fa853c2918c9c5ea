"""One parser of the cloudml-hypertune file serves the controller's reader and the runtime's local view."""

from trials.hypertune_file import hypertune_measurements, parse_hypertune_text
from trials.runtime.reporting import read_hypertune_file


def test_the_runtime_reads_the_file_as_the_controller_does(tmp_path):
    path = tmp_path / "hypertune.metrics"
    path.write_text(
        '{"acc": "0.5", "note": "not a number", "global_step": "1", "timestamp": 10.0}\n'
        '{"loss": "2", "global_step": "1", "timestamp": 10.5}\n'
        '{"acc": "0.7", "global_step": "-3"}\n'  # a negative step is not a step
        '{"acc": "0.9", "global_step": "2", "trial": "1"}\n'
        '{"acc": "0.95", "global_st')  # torn by a rewrite
    got = read_hypertune_file(str(path))
    assert [(m.step, dict(m.metrics), m.timestamp) for m in got] == [
        (1, {"acc": 0.5, "loss": 2.0}, 10.0), (2, {"acc": 0.9}, None)]
    assert got == hypertune_measurements(parse_hypertune_text(path.read_text()))


def test_a_later_line_for_a_step_wins():
    lines = parse_hypertune_text('{"a": "1", "global_step": "3"}\n{"a": "2", "global_step": "3"}\n')
    assert [dict(m.metrics) for m in hypertune_measurements(lines)] == [{"a": 2.0}]
