"""Unit tests of the incremental line reader of metric files: junk lines, torn lines, rewrites."""

from __future__ import annotations

import os

from trials.controller.trial import line_tail
from trials.controller.trial.line_tail import LineTail


def read(tail, path, *, max_line=100, max_scan=None):
    fd = os.open(path, os.O_RDONLY)
    try:
        scan = tail.scan(fd, os.fstat(fd), max_line_bytes=max_line, max_scan_bytes=max_scan)
        lines = list(scan.lines())
    finally:
        os.close(fd)
    tail.commit(scan)
    return lines, scan


def test_lines_are_read_once_and_a_torn_line_waits_for_its_newline(tmp_path):
    path = tmp_path / "m"
    path.write_bytes(b"a\nb\nc")
    tail = LineTail(rewritten_whole=False)
    lines, scan = read(tail, path)
    assert lines == [b"a", b"b"] and scan.torn and scan.at_eof and not scan.continued
    with open(path, "ab") as f:
        f.write(b"d\ne\n")
    lines, scan = read(tail, path)
    assert lines == [b"cd", b"e"] and not scan.torn and scan.continued


def test_an_over_long_line_is_skipped_with_its_size_and_the_lines_around_it_kept(tmp_path, monkeypatch):
    monkeypatch.setattr(line_tail, "CHUNK_BYTES", 64)
    path = tmp_path / "m"
    path.write_bytes(b"one\n" + b"x" * 1000 + b"\nthree\n")
    lines, scan = read(LineTail(rewritten_whole=False), path)
    assert lines == [b"one", b"three"] and scan.skipped == [(4, 1000)]


def test_an_over_long_line_still_growing_is_skipped_across_reads_in_bounded_steps(tmp_path, monkeypatch):
    monkeypatch.setattr(line_tail, "CHUNK_BYTES", 64)
    path = tmp_path / "m"
    path.write_bytes(b"one\n" + b"x" * 300)
    tail = LineTail(rewritten_whole=False)
    lines, scan = read(tail, path, max_scan=128)
    assert lines == [b"one"] and not scan.at_eof and scan.state.skipping
    lines, scan = read(tail, path, max_scan=128)
    assert lines == [] and not scan.at_eof and scan.state.offset == 256  # 128 bytes a read
    lines, scan = read(tail, path, max_scan=128)
    assert lines == [] and scan.at_eof and scan.state.skipping == 300
    with open(path, "ab") as f:
        f.write(b"y" * 50 + b"\nthree\n")
    lines, scan = read(tail, path)
    assert lines == [b"three"] and scan.skipped == [(4, 350)]


def test_a_file_rewritten_whole_is_read_from_its_start_and_a_grown_one_from_its_end(tmp_path):
    path = tmp_path / "m"
    path.write_bytes(b"1\n2\n")
    tail = LineTail(rewritten_whole=True)
    assert read(tail, path)[0] == [b"1", b"2"]
    path.write_bytes(b"1\n2\n3\n")  # a rewrite with one more line: it goes on
    lines, scan = read(tail, path)
    assert lines == [b"3"] and scan.continued
    path.write_bytes(b"2\n3\n4\n")  # the oldest line dropped (same size): from the start
    lines, scan = read(tail, path)
    assert lines == [b"2", b"3", b"4"] and not scan.continued
    path.write_bytes(b"2\n9\n4\n5\n")  # the bytes before the last end changed: from the start
    assert read(tail, path)[0] == [b"2", b"9", b"4", b"5"]
    path.write_bytes(b"2\n")  # shrunk
    assert read(tail, path)[0] == [b"2"]
    os.replace(tmp_path / "m", tmp_path / "old")
    path.write_bytes(b"2\n7\n")  # another inode
    assert read(tail, path)[0] == [b"2", b"7"]
    tail.reset()
    assert read(tail, path)[0] == [b"2", b"7"]


def test_an_append_only_file_is_not_fingerprinted(tmp_path):
    path = tmp_path / "m"
    path.write_bytes(b"1\n2\n")
    tail = LineTail(rewritten_whole=False)
    read(tail, path)
    path.write_bytes(b"9\n9\n3\n")  # same inode, grown: taken as appended
    assert read(tail, path)[0] == [b"3"]
