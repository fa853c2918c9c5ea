"""A sandboxed replica's copy-on-write layers: thrown away when its attempt ends, the last failed one kept.

Each start of a replica in the sandbox gets a folder ``<trial>/sandbox/<replica>.<n>`` holding every
layer of its view (``shim.c``: the whole host file system copy-on-write). When the attempt ends, the
folder goes, as a container's layer does, unless the attempt failed on its own (a non-zero exit the
controller did not ask for, or a kill for memory): then it is kept for debugging, in place of that
replica's earlier kept one, while all the job's kept layers stay under ``KEEP_MAX_BYTES`` (the oldest go
first; one bigger than that is not kept). ``trials gc JOB`` removes what is kept (:func:`collect`).

The removals run on one thread of their own, so a big layer never holds up the job loop; it ends when
nothing is left to remove (a process running job after job in-process keeps no idle thread per job, and
a later fork, as the report's drawing child, finds none); :meth:`Layers.drain` waits for them and for it
(the backend's close).
"""

from __future__ import annotations

import os
import queue
import shutil
import stat
import threading
from collections.abc import Iterator
from dataclasses import dataclass

from trials import protocol

KEEP_MAX_BYTES = 1 << 30  # what the kept layers of a job's failed attempts may hold in all (one controller run)


def layer_bytes(top: str, limit: int) -> int:
    """The disk space of the files under ``top`` (links not followed), counted up to just past ``limit``."""
    total = 0
    stack = [top]
    while stack:
        try:
            entries = os.scandir(stack.pop())
        except OSError:
            continue
        with entries:
            for entry in entries:
                try:
                    st = entry.stat(follow_symlinks=False)
                except OSError:
                    continue
                total += st.st_blocks * 512
                if total > limit:
                    return total
                if stat.S_ISDIR(st.st_mode):
                    stack.append(entry.path)
    return total


def remove_layer(path: str) -> None:
    """Remove a layer's folder; what a trainer left in it is never followed (links are removed as links).

    A trainer of the same user (the user-namespace sandbox) may have taken its own rights off a folder:
    they are given back (owner rwx, no link followed) and the removal tried again.
    """
    try:
        if os.path.islink(path) or not os.path.isdir(path):
            os.unlink(path)
            return
        shutil.rmtree(path)
        return
    except FileNotFoundError:
        return
    except OSError:
        pass
    _open_up(path)
    shutil.rmtree(path, ignore_errors=True)


def _open_up(top: str) -> None:
    stack = [top]
    while stack:
        folder = stack.pop()
        try:
            fd = os.open(folder, os.O_PATH | os.O_NOFOLLOW | os.O_DIRECTORY)
        except OSError:
            continue
        try:
            os.chmod(f"/proc/self/fd/{fd}", 0o700)
        except OSError:
            pass
        finally:
            os.close(fd)
        try:
            with os.scandir(folder) as entries:
                stack.extend(e.path for e in entries if e.is_dir(follow_symlinks=False))
        except OSError:
            continue


class Layers:
    """The layers of one job's sandboxed attempts (one per backend): what goes, what is kept.

    Args:
        max_bytes: what the kept layers may hold in all.
    """

    def __init__(self, *, max_bytes: int = KEEP_MAX_BYTES):
        self.max_bytes = max_bytes
        self.kept: list[tuple[str, int]] = []  # (folder, bytes), oldest first
        self._queue: queue.Queue[tuple[str, bool]] = queue.Queue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def ended(self, state_dir: str, *, failed: bool) -> None:
        """The attempt whose layers are in ``state_dir`` ended (its processes are gone)."""
        with self._lock:  # (the thread ends, under this lock, only when it finds the queue empty)
            self._queue.put((state_dir, failed))
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="trials-layers", daemon=True)
                self._thread.start()

    def drain(self) -> None:
        """Wait until every ended attempt's layers are removed or kept, and the removals' thread has ended."""
        self._queue.join()
        with self._lock:
            thread = self._thread
        if thread is not None:
            thread.join()

    def _run(self) -> None:
        while True:
            with self._lock:
                try:
                    state_dir, failed = self._queue.get_nowait()
                except queue.Empty:
                    self._thread = None
                    return
            try:
                self.settle(state_dir, failed=failed)
            except OSError:
                pass  # a layer that could not be removed stays for `trials gc`
            finally:
                self._queue.task_done()

    def settle(self, state_dir: str, *, failed: bool) -> None:
        """Remove the layers, or keep them as their replica's last failed attempt's (within the bound)."""
        if not failed:
            remove_layer(state_dir)
            return
        size = layer_bytes(state_dir, self.max_bytes)
        if size > self.max_bytes:
            remove_layer(state_dir)
            return
        folder, replica = _replica_of(state_dir)
        for other in [k for k in self.kept if _replica_of(k[0]) == (folder, replica)]:
            self.kept.remove(other)
            remove_layer(other[0])
        for name in ("work", "root"):  # the overlays' scratch and the view's mount point: nothing to read
            remove_layer(os.path.join(state_dir, name))
        self.kept.append((state_dir, size))
        while sum(n for _, n in self.kept) > self.max_bytes:
            remove_layer(self.kept.pop(0)[0])


def _replica_of(state_dir: str) -> tuple[str, str]:
    folder, name = os.path.split(state_dir)
    return folder, name.rpartition(".")[0]


@dataclass(frozen=True, slots=True, kw_only=True)
class KeptLayer:
    """A layer folder left in a trial folder: a failed attempt's (or one of a controller that died)."""

    trial_id: str
    path: str


def kept_layers(job_dir: str) -> Iterator[KeptLayer]:
    """Every ``<trial>/sandbox/<replica>.<n>`` folder of the job (while it runs, its live attempts' too),
    trials in id order; links and other files are not followed."""
    try:
        names = os.listdir(job_dir)
    except OSError:
        return
    for trial in sorted((n for n in names if n.isdigit()), key=int):
        base = os.path.join(job_dir, trial, protocol.SANDBOX_DIR)
        try:
            st = os.lstat(base)
            layers = sorted(os.listdir(base)) if stat.S_ISDIR(st.st_mode) else []
        except OSError:
            continue
        for name in layers:
            path = os.path.join(base, name)
            try:
                is_dir = stat.S_ISDIR(os.lstat(path).st_mode)
            except OSError:
                continue
            if is_dir:
                yield KeptLayer(trial_id=trial, path=path)


def collect(job_dir: str) -> tuple[int, int]:
    """Remove every trial's ``sandbox`` folder of a job that no controller runs (``trials gc``); returns
    (layers removed, bytes freed)."""
    n = freed = 0
    for layer in kept_layers(job_dir):
        freed += layer_bytes(layer.path, 1 << 62)
        n += 1
    try:
        names = os.listdir(job_dir)
    except OSError:
        return 0, 0
    for trial in (name for name in names if name.isdigit()):
        base = os.path.join(job_dir, trial, protocol.SANDBOX_DIR)
        if os.path.lexists(base):
            remove_layer(base)
    return n, freed
