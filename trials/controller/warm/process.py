"""The controller's side of one warm launcher: its process, its socket, the children it reported.

A launcher is a child of the controller (it dies with it: PR_SET_PDEATHSIG); its children, the warm
trials, are the launcher's, so their exits come over the socket (:class:`WarmProc` stands in for a
``Popen`` in a :class:`trials.controller.process.replica.Replica`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import select
import socket
import subprocess
import time
from collections.abc import Mapping, Sequence
from typing import Any

from trials import files
from trials.controller.backend.protocol import ExitHow, ReplicaExit
from trials.controller.process.deathsig import die_with_parent, libc_prctl
from trials.controller.process.replica import Replica

REPLY_TIMEOUT_S = 60.0  # a fork answers in milliseconds; a launcher that does not is dead or stuck
_MAX_LINE = 1 << 20


class LauncherGone(Exception):
    """The launcher ended or broke its protocol."""


class LauncherProcess:
    """One launcher (see :mod:`trials.controller.warm.launcher`), started in ``folder``."""

    def __init__(self, *, python: str, library: str, names: Sequence[str], env: Mapping[str, str],
                 folder: str, excluded: Sequence[str], tag: str):
        os.makedirs(folder, exist_ok=True)
        preload = os.path.join(folder, f"preload-{tag}.json")
        files.write_text_atomic(preload, json.dumps(list(names)))
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        log = files.open_log(os.path.join(folder, f"launcher-{tag}.log"))
        prctl = libc_prctl()
        try:
            self.proc = subprocess.Popen(
                [python, "-m", "trials.controller.warm.launcher", library, preload, *excluded],
                stdin=theirs.fileno(), stdout=log, stderr=log, env=dict(env), cwd=folder,
                start_new_session=True, close_fds=True,
                preexec_fn=None if prctl is None else die_with_parent(os.getpid(), prctl))
        finally:
            theirs.close()
            os.close(log)
        self.started = time.monotonic()
        self.sock = ours
        self.sock.setblocking(False)
        self.tag = tag
        self.names = tuple(names)
        self.ready: dict[str, Any] | None = None
        self.gone = False
        self.retired = False  # a newer launcher serves its key: close once its children ended
        self.imported: list[dict[str, Any]] = []  # the answers to :meth:`add`
        self.exits: dict[int, tuple[int, float]] = {}
        self.children: set[int] = set()
        self._replies: dict[int, dict[str, Any]] = {}
        self._buffer = b""
        self._next = 0

    def pump(self) -> None:
        """Take what the launcher said (never blocks)."""
        while not self.gone:
            try:
                data = self.sock.recv(65536)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                data = b""
            if not data:
                self.gone = True
                return
            self._buffer += data
            if len(self._buffer) > _MAX_LINE and b"\n" not in self._buffer:
                self.gone = True
                return
            while b"\n" in self._buffer:
                line, self._buffer = self._buffer.split(b"\n", 1)
                self._take(json.loads(line))

    def _take(self, message: dict[str, Any]) -> None:
        if "exit" in message:
            pid = int(message["exit"])
            self.exits[pid] = (int(message["returncode"]), float(message["mono"]))
            self.children.discard(pid)
        elif "ready" in message:
            self.ready = message
        elif "imported" in message:
            self.imported.append(message)
        elif "started" in message or "refused" in message:
            self._replies[int(message.get("started", message.get("refused", -1)))] = message

    def add(self, names: Sequence[str]) -> None:
        """Have the launcher import ``names`` too (each start asked later forks with them).

        Raises:
            LauncherGone: the launcher's socket is closed.
        """
        line = json.dumps({"import": list(names)}).encode() + b"\n"
        try:
            self.sock.setblocking(True)
            self.sock.sendall(line)
        except OSError as err:
            self.gone = True
            raise LauncherGone(f"the launcher's socket: {err.strerror or err}") from None
        finally:
            self.sock.setblocking(False)
        self.names = tuple(dict.fromkeys([*self.names, *names]))

    def start(self, payload: Mapping[str, Any], fds: Sequence[int]) -> dict[str, Any]:
        """Ask for a child; the launcher's answer (``started`` with its ``pid``, or ``refused``).

        Raises:
            LauncherGone: no answer (the launcher died or hung).
        """
        self._next += 1
        ident = self._next
        line = json.dumps({**payload, "start": ident}).encode() + b"\n"
        try:
            self.sock.setblocking(True)
            sent = socket.send_fds(self.sock, [line], list(fds))
            if sent < len(line):
                self.sock.sendall(line[sent:])
        except OSError as err:
            self.gone = True
            raise LauncherGone(f"the launcher's socket: {err.strerror or err}") from None
        finally:
            self.sock.setblocking(False)
        deadline = time.monotonic() + REPLY_TIMEOUT_S
        while ident not in self._replies:
            self.pump()
            if self.gone:
                raise LauncherGone("the launcher ended")
            if ident in self._replies:
                break
            left = deadline - time.monotonic()
            if left <= 0:
                raise LauncherGone(f"the launcher did not answer in {REPLY_TIMEOUT_S:g}s")
            select.select([self.sock], [], [], left)
        reply = self._replies.pop(ident)
        if "started" in reply:
            self.children.add(int(reply["pid"]))
        return reply

    def close(self) -> None:
        """End the launcher (its running children die with it: close it once they ended)."""
        with contextlib.suppress(OSError):
            self.sock.close()
        self.gone = True
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


class WarmProc:
    """A launcher's child as a ``Popen`` for :class:`Replica`: its exit comes from the launcher."""

    def __init__(self, launcher: LauncherProcess, pid: int):
        self.launcher = launcher
        self.pid = pid
        self.returncode: int | None = None
        self.exit_mono: float | None = None
        self.lost = False  # the launcher died before it told this child's exit

    def poll(self) -> int | None:
        if self.returncode is None:
            self.launcher.pump()
            got = self.launcher.exits.pop(self.pid, None)
            if got is not None:
                self.returncode, self.exit_mono = got
            elif self.launcher.gone:  # the launcher died: its children died with it (PR_SET_PDEATHSIG)
                self.returncode, self.exit_mono, self.lost = -9, time.monotonic(), True
        return self.returncode


class WarmReplica(Replica):
    """A replica forked by a launcher: its exit time is the launcher's reap, not this process's poll; one
    whose launcher died before it told the exit is lost."""

    def _exit_time(self) -> float:
        return self._proc.exit_mono or time.monotonic()

    def poll(self) -> ReplicaExit | None:
        ended = super().poll()
        if ended is None or not self._proc.lost or ended.how is ExitHow.LOST:
            return ended
        self._exit = dataclasses.replace(ended, how=ExitHow.LOST, signal=None)
        return self._exit
