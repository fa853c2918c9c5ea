"""Files in places a trainer can write: never follow a link, never block on a FIFO, never read unbounded.

A trial folder is hostile ground (DESIGN.md §3.13): whatever the controller writes, appends or reads
there may have been replaced by a symlink, a FIFO, a device or a directory. Every such access goes
through this module. Only the last path component is checked: the folders above it are the
controller's own.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_NONBLOCK = getattr(os, "O_NONBLOCK", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)


class NotRegularFileError(OSError):
    """The path is a symlink, FIFO, device, socket or directory where a regular file was expected."""


def kind_of(mode: int) -> str:
    """A short human name for a file type (for messages)."""
    for test, name in ((stat.S_ISLNK, "a symlink"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISDIR, "a directory"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "a regular file" if stat.S_ISREG(mode) else "not a regular file"


def open_regular(path: str | os.PathLike[str], flags: int, mode: int = 0o644) -> int:
    """``os.open`` that refuses a symlink as the last component and anything but a regular file.

    Opening never blocks (a FIFO is opened non-blocking, then refused); the descriptor returned is
    blocking again and close-on-exec.

    Raises:
        NotRegularFileError: the path is a symlink or not a regular file (nothing was written).
        OSError: as ``os.open`` (missing file, permissions, disk full).
    """
    try:
        fd = os.open(path, flags | _NOFOLLOW | _NONBLOCK | _CLOEXEC, mode)
    except OSError as err:
        if err.errno == errno.ELOOP:  # O_NOFOLLOW on a symlink
            raise NotRegularFileError(errno.ELOOP, "refusing to follow a symlink", os.fspath(path)) from None
        if err.errno == errno.ENXIO:  # a FIFO opened for writing with no reader
            raise NotRegularFileError(errno.ENXIO, "refusing a FIFO", os.fspath(path)) from None
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise NotRegularFileError(errno.EINVAL, f"refusing {kind_of(st.st_mode)}", os.fspath(path))
        if _NONBLOCK:
            os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def is_beneath(path: str, top: str) -> bool:
    """Whether ``path`` is ``top`` or inside it, by their absolute names (no link is resolved)."""
    path, top = os.path.abspath(path), os.path.abspath(top)
    return path == top or path.startswith(top.rstrip("/") + "/")


def makedirs_beneath(top: str, path: str) -> None:
    """``os.makedirs(path, exist_ok=True)``, but every folder below ``top`` is made or opened at its parent's
    descriptor with ``O_NOFOLLOW``: a link a trainer planted on the way (``top`` is the job's bucket folder, which
    every trial writes as ``/gcs``) is refused, never followed, so no folder is made elsewhere on the host. ``top``
    is the controller's own and followed as it is; a ``path`` not beneath it is made as ``os.makedirs`` would.

    Raises:
        NotADirectoryError: a link or a file is on the way (it names the component).
        OSError: as ``os.mkdir`` (permissions, disk full).
    """
    path = os.path.abspath(path)
    top = os.path.abspath(top) if top else ""
    if not top or not is_beneath(path, top):
        os.makedirs(path, exist_ok=True)
        return
    os.makedirs(top, exist_ok=True)
    fd = os.open(top, os.O_RDONLY | os.O_DIRECTORY | _CLOEXEC)
    try:
        where = top
        for name in os.path.relpath(path, top).split("/"):
            if name in ("", "."):
                continue
            where = os.path.join(where, name)
            with contextlib.suppress(FileExistsError):
                os.mkdir(name, 0o777, dir_fd=fd)
            try:
                step = os.open(name, os.O_RDONLY | os.O_DIRECTORY | _NOFOLLOW | _NONBLOCK | _CLOEXEC, dir_fd=fd)
            except OSError as err:
                if err.errno not in (errno.ELOOP, errno.ENOTDIR):
                    raise
                try:
                    kind = kind_of(os.stat(name, dir_fd=fd, follow_symlinks=False).st_mode)
                except OSError:
                    kind = "not a folder"
                raise NotADirectoryError(errno.ENOTDIR, f"refusing {kind} where a folder was expected (a link is "
                                                        "never followed)", where) from None
            os.close(fd)
            fd = step
    finally:
        os.close(fd)


def read_regular(path: str | os.PathLike[str], *, max_bytes: int, offset: int = 0) -> bytes:
    """Read at most ``max_bytes`` of a regular file from ``offset``, refusing links and FIFOs."""
    fd = open_regular(path, os.O_RDONLY)
    try:
        if offset:
            os.lseek(fd, offset, os.SEEK_SET)
        chunks: list[bytes] = []
        left = max_bytes
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def append_bytes(path: str | os.PathLike[str], data: bytes, *, mode: int = 0o644) -> None:
    """Append to a regular file (created if missing), refusing links and FIFOs."""
    fd = open_regular(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, mode)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
    finally:
        os.close(fd)


def open_append(path: str | os.PathLike[str], *, mode: int = 0o644) -> int:
    """A descriptor appending to a regular file (created if missing), e.g. a replica's stdout log."""
    return open_regular(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, mode)


def open_log(path: str | os.PathLike[str]) -> int:
    """Append to a replica's log; a symlink, FIFO or device a trainer planted there is replaced (the
    trainer's own entry: its earlier output is what it replaced), a directory refused."""
    try:
        return open_append(path)
    except NotRegularFileError:
        if os.path.isdir(path) and not os.path.islink(path):
            raise
        os.unlink(path)
        return open_append(path)


def write_atomic(path: str | os.PathLike[str], data: bytes, *, fsync: bool = False, mode: int = 0o644) -> None:
    """Replace ``path`` with ``data`` all at once: readers see the old or the new file, never a part.

    The temporary file is created exclusively (never through a planted link) and renamed over
    ``path``; a symlink at ``path`` is replaced, not followed.
    """
    path = os.fspath(path)
    tmp = f"{path}.{os.getpid()}.tmp"
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW | _CLOEXEC, mode)
    except FileExistsError:  # a leftover of a killed writer with our pid, or a planted entry
        os.unlink(tmp)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW | _CLOEXEC, mode)
    try:
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            if fsync:
                os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def write_text_atomic(path: str | os.PathLike[str], text: str, *, fsync: bool = False) -> None:
    """:func:`write_atomic` for text (UTF-8)."""
    write_atomic(path, text.encode("utf-8"), fsync=fsync)
