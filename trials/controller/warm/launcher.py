"""The warm launcher's process: imports a trainer's modules once, then forks each trial into its sandbox.

``python -m trials.controller.warm.launcher LIBRARY PRELOAD LAUNCH_DIR EXCLUDED…`` (the launch folder, the
trainers' working folder, is excluded too), its stdin a Unix socket to the
controller (:mod:`trials.controller.warm.backend`). It imports the modules named in the PRELOAD file (the
survey's, validated by the controller) and nothing else: no framework op, no CUDA; never a module from the
launch or job folders (EXCLUDED are taken off ``sys.path``; each child gets a trainer's path back); then
``gc.freeze()`` (else each child's first collections touch, so copy, every page of the imported objects).
Then it serves, one JSON line each way:

- ``{"start": ID, "shim": [...], "env": {...}, "kind", "target", "args"}`` with the replica's stdout and
  stderr descriptors: unless a fork hazard is found (:func:`fork_hazard`: a thread, CUDA initialised, a
  preloaded file changed), it forks; the child leads a new session, takes the logs, and enters the
  trial's cgroup, namespaces and view through the exec shim's own code (``shim.c`` built as a library:
  ``trials_shim_enter``, which returns in the process the shim would have exec'd the trainer in), then
  becomes the trainer (:func:`trials.controller.warm.child.become_trainer`). Answer ``{"started": ID,
  "pid": PID}`` or ``{"refused": ID, "why": ..., "restart": bool}``.
- ``{"import": [NAMES]}``: import these too (the first trial's survey, when the launcher started on its
  script's own imports), collect and freeze again; answer ``{"imported": N, "failed": [...], ...}``.
  A start asked after it forks with them (one line at a time, in order).
- ``{"exit": PID, "returncode": RC, "mono": T}`` when a child ends (its wait status as Popen gives it,
  the monotonic time it was reaped).

It has no thread (a fork copies only the forking thread) and ends when the controller closes the socket.
"""

from __future__ import annotations

import os
import signal
import socket
import sys
import time

TYPE_CHECKING = False
if TYPE_CHECKING:  # pragma: no cover
    from collections.abc import Mapping, Sequence
    from typing import Any

MAX_FDS = 2
child: Any = None  # trials.controller.warm.child, imported by main() before the preload
_RECV = 1 << 20


def fork_hazard(modules: Mapping[str, Any], n_threads: int) -> str | None:
    """Why forking now would give a child a broken process (None: safe).

    A thread of the launcher does not exist in the child, but what it held does (a thread pool's lock: a
    torch or TensorFlow op in the launcher hangs every child's first op); CUDA initialised before a fork
    fails every child ("Cannot re-initialize CUDA in forked subprocess")."""
    if n_threads != 1:
        return f"the launcher runs {n_threads} threads (an import started them); a fork would copy their locks"
    torch = modules.get("torch")
    cuda = getattr(torch, "cuda", None)
    initialised = getattr(cuda, "is_initialized", None)
    try:
        if initialised is not None and initialised():
            return "CUDA is initialised in the launcher; a forked child cannot use it"
    except Exception as err:  # a half-imported torch: do not fork what cannot be checked
        return f"torch.cuda.is_initialized() failed in the launcher: {type(err).__name__}"
    return None


def n_threads() -> int:
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return 0  # cannot tell: never fork


def preloaded_files() -> dict[str, tuple[int, int]]:
    """Each loaded module's file with its (mtime_ns, size)."""
    out = {}
    for module in list(sys.modules.values()):
        path = getattr(module, "__file__", None)
        if isinstance(path, str) and path not in out:
            try:
                st = os.stat(path)
            except OSError:
                continue
            out[path] = (st.st_mtime_ns, st.st_size)
    return out


def changed(files: Mapping[str, tuple[int, int]]) -> str | None:
    for path, seen in files.items():
        try:
            st = os.stat(path)
            now = (st.st_mtime_ns, st.st_size)
        except OSError:
            now = (-1, -1)
        if now != seen:
            return path
    return None


def settle() -> None:
    """One throw-away fork: the fork handlers of what was imported run once in the launcher (OpenBLAS, loaded
    by NumPy's import, shuts its thread pool down before a fork and starts it again on its next call, which
    the launcher never makes), so the threads they stopped do not count as a hazard."""
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)


def trainer_path(launch_dir: str) -> list[str]:
    """This interpreter's ``sys.path`` as a trainer's starts (before :func:`preload` takes the launch and job
    folders off it): without the first entry, ``python -m``'s folder, whose place the trainer's own takes
    (:func:`trials.controller.warm.child.run`), unless safe-path mode left it out; a relative ``PYTHONPATH``
    entry, which the interpreter made absolute against this process's folder, against ``launch_dir``, the
    trainer's working folder."""
    path = list(sys.path) if getattr(sys.flags, "safe_path", False) else list(sys.path[1:])
    here = os.getcwd()
    moved = {os.path.abspath(os.path.join(here, entry)): os.path.abspath(os.path.join(launch_dir, entry))
             for entry in os.environ.get("PYTHONPATH", "").split(os.pathsep) if entry and not os.path.isabs(entry)}
    return [moved.get(p, p) for p in path]


def preload(names: Sequence[str], excluded: Sequence[str]) -> list[str]:
    """Import ``names`` (each in turn; a failing one is skipped), none from ``excluded`` folders; returns
    the names that failed."""
    import importlib

    here = os.getcwd()
    keep = [p for p in sys.path if p and os.path.abspath(p) != here
            and not any(os.path.abspath(p) == f or os.path.abspath(p).startswith(f.rstrip("/") + "/")
                        for f in excluded)]
    sys.path[:] = keep
    failed = []
    for name in names:
        try:
            importlib.import_module(name)
        except BaseException:  # noqa: BLE001 - a module that fails here is imported by the trainer itself
            failed.append(name)
    return failed


class Launcher:
    """The serving loop (see the module's docstring)."""

    def __init__(self, sock: socket.socket, library: str, files: Mapping[str, tuple[int, int]],
                 path: Sequence[str] = ()):
        import ctypes

        self.sock = sock
        self.path = list(path)  # a child's sys.path (:func:`trainer_path`)
        self.files = dict(files)
        self.lib = ctypes.PyDLL(library)  # keeps the GIL: the child's one thread runs on after the call
        self.lib.trials_shim_enter.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)]
        self.lib.trials_shim_enter.restype = ctypes.c_int
        self._ctypes = ctypes
        self.buffer = b""
        self.fds: list[int] = []
        self.wake_r, self.wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)

    def send(self, message: Mapping[str, Any]) -> None:
        import json

        self.sock.sendall(json.dumps(message).encode() + b"\n")

    def serve(self) -> None:
        import json
        import selectors

        signal.set_wakeup_fd(self.wake_w)
        signal.signal(signal.SIGCHLD, lambda *_: None)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        sel = selectors.DefaultSelector()
        sel.register(self.sock, selectors.EVENT_READ)
        sel.register(self.wake_r, selectors.EVENT_READ)
        while True:
            for key, _ in sel.select():
                if key.fileobj is self.sock:
                    data, fds, _, _ = socket.recv_fds(self.sock, _RECV, MAX_FDS)
                    if not data:
                        return  # the controller is done (or gone)
                    self.buffer += data
                    self.fds += fds
                    while b"\n" in self.buffer:
                        line, self.buffer = self.buffer.split(b"\n", 1)
                        message = json.loads(line)
                        if "import" in message:
                            self.more(message["import"])
                        else:
                            self.start(message)
                else:
                    try:
                        while os.read(self.wake_r, 512):
                            pass
                    except BlockingIOError:
                        pass
            self.reap()

    def reap(self) -> None:
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            self.send({"exit": pid, "returncode": os.waitstatus_to_exitcode(status), "mono": time.monotonic()})

    def more(self, names: Sequence[str]) -> None:
        """Import more modules (what the first trial loaded beyond its script's own imports), then as at the
        start: collect, freeze, settle; each later fork has them."""
        import gc

        started = time.monotonic()
        failed = preload(names, ())
        self.files = {**preloaded_files(), **self.files}  # (a file seen before keeps its first stamp)
        gc.collect()
        gc.freeze()
        settle()
        self.send({"imported": len(names) - len(failed), "failed": failed[:20],
                   "seconds": time.monotonic() - started, "threads": n_threads()})

    def start(self, request: Mapping[str, Any]) -> None:
        fds, self.fds = self.fds[:MAX_FDS], self.fds[MAX_FDS:]
        try:
            why = fork_hazard(sys.modules, n_threads())
            moved = None if why else changed(self.files)
            if why or moved or len(fds) != MAX_FDS:
                self.send({"refused": request["start"], "restart": bool(moved),
                           "why": why or (f"a preloaded file changed: {moved}" if moved else "no log descriptors")})
                return
            pid = os.fork()
            if pid == 0:
                self.child(request, fds)  # never returns
            self.send({"started": request["start"], "pid": pid})
        finally:
            for fd in fds:
                os.close(fd)

    def child(self, request: Mapping[str, Any], fds: Sequence[int]) -> None:
        code = 125
        try:
            os.setsid()
            null = os.open(os.devnull, os.O_RDWR)
            os.dup2(null, 0)
            os.dup2(fds[0], 1)
            os.dup2(fds[1], 2)
            for fd in (null, *fds, self.wake_r, self.wake_w):
                os.close(fd)
            self.sock.detach()  # (its descriptor, 0, is /dev/null now)
            words = ["trials-shim", str(os.getppid()), *request["shim"]]
            argv = (self._ctypes.c_char_p * (len(words) + 1))(*[w.encode() for w in words], None)
            code = self.lib.trials_shim_enter(len(words), argv)
            if code == 0:  # the trainer: in its cgroup, namespaces and view
                sys.path[:] = [*self.path, *(p for p in sys.path if p not in self.path)]
                child.become_trainer(request["env"], request["kind"], request["target"], request["args"])
        except BaseException:  # noqa: BLE001 - the child must never return into the launcher's loop
            import traceback

            traceback.print_exc()
        os._exit(code or 125)


def main(argv: Sequence[str]) -> None:
    import gc
    import json

    global child
    from trials.controller.warm import child

    if len(argv) < 2:
        print("usage: python -m trials.controller.warm.launcher LIBRARY PRELOAD [LAUNCH_DIR [EXCLUDED...]]",
              file=sys.stderr)
        raise SystemExit(2)
    library, preload_file, *excluded = argv
    sock = socket.socket(fileno=0)
    with open(preload_file, encoding="utf-8") as f:
        names = json.load(f)
    started = time.monotonic()
    path = trainer_path(excluded[0] if excluded else os.getcwd())
    failed = preload(names, excluded)
    files = preloaded_files()
    gc.collect()
    gc.freeze()  # the imports' objects stay out of every collection: no child copies their pages for it
    settle()
    launcher = Launcher(sock, library, files, path)
    launcher.send({"ready": len(names) - len(failed), "failed": failed[:20], "seconds": time.monotonic() - started,
                   "threads": n_threads()})
    launcher.serve()


if __name__ == "__main__":
    main(sys.argv[1:])
