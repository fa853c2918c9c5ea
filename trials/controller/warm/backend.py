"""The warm backend (``--warm-start``): host replicas forked from a launcher that already holds their imports.

Wraps the host backend. For each set of start-up variables (:func:`command.startup_key`) the first trial
runs fresh as the survey (:mod:`child`: it writes which modules it loaded from outside the launch
folder); a launcher (:mod:`launcher`) imports those and nothing else (it starts with the survey, on the
top-level imports of a ``python SCRIPT`` trial's script, and imports the rest once the survey ended:
its import then overlaps the first trials instead of following them), and each later trial is a
fork of it that enters the same cgroup, namespaces and copy-on-write view the exec shim builds for a
fresh replica (the shim's own code, built as a library: :mod:`library`), so the trial is a replica like
any other to the loop: its argv, environment, working folder, cgroup, sandbox, SIGTERM and grace, exit
status, metric file. Anything that cannot start warm runs fresh, and the reason is said once: a command
that is not ``python SCRIPT …``/``python -m MODULE …`` on the launcher's interpreter, no cgroup, a fork
hazard in the launcher (threads, CUDA), no survey. A changed preloaded file starts a new launcher.

A replica that fails warm is started again fresh once (:class:`WarmRetry`): its attempts show both.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shutil
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from trials import files
from trials.controller.backend import registry
from trials.controller.backend.protocol import ReplicaBackend, ReplicaHandle, ReplicaStart
from trials.controller.loop.running import ExitAction, ExitDecision, RunningTrial
from trials.controller.loop.trial_policy import PassAction
from trials.controller.process import sandbox as sandboxing
from trials.controller.process.echo import Echo
from trials.controller.process.groups import process_start_time
from trials.controller.process.host import HostBackend
from trials.controller.process.replica import Replica, check_memory_all
from trials.controller.process.shim import ShimUnavailable
from trials.controller.process.tree import CgroupTree
from trials.controller.warm import command, library
from trials.controller.warm.child import SURVEY_FILE
from trials.controller.warm.process import LauncherGone, LauncherProcess, WarmProc, WarmReplica

# A trial waits for a launcher still importing (a fresh start would import as much itself, and more: the
# launcher started first), until this long after the launcher started; a launcher not ready by then is dropped.
IMPORT_CAP_S = 30.0
MAX_SURVEY_BYTES = 4 << 20
WARM_DIR = "warm"  # in the job folder: the launchers' logs and preload lists


@dataclass(eq=False)
class _Slot:
    """The launcher of one set of start-up variables, and how it came to be."""

    env: dict[str, str]
    survey: tuple[Replica, str] | None = None  # the first trial and its survey file
    names: list[str] | None = None  # what the launcher imports (the script's imports, then the survey's)
    launcher: LauncherProcess | None = None
    old: list[LauncherProcess] = field(default_factory=list)  # replaced, closed once their children end
    failed: str = ""


class WarmBackend:
    """``--warm-start`` over ``inner`` (the host backend, perhaps wrapped); ``host`` gives the view.

    Args:
        inner: starts every fresh replica.
        host: the host backend under ``inner`` (its sandbox view, layers, endpoint variables); None: every
            trial runs fresh and ``open`` says why.
        job_dir: the job's folder (``warm/`` there holds the launchers' logs and preload lists).
        python: the launcher's interpreter (a trial's command must name it to start warm).
    """

    def __init__(self, inner: ReplicaBackend, host: HostBackend | None, *, job_dir: str,
                 python: str = sys.executable):
        self.inner = inner
        self.host = host
        self.job_dir = job_dir
        self.python = python
        self._say: Callable[[str], None] = lambda line: None
        self._said: set[str] = set()
        self._slots: dict[tuple[tuple[str, str], ...], _Slot] = {}
        self._warm: list[Replica] = []
        self._retry_fresh: set[tuple[str, str]] = set()
        self._n = 0

    # --- the seam ---------------------------------------------------------------------------------------
    def open(self, say: Callable[[str], None]) -> None:
        self._say = say
        self.inner.open(say)
        if self.host is None:
            self._tell("--warm-start: this job's replicas are not plain host processes (python packages are "
                       "installed first): every trial runs fresh")

    def start(self, request: ReplicaStart) -> ReplicaHandle:
        if self.host is None:
            return self.inner.start(request)
        form = command.warm_form(request.argv, env=request.env, cwd=request.cwd, interpreter=self.python)
        if isinstance(form, str):
            self._tell(f"--warm-start: trials run fresh: {form}")
            return self.inner.start(request)
        if (request.trial_dir, request.name) in self._retry_fresh:
            self._retry_fresh.discard((request.trial_dir, request.name))
            return self.inner.start(request)
        key = command.startup_key(request.env)
        slot = self._slots.get(key)
        if slot is None:
            slot = self._slots[key] = _Slot(env=command.launcher_env(request.env))
            return self._survey(slot, request, form)
        self._advance(slot, wait=True)
        if slot.launcher is None or slot.launcher.ready is None:
            if slot.failed:
                self._tell(f"--warm-start: trials run fresh: {slot.failed}")
            return self.inner.start(request)
        handle = self._fork(slot, request, form)
        return handle if handle is not None else self.inner.start(request)

    def check_memory(self) -> None:
        self.inner.check_memory()
        self._warm = [r for r in self._warm if r.returncode is None]
        check_memory_all(r for r in self._warm if r.poll() is None)

    def close(self) -> None:
        for slot in self._slots.values():
            for launcher in [*slot.old, *([slot.launcher] if slot.launcher else [])]:
                launcher.close()
        self.inner.close()

    # --- what the retry policy asks -------------------------------------------------------------------
    def ran_warm(self, handle: ReplicaHandle) -> bool:
        return any(handle is r for r in self._warm)

    def next_fresh(self, trial_dir: str, name: str) -> None:
        """The next start of this replica runs fresh (it failed warm)."""
        self._retry_fresh.add((trial_dir, name))

    # --- the launcher's life ----------------------------------------------------------------------------
    def _tell(self, line: str) -> None:
        if line not in self._said:
            self._said.add(line)
            self._say(line)

    def _survey(self, slot: _Slot, request: ReplicaStart, form: command.WarmCommand) -> ReplicaHandle:
        """The first trial of a launcher: fresh, writing which modules it loaded."""
        path = os.path.join(request.trial_dir, SURVEY_FILE)
        with_survey = (form.python, "-m", "trials.controller.warm.child", "--survey", path, form.kind, form.target,
                       *form.args)
        handle = self.inner.start(dataclasses.replace(request, argv=with_survey))
        if isinstance(handle, Replica):  # (the host backend's): the launcher starts as soon as it ends
            slot.survey = (handle, path)
            ended = handle.on_end

            def survey_ended(r: Replica) -> None:
                if ended is not None:
                    ended(r)
                self._advance(slot, wait=False)

            handle.on_end = survey_ended
            names = self._script_imports(form)
            if names:  # the launcher imports what the script imports while the survey runs
                slot.names = names
                self._new_launcher(slot)
        else:
            slot.failed = "the first trial's replica is not a host process"
        return handle

    def _script_imports(self, form: command.WarmCommand) -> list[str]:
        if form.kind != "script":
            return []
        try:
            source = files.read_regular(form.target, max_bytes=command.MAX_SCRIPT_BYTES + 1)
        except OSError:
            return []
        return command.script_imports(source) if len(source) <= command.MAX_SCRIPT_BYTES else []

    def _advance(self, slot: _Slot, *, wait: bool) -> None:
        """Once the slot's survey ended, start its launcher, or have the one started on the script's imports
        import the rest; with ``wait``, wait for a launcher that imports (at most :data:`IMPORT_CAP_S` from its
        start: one not ready by then is closed, and the trials run fresh)."""
        if slot.survey is not None and slot.survey[0].poll() is not None:
            self._surveyed(slot)
        launcher = slot.launcher
        if launcher is None:
            return
        launcher.pump()
        deadline = launcher.started + IMPORT_CAP_S
        if launcher.ready is None and wait and not launcher.gone:
            while launcher.ready is None and not launcher.gone and time.monotonic() < deadline:
                import select

                select.select([launcher.sock], [], [], max(0.0, deadline - time.monotonic()))
                launcher.pump()
        if launcher.gone and launcher.ready is None:
            slot.failed = f"the warm launcher ended while importing (see {self._folder()})"
            slot.launcher = None
        elif launcher.ready is None and time.monotonic() >= deadline:
            slot.failed = f"the warm launcher did not finish importing in {IMPORT_CAP_S:g} s (see {self._folder()})"
            slot.launcher = None
            launcher.close()
        for old in list(slot.old):
            old.pump()
            if not old.children:
                old.close()
                slot.old.remove(old)

    def _surveyed(self, slot: _Slot) -> None:
        assert slot.survey is not None
        _, path = slot.survey
        slot.survey = None
        names = self._read_survey(path)
        launcher = slot.launcher
        if names is None:
            slot.failed = f"the first trial wrote no list of its modules ({path})"
            if launcher is not None:  # (started on the script's imports)
                slot.old.append(launcher)
                slot.launcher = None
            return
        slot.failed = ""
        slot.names = list(dict.fromkeys([*(slot.names or ()), *names]))
        if launcher is None or launcher.gone:
            self._new_launcher(slot)
            return
        known = set(launcher.names)
        extra = [name for name in names if name not in known]
        if extra:
            with contextlib.suppress(LauncherGone):  # (seen as gone below: the next trials run fresh)
                launcher.add(extra)

    def _read_survey(self, path: str) -> list[str] | None:
        try:
            data = json.loads(files.read_regular(path, max_bytes=MAX_SURVEY_BYTES))
        except (OSError, ValueError):
            return None
        return command.preload_names(data)

    def _folder(self) -> str:
        return os.path.join(self.job_dir, WARM_DIR)

    def _new_launcher(self, slot: _Slot) -> None:
        assert self.host is not None and slot.names is not None
        try:
            lib = library.library_path()
        except ShimUnavailable as err:
            slot.failed = str(err)
            return
        self._n += 1
        view = self.host.view
        slot.launcher = LauncherProcess(python=self.python, library=lib, names=slot.names, env=slot.env,
                                        folder=self._folder(), tag=str(self._n),
                                        excluded=(view.launch_dir, view.job_dir))

    def _fork(self, slot: _Slot, request: ReplicaStart, form: command.WarmCommand) -> Replica | None:
        """The replica forked from the slot's launcher into its cgroup and view; None: start it fresh."""
        assert self.host is not None and slot.launcher is not None
        tree = CgroupTree.create(f"{os.path.basename(request.trial_dir)}-{request.name}")
        if tree is None:
            self._tell("--warm-start: trials run fresh: no cgroup v2 to hold a warm trial's processes")
            return None
        view = self.host.view
        state = None
        if view.on:
            state = sandboxing.new_state_dir(request.trial_dir, request.name)
            for folder in request.outputs:
                files.makedirs_beneath(view.gcs_root, folder)
            ops = sandboxing.replica_ops(view, state_dir=state, writable=(request.trial_dir, *request.outputs),
                                         home=request.env.get("HOME"))
        else:
            ops = ["cd", view.launch_dir]
        env = {**request.env, **self.host._extra_env}  # what the host backend adds (the storage endpoint)
        paths = list(dict.fromkeys([request.stdout_path, request.stderr_path]))
        logs: dict[str, int] = {}
        try:
            for path in paths:
                os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
                logs[path] = files.open_log(path)
            offsets = {path: os.fstat(fd).st_size for path, fd in logs.items()}
            payload: dict[str, Any] = {"shim": [tree.procs_file, "-", *ops, "--", form.python], "env": env,
                                       "kind": form.kind, "target": form.target, "args": list(form.args)}
            reply = slot.launcher.start(payload, [logs[request.stdout_path], logs[request.stderr_path]])
        except LauncherGone as err:
            reply = {"refused": 0, "why": f"the warm launcher is gone ({err})", "restart": True}
        finally:
            for fd in logs.values():
                os.close(fd)
        if "started" not in reply:
            tree.remove()
            if state is not None:
                shutil.rmtree(state, ignore_errors=True)
            self._tell(f"--warm-start: a trial runs fresh: {reply.get('why')}")
            if reply.get("restart"):
                slot.old.append(slot.launcher)
                self._new_launcher(slot)
            return None
        pid = int(reply["pid"])
        echoes = [Echo(path, offsets[path], f"[{request.label}] ", request.echo)
                  for path in paths] if request.echo is not None else []
        for thread in echoes:
            thread.start()
        replica = WarmReplica(WarmProc(slot.launcher, pid), name=request.label, argv=request.argv,
                              stdout_path=request.stdout_path, stderr_path=request.stderr_path,
                              memory_limit_mb=request.memory_limit_mb, start_time=process_start_time(pid),
                              echoes=echoes, tree=tree)
        if state is not None:
            replica.place_upper_dir(sandboxing.upper_dir(state))
            layers = self.host.layers
            if layers is not None:
                replica.on_end = lambda r: layers.ended(state, failed=r.failed_on_its_own)
        self._warm.append(replica)
        return replica


class WarmRetry:
    """The loop's rules, but a replica that failed warm (its own non-zero exit) starts again fresh, once,
    without using a restart budget; both attempts are the trial's."""

    def __init__(self, backend: WarmBackend):
        self.backend = backend

    def on_exit(self, run: RunningTrial, name: str, decision: ExitDecision) -> ExitDecision:
        handle = run.replicas[name]
        if decision.action not in (ExitAction.FAIL, ExitAction.RESTART, ExitAction.RETRY_JOB):
            return decision
        if handle.stop_requested_at is not None or not self.backend.ran_warm(handle):
            return decision
        self.backend.next_fresh(run.paths.trial_dir, name)
        return ExitDecision(action=ExitAction.RESTART, injected=True,
                            message=f"exit {run.exited.get(name)} warm: started again fresh (--warm-start)")

    def on_pass(self, run: RunningTrial, now: float) -> PassAction:
        return PassAction.GO_ON


def warm_backend(backend: ReplicaBackend, *, runtime: str, job_dir: str) -> tuple[WarmBackend, WarmRetry]:
    """``--warm-start`` over a job's backend.

    Raises:
        ConfigError: the runtime's trials cannot start warm (``registry.check_warm_start``), or no such runtime.
    """
    registry.check_warm_start(registry.get(runtime))
    host = backend if isinstance(backend, HostBackend) else None
    warm = WarmBackend(backend, host, job_dir=job_dir)
    return warm, WarmRetry(warm)
