"""Writes and reads in folders a trainer controls refuse links and FIFOs and never block."""

import os

import pytest

from trials import files


def test_append_refuses_a_planted_symlink_and_leaves_its_target_alone(tmp_path):
    victim = tmp_path / "journal.log"
    victim.write_text("precious\n")
    (tmp_path / "STOP").symlink_to(victim)
    with pytest.raises(files.NotRegularFileError):
        files.append_bytes(tmp_path / "STOP", b"x")
    assert victim.read_text() == "precious\n"


def test_open_for_writing_a_fifo_neither_blocks_nor_writes(tmp_path):
    os.mkfifo(tmp_path / "f")
    with pytest.raises(files.NotRegularFileError):
        files.open_append(tmp_path / "f")


def test_read_refuses_a_fifo_without_blocking(tmp_path):
    os.mkfifo(tmp_path / "metrics")
    with pytest.raises(files.NotRegularFileError, match="FIFO"):
        files.read_regular(tmp_path / "metrics", max_bytes=10)


def test_read_is_bounded_and_refuses_directories(tmp_path):
    (tmp_path / "big").write_bytes(b"a" * 5000)
    assert files.read_regular(tmp_path / "big", max_bytes=100) == b"a" * 100
    assert files.read_regular(tmp_path / "big", max_bytes=100, offset=4950) == b"a" * 50
    with pytest.raises(files.NotRegularFileError, match="directory"):
        files.read_regular(tmp_path, max_bytes=1)


def test_atomic_write_replaces_a_symlink_instead_of_following_it(tmp_path):
    victim = tmp_path / "journal.log"
    victim.write_text("precious\n")
    (tmp_path / "pids.json").symlink_to(victim)
    files.write_text_atomic(tmp_path / "pids.json", "{}")
    assert victim.read_text() == "precious\n"
    assert not (tmp_path / "pids.json").is_symlink()
    assert (tmp_path / "pids.json").read_text() == "{}"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["journal.log", "pids.json"]


def test_append_creates_and_appends(tmp_path):
    files.append_bytes(tmp_path / "log", b"a")
    files.append_bytes(tmp_path / "log", b"b")
    assert (tmp_path / "log").read_bytes() == b"ab"
