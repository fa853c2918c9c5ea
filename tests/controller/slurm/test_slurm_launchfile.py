"""trials/controller/slurm/launchfile.py: the cluster variables rebuilt from real addresses, and the files
an entry writes back read as data a trainer may have forged (garbage, links, FIFOs, big files)."""

from __future__ import annotations

import json
import os
import threading

import pytest

from trials.controller.slurm import launchfile as lf


def _cluster_spec(task_type: str, index: int) -> str:
    return json.dumps({"cluster": {"workerpool0": ["127.0.0.1:2222"],
                                   "workerpool1": ["127.0.0.1:2223", "127.0.0.1:2224"],
                                   "workerpool2": ["127.0.0.1:2225"]},
                       "environment": "cloud", "task": {"type": task_type, "index": index}, "job": {"x": 1}})


def _tf_config(task_type: str, index: int) -> str:
    return json.dumps({"cluster": {"chief": ["127.0.0.1:2222"], "worker": ["127.0.0.1:2223", "127.0.0.1:2224"],
                                   "ps": ["127.0.0.1:2225"]},
                       "task": {"type": task_type, "index": index}, "environment": "cloud"})


ADDRESSES = {"workerpool0-0": ("n1", 40000), "workerpool1-0": ("n2", 40001), "workerpool1-1": ("n1", 40002),
             "workerpool2-0": ("n2", 40003)}


def test_cluster_spec_lists_are_rewritten_in_place_and_the_rest_kept():
    env = {"CLUSTER_SPEC": _cluster_spec("workerpool1", 1), "OTHER": "x"}
    out = lf.with_addresses(env, ADDRESSES)
    spec = json.loads(out["CLUSTER_SPEC"])
    assert spec["cluster"] == {"workerpool0": ["n1:40000"], "workerpool1": ["n2:40001", "n1:40002"],
                               "workerpool2": ["n2:40003"]}
    assert spec["task"] == {"type": "workerpool1", "index": 1} and spec["job"] == {"x": 1}
    assert out["OTHER"] == "x" and "MASTER_ADDR" not in out  # not added where it was not
    assert json.loads(env["CLUSTER_SPEC"])["cluster"]["workerpool0"] == ["127.0.0.1:2222"]  # input untouched


def test_tf_config_roles_map_to_pools_chief_worker_ps():
    out = lf.with_addresses({"TF_CONFIG": _tf_config("worker", 0)}, ADDRESSES)
    tf = json.loads(out["TF_CONFIG"])
    assert tf["cluster"] == {"chief": ["n1:40000"], "worker": ["n2:40001", "n1:40002"], "ps": ["n2:40003"]}
    assert tf["task"] == {"type": "worker", "index": 0}


def test_master_addr_and_port_name_the_primary():
    env = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "2222", "WORLD_SIZE": "4", "RANK": "2"}
    out = lf.with_addresses(env, ADDRESSES)
    assert (out["MASTER_ADDR"], out["MASTER_PORT"]) == ("n1", "40000")
    assert (out["WORLD_SIZE"], out["RANK"]) == ("4", "2")


def test_a_replica_missing_from_the_map_keeps_its_address():
    partial = {"workerpool1-1": ("n2", 41000)}
    env = {"CLUSTER_SPEC": _cluster_spec("workerpool0", 0), "TF_CONFIG": _tf_config("chief", 0),
           "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "2222"}
    out = lf.with_addresses(env, partial)
    assert json.loads(out["CLUSTER_SPEC"])["cluster"]["workerpool1"] == ["127.0.0.1:2223", "n2:41000"]
    assert json.loads(out["CLUSTER_SPEC"])["cluster"]["workerpool0"] == ["127.0.0.1:2222"]
    assert json.loads(out["TF_CONFIG"])["cluster"]["chief"] == ["127.0.0.1:2222"]
    assert (out["MASTER_ADDR"], out["MASTER_PORT"]) == ("127.0.0.1", "2222")  # no primary address: kept


@pytest.mark.parametrize("bad", ["{not json", "[1, 2]", '{"cluster": [1]}', '{"task": {}}', '"text"', "null",
                                 '{"cluster": {"workerpool0": "n1:1"}}'])
def test_malformed_cluster_variables_are_left_alone(bad):
    env = {"CLUSTER_SPEC": bad, "TF_CONFIG": bad}
    out = lf.with_addresses(env, ADDRESSES)
    for key in ("CLUSTER_SPEC", "TF_CONFIG"):
        assert json.loads(out[key]) == json.loads(bad) if _is_json(bad) else out[key] == bad


def _is_json(text: str) -> bool:
    try:
        json.loads(text)
    except ValueError:
        return False
    return True


def test_odd_roles_are_not_touched():
    env = {"CLUSTER_SPEC": json.dumps({"cluster": {"workerpoolX": ["a:1"], "evaluatorz": ["b:2"],
                                                   "workerpool0": ["c:3"]}})}
    cluster = json.loads(lf.with_addresses(env, ADDRESSES)["CLUSTER_SPEC"])["cluster"]
    assert cluster == {"workerpoolX": ["a:1"], "evaluatorz": ["b:2"], "workerpool0": ["n1:40000"]}


# --- the files an entry writes back --------------------------------------------------------------
def _exit(path, **fields) -> str:
    data = {"status": 0, "oom": False, "wall": 1700000000.5, "node": "n1", "leftovers": []}
    data.update(fields)
    path.write_text(json.dumps(data))
    return str(path)


def test_read_exit_of_what_an_entry_writes(tmp_path):
    path = str(tmp_path / "exit-workerpool0-0.json")
    lf.write_json(path, {"status": 137, "oom": True, "wall": 12.5, "node": "n2", "leftovers": ["12 (sleep)"]})
    note = lf.read_exit(path)
    assert note == lf.ExitNote(status=137, oom=True, wall=12.5, node="n2", leftovers=("12 (sleep)",))


@pytest.mark.parametrize("status", [-1, 256, 1000, True, False, 1.0, "0", None])
def test_read_exit_refuses_a_status_out_of_range_or_not_an_int(tmp_path, status):
    assert lf.read_exit(_exit(tmp_path / "e.json", status=status)) is None


@pytest.mark.parametrize("wall", [True, "1", None, float("inf")])
def test_read_exit_refuses_a_bad_wall(tmp_path, wall):
    path = tmp_path / "e.json"
    path.write_text(json.dumps({"status": 0, "wall": wall}).replace("Infinity", "1e999"))
    assert lf.read_exit(str(path)) is None


def test_read_exit_bounds_what_it_keeps_and_reads_oom_only_as_true(tmp_path):
    note = lf.read_exit(_exit(tmp_path / "e.json", oom="yes", node="n" * 500, leftovers=["x" * 900] * 50))
    assert note is not None and note.oom is False
    assert len(note.node) == 100 and len(note.leftovers) == 20 and all(len(x) == 200 for x in note.leftovers)
    assert lf.read_exit(_exit(tmp_path / "f.json", leftovers="12 (sleep)")).leftovers == ()


@pytest.mark.parametrize("content", [b"", b"garbage", b"[1,2]", b"\xff\xfe{", b'{"status": 0', b"null"])
def test_read_exit_and_read_address_of_garbage_are_none(tmp_path, content):
    path = tmp_path / "x.json"
    path.write_bytes(content)
    assert lf.read_exit(str(path)) is None and lf.read_address(str(path)) is None


def test_missing_files_read_as_absent(tmp_path):
    assert lf.read_exit(str(tmp_path / "none.json")) is None
    assert lf.read_address(str(tmp_path / "none.json")) is None


def test_a_symlink_is_refused_even_to_a_good_file(tmp_path):
    good_exit = _exit(tmp_path / "real-exit.json", status=0)
    lf.write_json(str(tmp_path / "real-addr.json"), {"submission": "s", "host": "n1", "port": 4000})
    assert lf.read_exit(good_exit) is not None and lf.read_address(str(tmp_path / "real-addr.json")) == ("n1", 4000)
    os.symlink(good_exit, tmp_path / "exit.json")
    os.symlink(tmp_path / "real-addr.json", tmp_path / "addr.json")
    assert lf.read_exit(str(tmp_path / "exit.json")) is None
    assert lf.read_address(str(tmp_path / "addr.json")) is None


def test_a_fifo_reads_as_absent_without_blocking(tmp_path):
    fifo = tmp_path / "exit.json"
    os.mkfifo(fifo)
    got: list[object] = []
    reader = threading.Thread(target=lambda: got.extend([lf.read_exit(str(fifo)), lf.read_address(str(fifo))]),
                              daemon=True)
    reader.start()
    reader.join(10)
    if reader.is_alive():  # unblock it before failing: open a writer end
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        pytest.fail("reading a FIFO blocked")
    assert got == [None, None]


def test_a_folder_reads_as_absent(tmp_path):
    (tmp_path / "exit.json").mkdir()
    assert lf.read_exit(str(tmp_path / "exit.json")) is None


def test_a_file_over_the_limit_reads_as_absent(tmp_path):
    path = tmp_path / "e.json"
    body = json.dumps({"status": 0, "wall": 1.0, "node": "n1"})
    path.write_text(body + " " * (lf.MAX_SMALL_BYTES - len(body)))  # exactly the limit: read
    assert lf.read_exit(str(path)) is not None
    path.write_text(body + " " * (lf.MAX_SMALL_BYTES - len(body) + 1))  # one byte more: refused
    assert lf.read_exit(str(path)) is None
    assert lf.read_json(str(path), max_bytes=lf.MAX_SMALL_BYTES + 1) is not None


def test_read_address_checks_host_port_and_submission(tmp_path):
    path = str(tmp_path / "addr.json")

    def read(**fields):
        lf.write_json(path, {"submission": "t1-a0", "host": "n1", "port": 4000, **fields})
        return lf.read_address(path), lf.read_address(path, "t1-a0"), lf.read_address(path, "t1-a1")

    assert read() == (("n1", 4000), ("n1", 4000), None)  # another attempt's address only without a submission
    for host in ("", "n1:22", "a b", "a/b", "n1\n", 'a"b', "a,b", "x" * 254, 5, None):
        assert read(host=host) == (None, None, None), host
    for port in (0, 65536, -1, True, "4000", 4000.0, None):
        assert read(port=port) == (None, None, None), port
    assert read(port=65535)[0] == ("n1", 65535)


def test_paths_and_launch_record(tmp_path):
    job = str(tmp_path / "job")
    sub = lf.submission_dir(job, "t3-a0-1")
    assert sub == os.path.join(job, "slurm", "t3-a0-1")
    assert lf.exit_path(sub, "workerpool0-0").endswith("/exit-workerpool0-0.json")
    assert lf.signal_path(sub, "workerpool0-0").endswith("/signal-workerpool0-0")
    assert lf.addr_path(lf.rendezvous_dir(job, "3"), "workerpool1-0") == \
        os.path.join(job, "slurm", "t3", "addr-workerpool1-0.json")
    rec = lf.launch_record(submission="s", trial_id="3", trial_dir="/t", rendezvous="/r", replicas=[{"name": "a"}],
                           ranks=("a", "b"), wait_s=5.0)
    assert rec["format"] == lf.FORMAT and rec["ranks"] == ["a", "b"] and rec["replicas"] == [{"name": "a"}]
    path = str(tmp_path / "launch.json")
    lf.write_json(path, rec)
    assert lf.read_json(path, lf.MAX_LAUNCH_BYTES) == rec
