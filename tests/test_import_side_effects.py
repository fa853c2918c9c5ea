"""Importing trials changes nothing outside the package: ``import trials``, every ``trials.*`` module and the pytest
plugin leave the interpreter as they found it (no import finder, no other module's attribute replaced, no
environment variable set or removed, no thread, no signal handler, no atexit handler). What trials' own command
processes set up is ``trials.startup``'s, and only they run it (tests/test_startup.py)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

pytest_plugins = ["pytester"]

# Snapshot, import, compare — in a fresh interpreter. The third-party libraries trials imports are imported first
# (where installed), so what is compared is what trials' own modules do.
PROGRAM = r'''
import atexit, importlib, json, os, pkgutil, signal, sys, threading, warnings, logging

THIRD_PARTY = ["optuna", "numpy", "yaml", "sqlalchemy", "hypertune", "scipy", "psycopg2", "matplotlib", "sklearn",
               "greenlet", "torch", "google.cloud.storage", "gcp_storage_emulator", "pytest", "dataclasses",
               "concurrent.futures", "http.server", "sqlite3", "ctypes", "unittest", "asyncio", "importlib.metadata"]
for name in THIRD_PARTY:
    try:
        importlib.import_module(name)
    except Exception:
        pass
import optuna
from optuna.storages import JournalStorage, RDBStorage  # (what a study opens on first use)

SCRIPTS = {"trials.__main__", "trials.cli.__main__"}  # `python -m` targets: they run the CLI


def snapshot():
    modules = {}
    for name, module in list(sys.modules.items()):
        if module is None or name in ("__main__", "__mp_main__", "sys", "trials") or name.startswith("trials."):
            continue
        try:
            # (a submodule imported for the first time becomes its package's attribute: an import, not a patch)
            modules[name] = {k: id(v) for k, v in vars(module).items() if type(v) is not type(sys)}
        except TypeError:
            pass
    return {
        "meta_path": [repr(f) for f in sys.meta_path],
        "path_hooks": [repr(h) for h in sys.path_hooks],
        "path": list(sys.path),
        "environ": dict(os.environ),
        "threads": sorted(t.name for t in threading.enumerate()),
        "signals": {int(s): repr(signal.getsignal(s)) for s in signal.valid_signals()
                    if s not in (signal.SIGKILL, signal.SIGSTOP)},
        "excepthook": repr(sys.excepthook),
        "atexit": atexit._ncallbacks(),
        "warnings": len(warnings.filters),
        "root_handlers": len(logging.root.handlers),
        "modules": modules,
        "recursion": sys.getrecursionlimit(),
        "switch": sys.getswitchinterval(),
    }


before = snapshot()
import trials
imported, refused = [], {}
for info in pkgutil.walk_packages(trials.__path__, "trials."):
    if info.name in SCRIPTS:
        continue
    try:
        importlib.import_module(info.name)
        imported.append(info.name)
    except ModuleNotFoundError as err:  # an optional third-party part (an extra) may be missing; ours may not
        if (err.name or "").split(".")[0] == "trials":
            raise
        refused[info.name] = err.name
import trials.pytest_plugin
for name in trials.__all__:  # the public names, loaded on first use
    getattr(trials, name)
after = snapshot()

changed = {}
for key in before:
    if key == "modules":
        for name, attrs in before["modules"].items():
            now = after["modules"].get(name, {})
            moved = sorted(k for k in set(attrs) | set(now) if attrs.get(k) != now.get(k) and not k.startswith("__"))
            if moved:
                changed[f"module {name}"] = moved
    elif before[key] != after[key]:
        changed[key] = [before[key], after[key]] if key != "environ" else sorted(
            set(before[key].items()) ^ set(after[key].items()))
print(json.dumps({"imported": imported, "refused": refused, "changed": changed}))
'''


def _bookkeeping(module: str, attribute: str) -> bool:
    """A library's own bookkeeping as classes are made, not a patch: SQLAlchemy counts the columns and tables made
    (trials' schema) and makes an event-dispatch class per event target it first sees."""
    return module.startswith("module sqlalchemy.") and (attribute == "_creation_order" or
                                                         attribute.endswith("EventsDispatch"))


def test_importing_every_module_of_trials_changes_nothing_outside_it():
    done = subprocess.run([sys.executable, "-c", PROGRAM], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert len(got["imported"]) > 150, got  # every module was tried (the package has ~230)
    changed = {k: [a for a in v if not _bookkeeping(k, a)] if k.startswith("module ") else v
               for k, v in got["changed"].items()}
    assert {k: v for k, v in changed.items() if v} == {}


def test_the_command_set_up_is_seen_by_this_check():
    """The check above can fail: the set-up the `trials` command runs (trials.startup.install) is a change it sees."""
    program = PROGRAM.replace("before = snapshot()\nimport trials\n",
                              "before = snapshot()\nimport trials, trials.startup\ntrials.startup.install()\n")
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    changed = json.loads(done.stdout.strip().splitlines()[-1])["changed"]
    assert "meta_path" in changed and "exec" in changed.get("module dataclasses", []), changed


PROBE = """
import dataclasses, json, os, sys, threading

SEEN = {}


def pytest_configure(config):
    SEEN["plugin"] = config.pluginmanager.has_plugin("trials")


def pytest_sessionfinish(session):
    SEEN.update(
        meta_path=[type(f).__module__ for f in sys.meta_path],
        dataclasses_exec=repr(vars(dataclasses).get("exec")),
        environ=sorted(k for k in os.environ if k.startswith(("TRIALS_", "AIP_", "CLOUD_ML_", "OPENBLAS", "OMP_"))),
        threads=threading.active_count(),
        trials_modules=sorted(m for m in sys.modules if m == "trials" or m.startswith("trials.")),
        modules=sorted(sys.modules),
    )
    with open(os.environ["PROBE_OUT"], "w") as f:
        json.dump(SEEN, f)
"""


def _probe(pytester: pytest.Pytester, tmp_path, *args: str) -> dict:
    out = tmp_path / f"probe-{len(list(tmp_path.iterdir()))}.json"
    pytester.makeconftest(PROBE)
    pytester.makepyfile(test_unrelated=textwrap.dedent("""
        import dataclasses

        @dataclasses.dataclass
        class Point:
            x: int

        def test_unrelated():
            assert Point(1) == Point(1)
    """))
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PROBE_OUT", str(out))
        for name in ("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "PYTEST_ADDOPTS", "PYTEST_PLUGINS"):
            mp.delenv(name, raising=False)
        result = pytester.runpytest_subprocess("-q", "-p", "no:cacheprovider", *args)
    result.assert_outcomes(passed=1)
    return json.loads(out.read_text())


def test_the_plugin_is_invisible_to_a_project_that_does_not_use_it(pytester: pytest.Pytester, tmp_path):
    """A throwaway project's own test run, with the plugin (autoloaded, as wherever trials is installed) and
    without it (-p no:trials): the same import finders, dataclasses, environment and threads, and the only modules
    the plugin adds are its own and the package's (which loads nothing)."""
    with_plugin = _probe(pytester, tmp_path)
    without = _probe(pytester, tmp_path, "-p", "no:trials")
    assert with_plugin["plugin"] is True and without["plugin"] is False
    assert with_plugin["trials_modules"] == ["trials", "trials.pytest_plugin"]
    assert without["trials_modules"] == []
    assert sorted(set(with_plugin["modules"]) - set(without["modules"])) == ["trials", "trials.pytest_plugin"]
    for key in ("meta_path", "dataclasses_exec", "environ", "threads"):
        assert with_plugin[key] == without[key], key
    assert not any(m.startswith("trials") for m in with_plugin["meta_path"])
