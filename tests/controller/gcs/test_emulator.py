"""The local Cloud Storage endpoint started ahead of its job: it serves the folder it is given later,
exits when never given one, and stops at once at the end of its stdin."""

from __future__ import annotations

import importlib.util
import json
import os
import time
import urllib.request

import pytest

from trials.controller.gcs import emulator
from trials.controller.process import host

pytestmark = pytest.mark.skipif(importlib.util.find_spec("gcp_storage_emulator") is None,
                                reason="the gcs extra is not installed (pip install 'trials[gcs]')")


def _object_names(host_url: str, bucket: str) -> list[str]:
    with urllib.request.urlopen(f"{host_url}/storage/v1/b/{bucket}/o", timeout=10) as answer:
        return [o["name"] for o in json.loads(answer.read()).get("items", [])]


def test_a_warm_endpoint_serves_the_folder_it_is_given_and_works_in_it(tmp_path):
    (tmp_path / "gcs" / "bucket-a").mkdir(parents=True)
    (tmp_path / "gcs" / "bucket-a" / "x.txt").write_text("x")
    warm = emulator.warm_up({})
    assert warm is not None
    gcs, why = emulator.start(str(tmp_path / "gcs"), {}, warm=warm)
    assert gcs is not None, why
    try:
        assert warm.take() is None  # used once
        assert _object_names(gcs.host, "bucket-a") == ["x.txt"]
        assert os.readlink(f"/proc/{gcs.proc.pid}/cwd") == str(tmp_path / "gcs")  # what it serves
    finally:
        t = time.monotonic()
        gcs.stop()
    assert gcs.proc.returncode == 0
    assert time.monotonic() - t < 5  # (it exits at the end of stdin; the old wait was 5 s at most too)


def test_a_warm_endpoint_never_given_a_folder_exits_cleanly():
    warm = emulator.warm_up({})
    assert warm is not None
    proc = warm.take()
    assert proc is not None
    emulator.Emulator(proc, 0).stop()
    assert proc.returncode == 0
    warm.close()  # nothing left to close: no error


def test_a_warm_endpoint_is_not_used_for_another_bind_address(tmp_path):
    warm = emulator.warm_up({})
    assert warm is not None
    proc = warm.take()
    assert proc is not None
    gcs, _ = emulator.start(str(tmp_path), {}, bind="127.0.0.2", warm=emulator.Warm(proc))
    try:
        assert proc.poll() is not None  # stopped: the loopback one cannot serve the gateway
        assert gcs is None or "127.0.0.2" in gcs.host
    finally:
        if gcs is not None:
            gcs.stop()


def test_no_warm_endpoint_when_off_or_when_the_users_own_is_passed():
    assert emulator.warm_up({"TRIALS_GCS_EMULATOR": "off"}) is None
    own = {"STORAGE_EMULATOR_HOST": "http://theirs:1"}
    assert host.warm_endpoint(own, ("STORAGE_EMULATOR_HOST",)) is None
    warm = host.warm_endpoint(own, ())  # not passed on purpose: the job's own endpoint replaces it
    assert warm is not None
    warm.close()


def test_the_users_own_endpoint_closes_a_warm_one_it_replaces(tmp_path):
    warm = emulator.warm_up({})
    assert warm is not None
    gcs, extra = host.start_endpoint(str(tmp_path), {"STORAGE_EMULATOR_HOST": "http://theirs:1"},
                                     ("STORAGE_EMULATOR_HOST",), lambda line: None, warm=warm)
    assert gcs is None and extra == {}
    assert warm.take() is None  # closed, not left waiting
