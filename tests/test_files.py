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


def test_makedirs_beneath_makes_the_folders_and_takes_existing_ones(tmp_path):
    top = tmp_path / "gcs"
    files.makedirs_beneath(str(top), str(top / "b" / "out" / "1" / "model"))
    files.makedirs_beneath(str(top), str(top / "b" / "out" / "1" / "model"))  # (again: nothing to do)
    files.makedirs_beneath(str(top), str(top / "b" / "out" / "2") + "/")
    assert sorted(p.name for p in (top / "b" / "out").iterdir()) == ["1", "2"]
    assert (top / "b" / "out" / "1" / "model").is_dir()


@pytest.mark.parametrize("where", ["b", "b/out", "b/out/2", "b/out/2/model"])
def test_makedirs_beneath_never_goes_through_a_planted_link(tmp_path, where):
    """A trainer writes the bucket folder (/gcs): a link it plants on the way to another trial's output folder
    would have the controller, as root, make folders wherever the link points."""
    top, victim = tmp_path / "gcs", tmp_path / "victim"
    victim.mkdir()
    (top / where).parent.mkdir(parents=True, exist_ok=True)
    (top / where).symlink_to(victim)
    with pytest.raises(NotADirectoryError, match="refusing a symlink where a folder was expected") as err:
        files.makedirs_beneath(str(top), str(top / "b" / "out" / "2" / "model"))
    assert err.value.filename == str(top / where)
    assert list(victim.iterdir()) == []


def test_makedirs_beneath_refuses_a_file_on_the_way_and_follows_only_top(tmp_path):
    real = tmp_path / "real"
    real.mkdir()
    top = tmp_path / "top"
    top.symlink_to(real)  # the top is the user's own: followed as it is
    files.makedirs_beneath(str(top), str(top / "a" / "b"))
    assert (real / "a" / "b").is_dir()
    (real / "f").write_text("x")
    with pytest.raises(NotADirectoryError, match="refusing a regular file"):
        files.makedirs_beneath(str(top), str(top / "f" / "model"))
    elsewhere = tmp_path / "elsewhere" / "x"
    files.makedirs_beneath(str(top), str(elsewhere))  # not beneath top: as os.makedirs
    files.makedirs_beneath("", str(tmp_path / "no-top"))
    assert elsewhere.is_dir() and (tmp_path / "no-top").is_dir()


def test_is_beneath_compares_whole_components_by_absolute_name():
    assert files.is_beneath("/srv/root/out/1", "/srv/root")
    assert files.is_beneath("/srv/root", "/srv/root/")
    assert files.is_beneath("/srv/root/a/../b", "/srv/root")
    assert not files.is_beneath("/srv/rootless/out", "/srv/root")  # (a prefix of the name is not a folder)
    assert not files.is_beneath("/srv/root/../etc", "/srv/root")
    assert files.is_beneath("/anything", "/")
