"""trials/controller/report/staged_folder.py: a folder written beside its place, swapped in whole."""

from __future__ import annotations

import fcntl
import os

import pytest

from trials.controller.report import page as report
from trials.controller.report import staged_folder


def _tree(path):
    return {p: open(os.path.join(path, p)).read() for p in sorted(os.listdir(path))}


def test_the_new_folder_replaces_the_old_whole_and_nothing_is_left_beside(tmp_path):
    target = tmp_path / "report"
    with staged_folder.staged(str(target)) as staging:
        assert not target.exists() and os.path.dirname(staging) == str(tmp_path)
        (tmp_path / os.path.basename(staging) / "a.txt").write_text("one")
    assert _tree(target) == {"a.txt": "one"}
    with staged_folder.staged(str(target)) as staging:
        (tmp_path / os.path.basename(staging) / "b.txt").write_text("two")
        assert _tree(target) == {"a.txt": "one"}  # the old one, whole, while the new one is written
    assert _tree(target) == {"b.txt": "two"}
    assert sorted(os.listdir(tmp_path)) == ["report"]


def test_without_rename_exchange_the_old_folder_is_renamed_aside_then_removed(tmp_path, monkeypatch):
    monkeypatch.setattr(staged_folder, "_exchange", lambda a, b: False)
    target = tmp_path / "report"
    target.mkdir()
    (target / "old.txt").write_text("old")
    with staged_folder.staged(str(target)) as staging:
        (tmp_path / os.path.basename(staging) / "new.txt").write_text("new")
    assert _tree(target) == {"new.txt": "new"}
    assert sorted(os.listdir(tmp_path)) == ["report"]


def test_a_failed_write_changes_nothing(tmp_path):
    target = tmp_path / "report"
    target.mkdir()
    (target / "old.txt").write_text("old")
    with pytest.raises(RuntimeError), staged_folder.staged(str(target)) as staging:
        (tmp_path / os.path.basename(staging) / "half.txt").write_text("half")
        raise RuntimeError("killed")
    assert _tree(target) == {"old.txt": "old"}
    assert sorted(os.listdir(tmp_path)) == ["report"]


def test_leftovers_of_a_dead_writer_go_and_a_live_writers_folder_stays(tmp_path):
    dead = tmp_path / ".report.partial-dead"
    dead.mkdir()
    (dead / "x.png").write_text("half")
    old = tmp_path / ".report.old-dead"
    old.mkdir()
    live = tmp_path / ".report.partial-live"
    live.mkdir()
    other = tmp_path / ".other.partial-x"  # another folder's: not touched
    other.mkdir()
    fd = os.open(live, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # a writer still at work
        removed = staged_folder.remove_leftovers(str(tmp_path), "report")
    finally:
        os.close(fd)
    assert sorted(os.path.basename(p) for p in removed) == [".report.old-dead", ".report.partial-dead"]
    assert sorted(os.listdir(tmp_path)) == [".other.partial-x", ".report.partial-live"]


def test_only_folders_of_an_earlier_report_are_replaced(tmp_path):
    report.check_replaceable(str(tmp_path / "new"))  # not there yet
    (tmp_path / "index.html").write_text("x")
    (tmp_path / "optimization_history.png").write_text("x")
    (tmp_path / "index.html.123.tmp").write_text("x")
    report.check_replaceable(str(tmp_path))
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(ValueError, match=r"expected a new folder or an earlier report .* also holds notes\.txt"):
        report.check_replaceable(str(tmp_path))
    with pytest.raises(ValueError, match="expected a folder for the report, got a file"):
        report.check_replaceable(str(tmp_path / "notes.txt"))
    assert staged_folder.is_leftover(".report.partial-abc", "report")
    assert not staged_folder.is_leftover("report", "report") and not staged_folder.is_leftover(".x.old-1", "report")
