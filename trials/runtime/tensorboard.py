"""Each report as TensorBoard scalars in AIP_TENSORBOARD_LOG_DIR, plus the trial's hparams; stdlib only.

An event file is a TFRecord stream (length, masked CRC32C of the length, data, masked CRC32C of the
data) of ``tensorflow.Event`` protos, hand-encoded here for the few fields used: ``wall_time``,
``step``, ``file_version`` and ``summary.value{tag, simple_value}``. The HParams plugin's
``session_start_info`` (the trial's hyperparameters) and ``session_end_info`` summaries let
TensorBoard's HParams view compare trials. No tensorboard or tensorboardX needed.
"""

from __future__ import annotations

import os
import socket
import struct
import time
from collections.abc import Callable, Mapping
from typing import Any

FILE_VERSION = "brain.Event:2"
HPARAMS_PLUGIN = "hparams"
SESSION_START_TAG = "_hparams_/session_start_info"
SESSION_END_TAG = "_hparams_/session_end_info"
STATUS_SUCCESS, STATUS_FAILURE = 1, 2  # tensorboard.hparams.Status


def _crc32c_table() -> list[int]:
    table = []
    for byte in range(256):
        crc = byte
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
        table.append(crc)
    return table


_TABLE = _crc32c_table()


def crc32c(data: bytes) -> int:
    crc = 0xFFFFFFFF
    for byte in data:
        crc = _TABLE[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def masked_crc32c(data: bytes) -> int:
    crc = crc32c(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def tf_record(data: bytes) -> bytes:
    """One TFRecord: the framing TensorBoard's reader checks."""
    length = struct.pack("<Q", len(data))
    return length + struct.pack("<I", masked_crc32c(length)) + data + struct.pack("<I", masked_crc32c(data))


# --- protobuf wire format: just what Event, Summary and HParamsPluginData need ---------------------
def _varint(value: int) -> bytes:
    value &= (1 << 64) - 1  # negative int64 as two's complement
    out = bytearray()
    while True:
        bits, value = value & 0x7F, value >> 7
        out.append(bits | (0x80 if value else 0))
        if not value:
            return bytes(out)


def _key(field: int, wire: int) -> bytes:
    return _varint(field << 3 | wire)


def _bytes(field: int, data: bytes) -> bytes:
    return _key(field, 2) + _varint(len(data)) + data


def _double(field: int, value: float) -> bytes:
    return _key(field, 1) + struct.pack("<d", value)


def _float(field: int, value: float) -> bytes:
    return _key(field, 5) + struct.pack("<f", value)


def _int(field: int, value: int) -> bytes:
    return _key(field, 0) + _varint(value)


def encode_event(wall_time: float, *, step: int = 0, summary: bytes | None = None,
                 file_version: str | None = None) -> bytes:
    """``tensorflow.Event``: wall_time=1, step=2, file_version=3, summary=5."""
    out = _double(1, wall_time) + (_int(2, step) if step else b"")
    if file_version is not None:
        out += _bytes(3, file_version.encode())
    if summary is not None:
        out += _bytes(5, summary)
    return out


def scalar_summary(values: Mapping[str, float]) -> bytes:
    """``Summary{value{tag=1, simple_value=2}}`` for each metric."""
    return b"".join(_bytes(1, _bytes(1, tag.encode()) + _float(2, float(v))) for tag, v in values.items())


def _proto_value(value: Any) -> bytes:
    """``google.protobuf.Value``: number_value=2, string_value=3, bool_value=4."""
    if isinstance(value, bool):
        return _int(4, int(value))
    if isinstance(value, (int, float)):
        return _double(2, float(value))
    return _bytes(3, str(getattr(value, "value", value)).encode())


def _plugin_summary(tag: str, plugin_data: bytes) -> bytes:
    """``Summary{value{tag, metadata{plugin_data{plugin_name, content}}}}``."""
    metadata = _bytes(1, _bytes(1, HPARAMS_PLUGIN.encode()) + _bytes(2, plugin_data))
    return _bytes(1, _bytes(1, tag.encode()) + _bytes(9, metadata))


def session_start_summary(hparams: Mapping[str, Any], start_time: float) -> bytes:
    """HParamsPluginData{session_start_info=3{hparams=1 (map), start_time_secs=5}}."""
    entries = b"".join(_bytes(1, _bytes(1, name.encode()) + _bytes(2, _proto_value(value)))
                       for name, value in hparams.items() if value is not None)
    return _plugin_summary(SESSION_START_TAG, _bytes(3, entries + _double(5, start_time)))


def session_end_summary(status: int, end_time: float) -> bytes:
    """HParamsPluginData{session_end_info=4{status=1, end_time_secs=2}}."""
    return _plugin_summary(SESSION_END_TAG, _bytes(4, _int(1, status) + _double(2, end_time)))


class EventFileWriter:
    """Appends events to ``events.out.tfevents.<time>.<host>.<pid>`` in ``logdir`` (created)."""

    def __init__(self, logdir: str, *, now: float | None = None):
        now = time.time() if now is None else now
        os.makedirs(logdir, exist_ok=True)
        name = f"events.out.tfevents.{int(now):010d}.{socket.gethostname()}.{os.getpid()}.trials"
        self.path = os.path.join(logdir, name)
        self._file = open(self.path, "ab")  # noqa: SIM115 - kept open for the trial's life
        self.write(encode_event(now, file_version=FILE_VERSION))

    def write(self, event: bytes) -> None:
        self._file.write(tf_record(event))
        self._file.flush()  # TensorBoard sees each step while the trial runs

    def close(self) -> None:
        self._file.close()


class ScalarWriter:
    """Writes each report's metrics as scalars, and the hparams once, opening the file on first use.

    A write error says so once through ``warn`` and turns the writer off: TensorBoard output never
    fails a trial.

    Args:
        logdir: the event files' directory.
        warn: called once with a message when scalars cannot be written.
        hparams: the trial's hyperparameters, written as the HParams plugin's session start.
    """

    def __init__(self, logdir: str, *, warn: Callable[[str], None] | None = None,
                 hparams: Mapping[str, Any] | None = None):
        self.logdir = logdir
        self._warn = warn or (lambda message: None)
        self._hparams = dict(hparams or {})
        self._writer: EventFileWriter | None = None
        self.disabled = False

    def _guard(self, action: Callable[[], None]) -> None:
        if self.disabled:
            return
        try:
            action()
        except Exception as err:  # noqa: BLE001 - TensorBoard output must never fail the trial
            self.disabled = True
            self._warn(f"TensorBoard scalars are off after an error writing to {self.logdir}: "
                       f"{type(err).__name__}: {err}")

    def _open(self) -> EventFileWriter:
        if self._writer is None:
            now = time.time()
            self._writer = EventFileWriter(self.logdir, now=now)
            if self._hparams:
                self._writer.write(encode_event(now, summary=session_start_summary(self._hparams, now)))
        return self._writer

    def add(self, step: int, metrics: Mapping[str, float], timestamp: float | None = None) -> None:
        """Write every metric of one step (flushed, so TensorBoard sees it while the trial runs)."""
        wall_time = time.time() if timestamp is None else timestamp
        self._guard(lambda: self._open().write(encode_event(wall_time, step=step,
                                                            summary=scalar_summary(metrics))))

    def close(self, *, failed: bool = False) -> None:
        """End the HParams session (success or failure) and close the file."""
        writer, self._writer = self._writer, None
        if writer is None:
            return
        if self._hparams and not self.disabled:
            now = time.time()
            status = STATUS_FAILURE if failed else STATUS_SUCCESS
            self._guard(lambda: writer.write(encode_event(now, summary=session_end_summary(status, now))))
        try:
            writer.close()
        except OSError as err:
            self._warn(f"closing the TensorBoard event file failed: {type(err).__name__}: {err}")
