"""TensorBoard event files written with the standard library: scalars and HParams, read by TensorBoard itself."""

import os
import struct
import subprocess
import sys

import pytest

from trials.runtime.tensorboard import ScalarWriter, crc32c, masked_crc32c

SCRIPTS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "scripts")


def records(path):
    """Every TFRecord's payload, checking the framing and both CRCs as TensorBoard's reader does."""
    with open(path, "rb") as file:
        data = file.read()
    out, pos = [], 0
    while pos < len(data):
        header = data[pos:pos + 8]
        (length,) = struct.unpack("<Q", header)
        assert struct.unpack("<I", data[pos + 8:pos + 12])[0] == masked_crc32c(header)
        payload = data[pos + 12:pos + 12 + length]
        assert struct.unpack("<I", data[pos + 12 + length:pos + 16 + length])[0] == masked_crc32c(payload)
        out.append(payload)
        pos += 16 + length
    return out


def event_files(directory):
    return [os.path.join(directory, n) for n in os.listdir(directory) if n.startswith("events.out.tfevents.")]


def test_crc32c_is_castagnoli():
    assert crc32c(b"123456789") == 0xE3069283  # the standard check value
    assert crc32c(b"") == 0


def test_scalars_and_hparams_without_tensorboard_installed(tmp_path):
    writer = ScalarWriter(str(tmp_path), hparams={"learning_rate": 0.1, "optimizer": "adam", "deep": True})
    writer.add(1, {"accuracy": 0.5, "loss": 2.0}, 1796013114.0)
    writer.add(2, {"accuracy": 0.75}, 1796013115.0)
    writer.close()
    (path,) = event_files(tmp_path)
    payloads = records(path)
    assert len(payloads) == 5  # file version, session start, two steps, session end
    assert b"brain.Event:2" in payloads[0] and b"_hparams_/session_start_info" in payloads[1]
    assert b"accuracy" in payloads[2] and b"loss" in payloads[2] and b"_hparams_/session_end_info" in payloads[4]


def test_a_write_error_warns_once_and_never_raises(tmp_path):
    (tmp_path / "logs").write_text("a file where the directory should be")
    warnings = []
    writer = ScalarWriter(str(tmp_path / "logs"), warn=warnings.append)
    writer.add(1, {"a": 1.0})
    writer.add(2, {"a": 2.0})
    writer.close()
    assert len(warnings) == 1 and "TensorBoard scalars are off" in warnings[0] and writer.disabled


def test_tensorboard_reads_the_scalars_and_the_hparams(tmp_path):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.plugins.hparams import plugin_data_pb2

    writer = ScalarWriter(str(tmp_path), hparams={"learning_rate": 0.1, "optimizer": "adam", "layers": 3,
                                                  "deep": True})
    for step in (1, 2, 3):
        writer.add(step, {"accuracy": step / 4, "val/loss": 1.0 / step}, 1796013110.0 + step)
    writer.close(failed=True)
    acc = EventAccumulator(str(tmp_path))
    acc.Reload()
    scalars = acc.Scalars("accuracy")
    assert [(s.step, s.value, s.wall_time) for s in scalars] == [(1, 0.25, 1796013111.0), (2, 0.5, 1796013112.0),
                                                                 (3, 0.75, 1796013113.0)]
    assert [s.value for s in acc.Scalars("val/loss")] == pytest.approx([1.0, 0.5, 1 / 3])
    content = acc.PluginTagToContent("hparams")
    start = plugin_data_pb2.HParamsPluginData.FromString(content["_hparams_/session_start_info"])
    hparams = start.session_start_info.hparams
    assert hparams["learning_rate"].number_value == 0.1 and hparams["optimizer"].string_value == "adam"
    assert hparams["layers"].number_value == 3 and hparams["deep"].bool_value is True
    end = plugin_data_pb2.HParamsPluginData.FromString(content["_hparams_/session_end_info"])
    assert end.session_end_info.status == 2  # STATUS_FAILURE


@pytest.mark.integration
def test_a_sweep_leaves_tensorboard_runs_with_hparams_for_every_trial(tmp_path):
    """The default install (no tensorboardX): `tensorboard --logdir trials-jobs/JOB` compares the trials."""
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.plugin_event_multiplexer import EventMultiplexer
    from tensorboard.plugins.hparams import plugin_data_pb2

    spec = tmp_path / "spec.yaml"
    spec.write_text("metrics: {score: maximize}\nparameters:\n  learning_rate: {type: double, min: 0.1, max: 0.5}\n"
                    f"max_trial_count: 2\nparallel_trial_count: 1\ncommand: [python, {SCRIPTS}/counter_trial.py]\n"
                    "args: [--epochs=3]\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIP_", "CLOUD_ML_", "TRIALS_"))}
    out = subprocess.run([sys.executable, "-m", "trials", "sweep", str(spec), "--job-id", "tb", "--quiet",
                          "--root", str(tmp_path / "jobs")], capture_output=True, text=True, env=env,
                         cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    multiplexer = EventMultiplexer()
    multiplexer.AddRunsFromDirectory(str(tmp_path / "jobs" / "tb"))
    multiplexer.Reload()
    runs = sorted(multiplexer.Runs())
    assert runs == [os.path.join("1", "logs"), os.path.join("2", "logs")]
    for run in runs:
        assert [e.step for e in multiplexer.Tensors(run, "score")] == [1, 2, 3]
    content = multiplexer.PluginRunToTagToContent("hparams")
    rates = {run: plugin_data_pb2.HParamsPluginData.FromString(tags["_hparams_/session_start_info"])
             .session_start_info.hparams["learning_rate"].number_value for run, tags in content.items()}
    assert sorted(rates) == runs and all(0.1 <= r <= 0.5 for r in rates.values())
