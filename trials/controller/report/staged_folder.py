"""A folder written beside its place and swapped in whole: a reader sees the old one or the new one.

``trials report`` killed half-way (SIGTERM, SIGKILL) left ``report/`` with some PNGs and no
``index.html``. The new folder is now written under a hidden sibling name, ``.report.partial-XXXX``,
locked (``flock``) by its writer for as long as it writes, then exchanged with the old folder in
one ``renameat2(RENAME_EXCHANGE)`` (where the filesystem lacks it: the old one is renamed aside
first, so for an instant there is no folder, never half of one). A killed writer's sibling is
removed by the next writer, which can tell it from a live writer's by its lock.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import os
import shutil
import tempfile
from collections.abc import Iterator

PARTIAL = ".partial-"  # a folder being written (or, after the swap, the old one being removed)
OLD = ".old-"  # the old folder renamed aside (no RENAME_EXCHANGE)
_AT_FDCWD = -100
_RENAME_EXCHANGE = 2
_DIR_FLAGS = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)


def is_leftover(entry: str, name: str) -> bool:
    """Whether ``entry`` (a name in the parent folder) is a staging or an old folder of ``name``."""
    return entry.startswith((f".{name}{PARTIAL}", f".{name}{OLD}"))


@contextlib.contextmanager
def staged(path: str) -> Iterator[str]:
    """A new empty folder beside ``path`` to write into; when the block ends normally, it replaces
    ``path`` whole (the old folder, if any, is removed). When the block raises, nothing changes.

    Raises:
        NotADirectoryError: ``path`` exists and is not a folder.
    """
    path = os.path.abspath(path)
    parent, name = os.path.split(path)
    if os.path.lexists(path) and (os.path.islink(path) or not os.path.isdir(path)):
        raise NotADirectoryError(errno.ENOTDIR, "expected a folder (it is replaced whole)", path)
    os.makedirs(parent, exist_ok=True)
    remove_leftovers(parent, name)
    tmp, fd = _create_locked(parent, name)
    try:
        try:
            yield tmp
            _swap_in(tmp, path)  # tmp now holds the old folder, or nothing
        finally:
            _remove_tree(tmp)
    finally:
        os.close(fd)


def remove_leftovers(parent: str, name: str) -> list[str]:
    """Remove the staging and old folders of ``name`` that no live writer holds; returns their paths."""
    removed = []
    try:
        entries = os.listdir(parent)
    except FileNotFoundError:
        return []
    for entry in entries:
        if not is_leftover(entry, name):
            continue
        where = os.path.join(parent, entry)
        try:
            fd = os.open(where, _DIR_FLAGS)
        except OSError:
            continue  # gone meanwhile, or not a folder: not ours to touch
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                continue  # another `trials report` is writing it
            if _same(where, fd):
                _remove_tree(where)
                removed.append(where)
        finally:
            os.close(fd)
    return removed


def _create_locked(parent: str, name: str) -> tuple[str, int]:
    """A new staging folder and a descriptor holding its lock (a sweeping writer never removes it)."""
    while True:
        tmp = tempfile.mkdtemp(prefix=f".{name}{PARTIAL}", dir=parent)
        fd = os.open(tmp, _DIR_FLAGS)
        fcntl.flock(fd, fcntl.LOCK_EX)  # waits only while another writer's sweep removes it
        if _same(tmp, fd):
            return tmp, fd
        os.close(fd)  # swept away as a leftover before it was locked: make another


def _same(path: str, fd: int) -> bool:
    try:
        st = os.stat(path, follow_symlinks=False)
    except FileNotFoundError:
        return False
    held = os.fstat(fd)
    return (st.st_dev, st.st_ino) == (held.st_dev, held.st_ino)


def _swap_in(tmp: str, path: str) -> None:
    if not os.path.lexists(path):
        try:
            os.rename(tmp, path)
            return
        except OSError as err:  # another writer put one there meanwhile: exchange with it
            if err.errno not in (errno.ENOTEMPTY, errno.EEXIST):
                raise
    if _exchange(tmp, path):
        return
    parent, name = os.path.split(path)
    old = tempfile.mkdtemp(prefix=f".{name}{OLD}", dir=parent)
    os.rename(path, old)  # (onto the empty placeholder) from here until the next line, no folder
    os.rename(tmp, path)
    _remove_tree(old)


def _exchange(a: str, b: str) -> bool:
    """``renameat2(a, b, RENAME_EXCHANGE)``; False where the system or the filesystem has no such call."""
    try:
        fn = ctypes.CDLL(None, use_errno=True).renameat2
    except (AttributeError, OSError):
        return False
    if fn(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
        return False
    raise OSError(err, os.strerror(err), b)


def _remove_tree(path: str) -> None:
    """Remove a folder; what another process removed meanwhile is fine."""
    def gone_is_fine(_fn: object, _path: str, info: tuple[type[BaseException], BaseException, object]) -> None:
        if not isinstance(info[1], FileNotFoundError):
            raise info[1]

    with contextlib.suppress(FileNotFoundError):
        shutil.rmtree(path, onerror=gone_is_fine)  # (onexc from Python 3.12 only)
