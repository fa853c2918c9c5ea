"""Unit tests of the bucket folder store's streamed writes and appends (the endpoint's use: test_streamed_writes)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from trials.controller.gcs.beneath import Refused, Store


def test_a_stream_is_written_piece_by_piece_and_a_failed_check_leaves_nothing_at_the_name(tmp_path: Path) -> None:
    store = Store(str(tmp_path))
    store.write_stream("b/o", (b"ab", b"", b"cd"))
    assert (tmp_path / "b" / "o").read_bytes() == b"abcd"

    def refuse() -> None:
        raise ValueError("checksum")

    with pytest.raises(ValueError, match="checksum"):
        store.write_stream("b/o", (b"new",), before_rename=refuse)
    with pytest.raises(ValueError, match="checksum"):
        store.write_stream("b/p", (b"new",), before_rename=refuse)
    assert sorted(os.listdir(tmp_path / "b")) == ["o"] and (tmp_path / "b" / "o").read_bytes() == b"abcd"
    os.symlink(tmp_path / "elsewhere", tmp_path / "b" / "l")
    with pytest.raises(Refused):
        store.write_stream("b/l", (b"x",))
    assert not (tmp_path / "elsewhere").exists()


def test_an_append_adds_without_reading_and_replaces_a_planted_link_or_fifo(tmp_path: Path) -> None:
    store = Store(str(tmp_path))
    assert store.size("_r/u") == 0
    assert store.append("_r/u", b"abc") == 3 and store.append("_r/u", b"de") == 5
    assert store.size("_r/u") == 5 and (tmp_path / "_r" / "u").read_bytes() == b"abcde"
    victim = tmp_path / "victim"
    victim.write_bytes(b"V")
    (tmp_path / "_r" / "u").unlink()
    os.symlink(victim, tmp_path / "_r" / "u")
    assert store.size("_r/u") == 0  # a link is no upload's file
    assert store.append("_r/u", b"x") == 1
    assert victim.read_bytes() == b"V" and not (tmp_path / "_r" / "u").is_symlink()
    (tmp_path / "_r" / "u").unlink()
    os.mkfifo(tmp_path / "_r" / "u")
    assert store.append("_r/u", b"yz") == 2  # (a FIFO nobody reads: never waited on)
    assert (tmp_path / "_r" / "u").read_bytes() == b"yz"
    (tmp_path / "_r" / "d").mkdir()
    with pytest.raises(IsADirectoryError):
        store.append("_r/d", b"x")
