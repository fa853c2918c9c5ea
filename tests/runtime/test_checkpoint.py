"""Tests for trials.runtime.checkpoint: atomic writes, keep-last-K, torn/corrupt checkpoints skipped."""

import os
import pickle
import subprocess
import sys

import pytest

from trials.errors import CheckpointError
from trials.runtime.checkpoint import (
    JSON_FORMAT,
    NPZ_FORMAT,
    CheckpointFormat,
    CheckpointStore,
    checkpoint_name,
    parse_checkpoint_name,
)


def test_save_and_load_latest(tmp_path):
    store = CheckpointStore(str(tmp_path / "ckpt"))
    assert store.load_latest() is None and store.steps() == []
    path = store.save({"w": [1, 2], "epoch": 1}, 1)
    assert os.path.basename(path) == "ckpt-00000001.json"
    store.save({"w": [3], "epoch": 2}, 2)
    assert store.load_latest() == (2, {"w": [3], "epoch": 2})


def test_keeps_only_the_newest_k(tmp_path):
    store = CheckpointStore(str(tmp_path), keep=2)
    for step in range(1, 6):
        store.save({"s": step}, step)
    assert store.steps() == [4, 5]
    assert sorted(os.listdir(tmp_path)) == ["ckpt-00000004.json", "ckpt-00000005.json"]


def test_torn_newest_checkpoint_is_skipped_for_the_previous(tmp_path):
    warnings = []
    store = CheckpointStore(str(tmp_path), warn=warnings.append)
    store.save({"s": 1}, 1)
    store.save({"s": 2}, 2)
    with open(store.path(3), "w") as f:
        f.write('{"s": ')  # a torn write that bypassed the store
    open(store.path(4), "w").close()  # an empty file
    assert store.load_latest() == (2, {"s": 2})
    assert len(warnings) == 2 and "step 4" in warnings[0] and "empty" in warnings[0]
    assert store.steps() == [1, 2]  # the bad ones were moved aside, kept for inspection
    assert any(n.startswith(".corrupt-ckpt-00000003") for n in os.listdir(tmp_path))


def test_all_corrupt_means_no_checkpoint(tmp_path):
    store = CheckpointStore(str(tmp_path))
    with open(store.path(1), "w") as f:
        f.write("garbage")
    assert store.load_latest() is None


def test_failed_serialization_leaves_no_file_and_keeps_previous(tmp_path):
    store = CheckpointStore(str(tmp_path), fmt="json")
    store.save({"ok": True}, 1)
    with pytest.raises(CheckpointError, match="could not write checkpoint .*ckpt-00000002.json.*'pickle'"):
        store.save({"bad": object()}, 2)
    assert os.listdir(tmp_path) == ["ckpt-00000001.json"]
    assert store.load_latest() == (1, {"ok": True})


def test_stale_temp_files_of_dead_writers_are_removed(tmp_path):
    store = CheckpointStore(str(tmp_path))
    stale = tmp_path / ".ckpt-00000003.json.tmp-999999"
    stale.write_bytes(b"half")
    assert store.steps() == []  # never mistaken for a checkpoint
    store.save({"s": 1}, 1)
    assert not stale.exists()


def test_same_step_is_replaced_atomically(tmp_path):
    store = CheckpointStore(str(tmp_path))
    store.save({"v": 1}, 3)
    store.save({"v": 2}, 3)
    assert store.load_latest() == (3, {"v": 2}) and store.steps() == [3]


def test_custom_format(tmp_path):
    fmt = CheckpointFormat(name="mypickle", suffix=".mypkl", save=pickle.dump, load=pickle.load)
    store = CheckpointStore(str(tmp_path), fmt=fmt)
    store.save({"t": (1, 2)}, 7)
    assert store.load_latest() == (7, {"t": (1, 2)})
    assert CheckpointStore(str(tmp_path)).steps() == []  # a store knows the built-in suffixes and its own


def test_npz_format_round_trips_arrays(tmp_path):
    np = pytest.importorskip("numpy")
    store = CheckpointStore(str(tmp_path), fmt=NPZ_FORMAT)
    store.save({"w": np.arange(6.0).reshape(2, 3), "epoch": np.array(4)}, 4)
    step, state = store.load_latest()
    assert step == 4 and state["w"].shape == (2, 3) and int(state["epoch"]) == 4
    with pytest.raises(CheckpointError, match="dict of arrays"):
        store.save([1, 2], 5)
    with pytest.raises(CheckpointError, match="holds Python objects"):
        store.save({"o": np.array([object()])}, 5)


def test_formats_do_not_import_numpy_or_torch_until_used():
    code = ("import sys, trials.runtime.checkpoint as c, tempfile; "
            "c.CheckpointStore(tempfile.mkdtemp()).save({'a': 1}, 1); "
            "print(sorted(m for m in ('numpy', 'torch') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize("keep", [0, -1, True, "3"])
def test_bad_keep(tmp_path, keep):
    with pytest.raises(CheckpointError, match="keep must be an integer >= 1"):
        CheckpointStore(str(tmp_path), keep=keep)


@pytest.mark.parametrize("step", [-1, True, "3", 1.0])
def test_bad_step(tmp_path, step):
    with pytest.raises(CheckpointError, match="step must be an integer >= 0"):
        CheckpointStore(str(tmp_path)).save({}, step)


def test_names_round_trip():
    assert parse_checkpoint_name(checkpoint_name(12)) == 12
    assert parse_checkpoint_name("ckpt-00000012.json.tmp-5") is None
    assert parse_checkpoint_name("ckpt-x.json") is None
    assert parse_checkpoint_name("ckpt-1.json", JSON_FORMAT) == 1


def test_bad_suffix():
    with pytest.raises(CheckpointError, match="suffix"):
        CheckpointFormat(name="x", suffix="json", save=print, load=print)
