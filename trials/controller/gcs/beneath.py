"""The bucket folder's files, reached only beneath its root and never through a link.

Trainers write the bucket folder (it is ``/gcs`` in their sandbox or container), so anything in it may
be a link to ``/``, a FIFO or a device, and may be swapped for one between two calls. Every path is
therefore opened one component at a time from a descriptor of the root, each folder with
``O_DIRECTORY | O_NOFOLLOW`` at the folder before it (a link there is refused, never followed, so a
link swapped in after a check cannot win: there is no second lookup of the whole path). A file is
opened ``O_NOFOLLOW | O_NONBLOCK`` (a FIFO never blocks the endpoint) and used only if ``fstat`` says
it is a regular file. Folders for an upload are made with ``mkdir`` at their parent's descriptor; an
upload is written to a new file there and renamed over the name (readers never see it half-written,
and the rename replaces whatever the name was, never writing through it); deletes unlink at the
parent's descriptor; listings scan descriptors and never descend into a link.

:class:`Store` has the interface of gcp-storage-emulator's ``_FileStore`` (paths are ``/``-separated
and relative to the root); it is what :class:`trials.controller.gcs.server.LocalBuckets` keeps its
objects and its own state in.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import stat
from collections.abc import Callable, Iterable, Iterator

_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_READ = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
_NEW = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_APPEND = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
TEMP_PREFIX = ".trials-upload-"  # an upload being written (never listed as an object)
MAX_DEPTH = 512  # an object name is at most 1024 bytes: no name lies deeper than this many folders


class Refused(PermissionError):
    """A link, a FIFO, a device or a ``..`` on the way to a name: never followed, opened or written through."""


def split(rel: str) -> list[str]:
    """``rel``'s components (``/``-separated as object names are; empty ones and ``.`` dropped, as the
    emulator's own store does); ``..`` is refused."""
    names = [n for n in rel.replace("\\", "/").split("/") if n and n != "."]
    if ".." in names:
        raise Refused(errno.EACCES, "a '..' in the name", rel)
    return names


class Store:
    """The emulator's file store over ``root`` (a folder of ours: its own path is trusted, what is in
    it is not). Raises :class:`Refused` for a link or a special file, ``FileNotFoundError``,
    ``NotADirectoryError`` or ``IsADirectoryError`` as the emulator's store does."""

    def __init__(self, root: str):
        os.makedirs(root, exist_ok=True)
        # the root's own path is ours (the job's folder, or --gcs-root: a link there is the user's
        # choice), opened once at the start (a sandboxed trainer sees it as /gcs, a mount point it
        # cannot replace); only what is beneath it is never followed
        self._root = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)

    def close(self) -> None:
        os.close(self._root)

    # -- folders ---------------------------------------------------------------------------------
    def _open_dir(self, names: list[str], *, create: bool = False) -> int:
        """A descriptor of the folder ``names`` beneath the root (made on the way when ``create``)."""
        fd = os.open(".", _DIR, dir_fd=self._root)
        try:
            for name in names:
                step = _step(fd, name, create)
                os.close(fd)
                fd = step
        except BaseException:
            os.close(fd)
            raise
        return fd

    @contextlib.contextmanager
    def _parent(self, names: list[str], *, create: bool = False) -> Iterator[int]:
        fd = self._open_dir(names[:-1], create=create)
        try:
            yield fd
        finally:
            os.close(fd)

    def makedirs(self, rel: str) -> None:
        os.close(self._open_dir(split(rel), create=True))

    # -- files -----------------------------------------------------------------------------------
    def read_bytes(self, rel: str, *, limit: int | None = None) -> bytes:
        """The file's content (more than ``limit`` bytes: ``ValueError``)."""
        with os.fdopen(self.open_read(rel), "rb") as f:
            data = f.read() if limit is None else f.read(limit + 1)
        if limit is not None and len(data) > limit:
            raise ValueError(f"{rel}: more than {limit} bytes")
        return data

    def open_read(self, rel: str) -> int:
        """A descriptor of the regular file ``rel``, for reading (the caller closes it)."""
        names = split(rel)
        if not names:
            raise IsADirectoryError(errno.EISDIR, "the root", rel)
        with self._parent(names) as parent:
            return open_file(parent, names[-1])

    def stat(self, rel: str) -> os.stat_result:
        """The file's own status (a link's, not its target's)."""
        names = split(rel)
        with self._parent(names) as parent:
            return os.stat(names[-1] if names else ".", dir_fd=parent, follow_symlinks=False)

    def exists_file(self, rel: str) -> bool:
        try:
            return stat.S_ISREG(self.stat(rel).st_mode)
        except (OSError, ValueError):
            return False

    def write_bytes(self, rel: str, content: bytes, *, replace_link: bool = False) -> None:
        """Write ``content`` as the file ``rel`` (folders made on the way): a new file renamed over the
        name. A link at the name is refused (``replace_link``: replaced by the file, for our own state)."""
        self.write_stream(rel, (content,), replace_link=replace_link)

    def write_stream(self, rel: str, pieces: Iterable[bytes], *, replace_link: bool = False,
                     before_rename: Callable[[], None] | None = None) -> None:
        """:meth:`write_bytes` of the ``pieces`` one after another (never all in memory); ``before_rename`` is
        called once they are all written, and what it raises leaves nothing at the name."""
        names = split(rel)
        if not names:
            raise IsADirectoryError(errno.EISDIR, "the root", rel)
        leaf = names[-1]
        with self._parent(names, create=True) as parent:
            try:
                mode = os.stat(leaf, dir_fd=parent, follow_symlinks=False).st_mode
            except FileNotFoundError:
                mode = stat.S_IFREG
            if stat.S_ISDIR(mode):
                raise IsADirectoryError(errno.EISDIR, "a folder has this name", rel)
            if not stat.S_ISREG(mode) and not (replace_link and stat.S_ISLNK(mode)):
                raise Refused(errno.EACCES, f"a {_kind(mode)} has this name", rel)
            temp = TEMP_PREFIX + secrets.token_hex(8)
            fd = os.open(temp, _NEW, 0o666, dir_fd=parent)
            try:
                with os.fdopen(fd, "wb") as f:
                    for piece in pieces:
                        f.write(piece)
                if before_rename is not None:
                    before_rename()
                os.rename(temp, leaf, src_dir_fd=parent, dst_dir_fd=parent)
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(temp, dir_fd=parent)
                raise

    def append(self, rel: str, data: bytes) -> int:
        """Add ``data`` at the end of the file ``rel`` (made, with its folders, when missing); its size after.
        Only for our own state: a link or a special file at the name is removed first, never written through."""
        names = split(rel)
        if not names:
            raise IsADirectoryError(errno.EISDIR, "the root", rel)
        with self._parent(names, create=True) as parent:
            for attempt in range(2):
                try:
                    fd = os.open(names[-1], _APPEND, 0o666, dir_fd=parent)
                except OSError as err:  # ELOOP: a link; ENXIO: a FIFO nobody reads (O_NONBLOCK never waits)
                    if err.errno not in (errno.ELOOP, errno.ENXIO) or attempt:
                        raise
                    os.unlink(names[-1], dir_fd=parent)  # planted at our name: gone, never followed or written
                    continue
                try:
                    mode = os.fstat(fd).st_mode
                    if not stat.S_ISREG(mode):
                        if stat.S_ISDIR(mode) or attempt:
                            raise Refused(errno.EACCES, f"a {_kind(mode)} has this name", rel)
                        os.unlink(names[-1], dir_fd=parent)  # a FIFO or a device: removed, never written
                        continue
                    os.set_blocking(fd, True)
                    view = memoryview(data)
                    while view:
                        view = view[os.write(fd, view):]
                    return os.fstat(fd).st_size
                finally:
                    os.close(fd)
        raise AssertionError("unreachable")

    def size(self, rel: str) -> int:
        """The size of the regular file ``rel``; 0 when there is none (a link or a special file is none)."""
        try:
            st = self.stat(rel)
        except (OSError, ValueError):
            return 0
        return st.st_size if stat.S_ISREG(st.st_mode) else 0

    def remove_file(self, rel: str) -> None:
        names = split(rel)
        if not names:
            raise IsADirectoryError(errno.EISDIR, "the root", rel)
        with self._parent(names) as parent:
            mode = os.stat(names[-1], dir_fd=parent, follow_symlinks=False).st_mode
            if stat.S_ISDIR(mode):
                raise IsADirectoryError(errno.EISDIR, "a folder has this name", rel)
            if not stat.S_ISREG(mode):
                raise Refused(errno.EACCES, f"a {_kind(mode)} has this name", rel)
            os.unlink(names[-1], dir_fd=parent)  # a link swapped in meanwhile: the link goes, not its target

    def remove_tree(self, rel: str) -> None:
        """Remove the file or folder ``rel`` and all beneath it; links in it are removed, never followed."""
        names = split(rel)
        if not names:
            raise IsADirectoryError(errno.EISDIR, "the root", rel)
        with self._parent(names) as parent:
            mode = os.stat(names[-1], dir_fd=parent, follow_symlinks=False).st_mode
            if not stat.S_ISDIR(mode):
                os.unlink(names[-1], dir_fd=parent)
                return
            fd = _step(parent, names[-1], False)
            try:
                _clear(fd)
            finally:
                os.close(fd)
            os.rmdir(names[-1], dir_fd=parent)

    def listdir(self, rel: str = "") -> list[str]:
        fd = self._open_dir(split(rel))
        try:
            with os.scandir(fd) as entries:
                return sorted(e.name for e in entries)
        finally:
            os.close(fd)

    # -- listing ---------------------------------------------------------------------------------
    def folders(self, rel: str = "") -> list[str]:
        """The folders (not links) directly in ``rel``."""
        fd = self._open_dir(split(rel))
        try:
            with os.scandir(fd) as entries:
                return sorted(e.name for e in entries if _is_dir(e))
        finally:
            os.close(fd)

    def files(self, rel: str) -> Iterator[tuple[str, os.stat_result, int, str]]:
        """Every regular file beneath the folder ``rel``, as ``(key, status, parent_fd, name)``: ``key``
        its ``/``-separated path from ``rel``; ``parent_fd`` (open only until the next item) reaches it
        with :func:`open_file`. Links, FIFOs, devices and sockets are skipped, folders deeper than
        :data:`MAX_DEPTH` too; a folder that goes (or turns into a link) while it is scanned is skipped."""
        top = self._open_dir(split(rel))
        stack: list[tuple[int, str, Iterator[os.DirEntry[str]]]] = []
        try:
            stack.append((top, "", iter(sorted(os.scandir(top), key=lambda e: e.name))))
            while stack:
                fd, prefix, entries = stack[-1]
                entry = next(entries, None)
                if entry is None:
                    os.close(fd)
                    stack.pop()
                    continue
                if entry.name.startswith(TEMP_PREFIX):
                    continue
                try:
                    st = entry.stat(follow_symlinks=False)
                except OSError:
                    continue
                if stat.S_ISREG(st.st_mode):
                    yield prefix + entry.name, st, fd, entry.name
                elif stat.S_ISDIR(st.st_mode) and len(stack) <= MAX_DEPTH:
                    try:
                        sub = _step(fd, entry.name, False)
                    except OSError:
                        continue
                    try:
                        listed = iter(sorted(os.scandir(sub), key=lambda e: e.name))
                    except OSError:
                        os.close(sub)
                        continue
                    stack.append((sub, prefix + entry.name + "/", listed))
        finally:
            for fd, _, _ in stack:
                os.close(fd)


def open_file(parent: int, name: str) -> int:
    """A descriptor of the regular file ``name`` in the folder ``parent``; a link is not followed, a
    FIFO or device not waited on (:class:`Refused`), a folder is ``IsADirectoryError``."""
    try:
        fd = os.open(name, _READ, dir_fd=parent)
    except OSError as err:
        if err.errno == errno.ELOOP:
            raise Refused(errno.EACCES, "a link has this name", name) from None
        raise
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):
            raise IsADirectoryError(errno.EISDIR, "a folder has this name", name)
        if not stat.S_ISREG(mode):
            raise Refused(errno.EACCES, f"a {_kind(mode)} has this name", name)
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _step(fd: int, name: str, create: bool) -> int:
    """Open the folder ``name`` in ``fd`` without following it (made first when ``create``)."""
    for attempt in range(2):
        try:
            return os.open(name, _DIR, dir_fd=fd)
        except FileNotFoundError:
            if not create or attempt:
                raise
        except NotADirectoryError:  # O_DIRECTORY | O_NOFOLLOW on a link says ENOTDIR: which is it?
            mode = os.stat(name, dir_fd=fd, follow_symlinks=False).st_mode
            if stat.S_ISREG(mode):
                raise
            raise Refused(errno.EACCES, f"a {_kind(mode)} is on the way", name) from None
        with contextlib.suppress(FileExistsError):  # made meanwhile: opened as any other
            os.mkdir(name, 0o777, dir_fd=fd)
    raise AssertionError("unreachable")


def _clear(top: int) -> None:
    """Remove everything in the folder ``top`` (links unlinked, never followed); iterative."""
    stack: list[tuple[int, str, Iterator[os.DirEntry[str]]]] = [(top, "", iter(list(os.scandir(top))))]
    try:
        while stack:
            fd, name, entries = stack[-1]
            entry = next(entries, None)
            if entry is None:
                stack.pop()
                if stack:
                    os.close(fd)
                    os.rmdir(name, dir_fd=stack[-1][0])
                continue
            if _is_dir(entry):
                sub = _step(fd, entry.name, False)
                try:
                    listed = iter(list(os.scandir(sub)))
                except BaseException:
                    os.close(sub)
                    raise
                stack.append((sub, entry.name, listed))
            else:
                os.unlink(entry.name, dir_fd=fd)
    finally:
        for fd, _, _ in stack[1:]:
            os.close(fd)


def _is_dir(entry: os.DirEntry[str]) -> bool:
    try:
        return entry.is_dir(follow_symlinks=False)
    except OSError:
        return False


def _kind(mode: int) -> str:
    if stat.S_ISLNK(mode):
        return "link"
    if stat.S_ISFIFO(mode):
        return "FIFO"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "device"
    if stat.S_ISSOCK(mode):
        return "socket"
    return "non-regular file"
