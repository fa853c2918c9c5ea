"""Test hooks for a real ``trials`` process: put this folder on PYTHONPATH and name the hooks.

Python imports ``sitecustomize`` at start-up, so a real controller (or ``trials cancel``) runs
unchanged except at the points a test needs to arrange an order of events: no sleep, no
production test hook. ``TEST_HOOKS`` is a comma-separated list; marker files go to ``TEST_HOOK_DIR``:

  sigterm-after-running   SIGTERM to itself right after the job's JOB_STATE_RUNNING is written
  pause:QUALNAME:WHEN:N   at the N-th call of ``trials.controller.loop.runner.QUALNAME`` (WHEN ``before``
                          or ``after`` it), create ``QUALNAME-WHEN-N.reached`` and wait for
                          ``QUALNAME-WHEN-N.go``
  pause-after-state-read  the same after the first read of the job's record, opening it aside (``state-read``)
  flock-blocked           create ``flock-blocked`` when a blocking flock has to wait
  clock-jump              ``time.time()`` runs 2 h behind once ``jump`` exists
  shim-fails:N            the first N replica starts (not the sandbox's start-up probe) give the exec
                          shim an operation it cannot do (a bind mount of a missing folder): the real
                          shim fails to set up the sandbox

The hooks take themselves out of the environment, so the processes this one starts (trainers,
the local Cloud Storage endpoint) run without them.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import os
import signal
import sys
import time
from collections.abc import Callable
from typing import Any

HOOKS = [h for h in os.environ.pop("TEST_HOOKS", "").split(",") if h]
DIR = os.environ.pop("TEST_HOOK_DIR", "")
_HERE = os.path.dirname(os.path.abspath(__file__))
os.environ["PYTHONPATH"] = os.pathsep.join(
    p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p and os.path.abspath(p) != _HERE)
JUMP_S = 7200.0

_patches: dict[str, list[Callable[[Any], None]]] = {}


def _after_import(module: str, patch: Callable[[Any], None]) -> None:
    if module in sys.modules:
        patch(sys.modules[module])
    else:
        _patches.setdefault(module, []).append(patch)


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        if name not in _patches:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return spec
        loader: Any = spec.loader
        original = loader.exec_module

        def exec_module(module: Any) -> None:
            original(module)
            for patch in _patches.pop(name, []):
                patch(module)

        loader.exec_module = exec_module
        return spec


def _pause(label: str) -> None:
    open(os.path.join(DIR, label + ".reached"), "w").close()
    go = os.path.join(DIR, label + ".go")
    deadline = time.monotonic() + 120  # the test fails long before; never hang a suite
    while not os.path.exists(go) and time.monotonic() < deadline:
        time.sleep(0.01)


def _sigterm_after_running(mod: Any) -> None:
    original = mod.JobStore.write_meta
    done = []

    def write_meta(self: Any, meta: Any, **kwargs: Any) -> None:
        original(self, meta, **kwargs)
        if meta.state == "JOB_STATE_RUNNING" and not done:
            done.append(True)
            os.kill(os.getpid(), signal.SIGTERM)

    mod.JobStore.write_meta = write_meta


_OPENING = ("open_job", "read_job", "read_exact")


def _pause_after_state_read(mod: Any) -> None:
    original = mod.JobStore.meta
    done = []

    def meta(self: Any) -> Any:
        value = original(self)
        if not done and sys._getframe(1).f_code.co_name not in _OPENING:  # (opening a job reads its spec)
            done.append(True)
            _pause("state-read")
        return value

    mod.JobStore.meta = meta


def _pause_at(qualname: str, when: str, nth: int) -> Callable[[Any], None]:
    def patch(mod: Any) -> None:
        owner_name, _, attr = qualname.rpartition(".")
        owner = getattr(mod, owner_name) if owner_name else mod
        original = getattr(owner, attr)
        calls = [0]
        label = f"{qualname}-{when}-{nth}"

        def wrapper(*args: Any, **kwargs: Any) -> Any:
            calls[0] += 1
            if when == "before" and calls[0] == nth:
                _pause(label)
            result = original(*args, **kwargs)
            if when == "after" and calls[0] == nth:
                _pause(label)
            return result

        setattr(owner, attr, wrapper)

    return patch


def _flock_blocked() -> None:
    import fcntl

    original = fcntl.flock

    def flock(fd: Any, operation: int) -> None:
        if operation & fcntl.LOCK_EX and not operation & fcntl.LOCK_NB:
            try:
                original(fd, operation | fcntl.LOCK_NB)
                return
            except BlockingIOError:
                open(os.path.join(DIR, "flock-blocked"), "w").close()
        original(fd, operation)

    fcntl.flock = flock  # type: ignore[assignment]


def _clock_jump() -> None:
    real = time.time
    jump = os.path.join(DIR, "jump")

    def fake() -> float:
        return real() - JUMP_S if os.path.exists(jump) else real()

    time.time = fake


def _shim_fails(n: int) -> Callable[[Any], None]:
    def patch(mod: Any) -> None:
        original = mod.replica_ops
        calls = [0]

        def replica_ops(*args: Any, **kwargs: Any) -> list[str]:
            ops: list[str] = original(*args, **kwargs)
            if ".sandbox-probe" in str(kwargs.get("state_dir", "")):
                return ops  # the start-up probe of the sandbox: the job's replicas are what fails
            calls[0] += 1
            if calls[0] <= n:
                at = ops.index("cd")
                ops = [*ops[:at], "bind", "/nonexistent-trials-test-hook", *ops[at:]]
            return ops

        mod.replica_ops = replica_ops

    return patch


for _hook in HOOKS:
    if _hook == "sigterm-after-running":
        _after_import("trials.study.store", _sigterm_after_running)
    elif _hook == "pause-after-state-read":
        _after_import("trials.study.store", _pause_after_state_read)
    elif _hook.startswith("pause:"):
        _, _qualname, _when, _nth = _hook.split(":")
        _after_import("trials.controller.loop.runner", _pause_at(_qualname, _when, int(_nth)))
    elif _hook == "flock-blocked":
        _flock_blocked()
    elif _hook == "clock-jump":
        _clock_jump()
    elif _hook.startswith("shim-fails:"):
        _after_import("trials.controller.process.sandbox", _shim_fails(int(_hook.split(":")[1])))
    else:
        raise SystemExit(f"sitecustomize: unknown test hook {_hook!r}")
if _patches:
    sys.meta_path.insert(0, _Finder())
