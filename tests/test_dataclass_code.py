"""In trials' own command processes (``trials.startup``), trials' dataclass methods are compiled once and kept beside
the modules' bytecode (``trials._dataclass_code``): a later process runs the same code, method by method, as plain
``exec``."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from trials import _dataclass_code

MODULES = ("trials.spec.model", "trials.controller.loop.events", "trials.controller.loop.state",
           "trials.controller.backend.protocol", "trials.study.store")

PROGRAM = """
import dataclasses, hashlib, importlib, json, marshal, sys
import trials, trials.startup
from trials import _dataclass_code
if sys.argv[1] != "plain":  # plain: as any program importing trials (nothing set up)
    trials.startup.install()  # as the trials command's process is
codes = {}
for name in MODULES_HERE:
    module = importlib.import_module(name)
    for cls in vars(module).values():
        if isinstance(cls, type) and dataclasses.is_dataclass(cls) and cls.__module__ == name:
            for method in ("__init__", "__repr__", "__eq__", "__hash__", "__setattr__", "__delattr__"):
                fn = cls.__dict__.get(method)
                code = getattr(fn, "__code__", None)
                if code is not None and code.co_filename == "<string>":
                    codes[f"{cls.__qualname__}.{method}"] = hashlib.sha256(marshal.dumps(code)).hexdigest()
before = dict(_dataclass_code.stats)

@dataclasses.dataclass(frozen=True)
class Mine:  # a class of another module: compiled as before, never kept
    a: int
    b: str = "x"

from trials.spec.model import MetricSpec, Goal as MetricGoal
m = MetricSpec(metric_id="loss", goal=MetricGoal.MINIMIZE)
behaves = [repr(m), m == MetricSpec(metric_id="loss", goal=MetricGoal.MINIMIZE), hash(m) == hash(
    MetricSpec(metric_id="loss", goal=MetricGoal.MINIMIZE)), repr(Mine(1)), Mine(1) == Mine(1)]
try:
    m.metric_id = "other"
except dataclasses.FrozenInstanceError:
    behaves.append("frozen")
print(json.dumps({"codes": codes, "stats": before, "after_mine": _dataclass_code.stats, "behaves": behaves}))
""".replace("MODULES_HERE", repr(MODULES))


def _run(tmp_path, mode: str, *, write: bool = True) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONDONTWRITEBYTECODE", "PYTHONPYCACHEPREFIX")}
    env["PYTHONPYCACHEPREFIX"] = str(tmp_path / "pyc")
    if not write:
        env["PYTHONDONTWRITEBYTECODE"] = "1"
    done = subprocess.run([sys.executable, "-c", PROGRAM, mode], capture_output=True, text=True, timeout=120,
                          env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def _kept_files(tmp_path) -> list[str]:
    return sorted(os.path.join(d, f) for d, _, files in os.walk(tmp_path / "pyc") for f in files
                  if f.endswith(_dataclass_code.SUFFIX))


def test_the_methods_compile_once_and_run_the_code_plain_exec_makes(tmp_path):
    cold = _run(tmp_path, "cached")
    files = _kept_files(tmp_path)
    assert len(files) >= len(MODULES) and cold["stats"]["compiled"] > 40
    warm = _run(tmp_path, "cached")
    assert warm["stats"]["compiled"] == 0 and warm["stats"]["kept"] >= cold["stats"]["compiled"]
    plain = _run(tmp_path, "plain")
    assert len(cold["codes"]) > 100
    assert cold["codes"] == warm["codes"] == plain["codes"]  # the same bytecode, method by method
    assert warm["behaves"] == plain["behaves"] == [
        "MetricSpec(metric_id='loss', goal=<Goal.MINIMIZE: 'MINIMIZE'>, safety_config=None)", True, True,
        "Mine(a=1, b='x')", True, "frozen"]
    assert warm["after_mine"] == warm["stats"]  # another module's class is not kept
    assert not any("__main__" in f for f in _kept_files(tmp_path))


def test_a_broken_or_foreign_file_is_ignored_and_written_again(tmp_path):
    _run(tmp_path, "cached")
    files = _kept_files(tmp_path)
    broken, foreign = files[0], files[1]
    with open(broken, "wb") as f:
        f.write(_dataclass_code.HEADER + b"\x00garbage")
    with open(foreign, "rb") as f:
        data = f.read()
    with open(foreign, "wb") as f:
        f.write(b"\x00\x00\r\n" + data[4:])  # another Python's magic number
    again = _run(tmp_path, "cached")
    assert again["stats"]["compiled"] > 0
    assert again["codes"] == _run(tmp_path, "plain")["codes"]
    for path in (broken, foreign):
        assert _dataclass_code._read(path), path  # written again, whole
    assert _run(tmp_path, "cached")["stats"]["compiled"] == 0


def test_nothing_is_kept_when_python_writes_no_bytecode(tmp_path):
    first = _run(tmp_path, "cached", write=False)
    assert first["stats"]["compiled"] > 40 and _kept_files(tmp_path) == []
    assert _run(tmp_path, "cached", write=False)["stats"]["compiled"] == first["stats"]["compiled"]


def test_a_file_of_an_edited_module_drops_the_texts_no_class_uses(tmp_path, monkeypatch):
    path = str(tmp_path / "m.cpython-311.dataclasses")
    stale = {f"def f{i}(): pass": compile(f"def f{i}(): pass", "<string>", "exec") for i in range(40)}
    with open(path, "wb") as f:
        f.write(_dataclass_code.HEADER + __import__("marshal").dumps(stale))
    monkeypatch.setattr(_dataclass_code, "_tables", {})
    monkeypatch.setattr(_dataclass_code, "_dirty", set())
    monkeypatch.setattr(_dataclass_code, "stats", {"compiled": 0, "kept": 0})
    monkeypatch.setattr(sys, "dont_write_bytecode", False)
    monkeypatch.setattr("atexit.register", lambda fn: fn)
    globs = {"__name__": "trials.m", "__cached__": str(tmp_path / "m.cpython-311.pyc")}
    _dataclass_code.cached_exec("def g(): return 1", globs, {})
    _dataclass_code.cached_exec("def f3(): pass", globs, {})
    _dataclass_code.write()
    assert sorted(_dataclass_code._read(path)) == ["def f3(): pass", "def g(): return 1"]
