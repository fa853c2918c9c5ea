"""Crash-safe checkpoints: atomic write (temp, fsync, rename, fsync dir), keep the last K, skip torn ones.

A checkpoint is one file ``ckpt-<step:08d><suffix>`` in the checkpoint directory; the step lives in
the name, the suffix names the format (:mod:`trials.runtime.formats`), so a restarted trial reads
back whatever format the previous attempt chose.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from typing import Any

from trials import protocol
from trials.errors import CheckpointError
from trials.runtime.formats import (
    FORMATS,
    FORMATS_HELP,
    JSON_FORMAT,
    NPZ_FORMAT,
    PICKLE_FORMAT,
    TORCH_FORMAT,
    CheckpointFormat,
    choose_format,
    resolve_format,
)

__all__ = ["JSON_FORMAT", "NPZ_FORMAT", "PICKLE_FORMAT", "TORCH_FORMAT", "CheckpointFormat",
           "CheckpointStore", "checkpoint_name", "parse_checkpoint_name", "resolve_format"]

DEFAULT_KEEP = 3
_TMP_MARK = ".tmp-"
_CORRUPT_PREFIX = ".corrupt-"


def checkpoint_name(step: int, fmt: CheckpointFormat = JSON_FORMAT) -> str:
    return f"{protocol.CHECKPOINT_PREFIX}{step:08d}{fmt.suffix}"


def parse_checkpoint_name(name: str, fmt: CheckpointFormat = JSON_FORMAT) -> int | None:
    """The step of a committed checkpoint file name, or None for anything else (temp files too)."""
    prefix = protocol.CHECKPOINT_PREFIX
    if not (name.startswith(prefix) and name.endswith(fmt.suffix)):
        return None
    digits = name[len(prefix): len(name) - len(fmt.suffix)]
    return int(digits) if digits.isdigit() else None


def _fsync_dir(directory: str) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:  # some filesystems (FUSE, Windows) do not open directories
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


class CheckpointStore:
    """The checkpoints of one trial in one directory.

    Args:
        directory: where checkpoints live (created on first save).
        keep: how many of the newest checkpoints to keep (≥ 1).
        fmt: a format name (``"json"``, ``"npz"``, ``"torch"``, ``"pickle"``), a
            :class:`CheckpointFormat`, or ``"auto"``/None (the default): chosen for each state.
        warn: called with a message when a checkpoint is unreadable and skipped.

    Any checkpoint in a built-in format (or ``fmt``) is read back, whichever format wrote it.

    Example:
        >>> import tempfile
        >>> store = CheckpointStore(tempfile.mkdtemp(), keep=2)
        >>> for step in (1, 2, 3):
        ...     _ = store.save({"w": step}, step)
        >>> store.steps(), store.load_latest()
        ([2, 3], (3, {'w': 3}))
    """

    def __init__(self, directory: str, *, keep: int = DEFAULT_KEEP,
                 fmt: CheckpointFormat | str | None = None, warn: Callable[[str], None] | None = None):
        if isinstance(keep, bool) or not isinstance(keep, int) or keep < 1:
            raise CheckpointError(f"keep must be an integer >= 1, got {keep!r}")
        self.directory = directory
        self.keep = keep
        self.fmt = resolve_format(fmt)  # None: chosen per state
        readers = dict(FORMATS)
        if self.fmt is not None:
            readers = {k: v for k, v in readers.items() if v.suffix != self.fmt.suffix}
            readers[self.fmt.name] = self.fmt
        self._readers = sorted(readers.values(), key=lambda f: -len(f.suffix))  # longest suffix first
        self._warn = warn or (lambda message: None)

    def _files(self) -> dict[int, tuple[str, CheckpointFormat]]:
        """step -> (file name, format) of the committed checkpoints."""
        try:
            names = sorted(os.listdir(self.directory))
        except FileNotFoundError:
            return {}
        found: dict[int, tuple[str, CheckpointFormat]] = {}
        for name in names:
            for fmt in self._readers:
                step = parse_checkpoint_name(name, fmt)
                if step is not None:
                    found[step] = (name, fmt)
                    break
        return found

    def path(self, step: int) -> str:
        """The checkpoint file of ``step``: the existing one, else the name this store's format gives."""
        existing = self._files().get(step)
        name = existing[0] if existing else checkpoint_name(step, self.fmt or JSON_FORMAT)
        return os.path.join(self.directory, name)

    def steps(self) -> list[int]:
        """Steps of the committed checkpoints, oldest first."""
        return sorted(self._files())

    def format_for(self, state: Any) -> CheckpointFormat:
        """The format ``save`` would write ``state`` in."""
        return self.fmt if self.fmt is not None else choose_format(state)

    def save(self, state: Any, step: int) -> str:
        """Write ``state`` as the checkpoint of ``step`` atomically; prune to the newest ``keep``.

        Returns:
            The checkpoint's path.

        Raises:
            CheckpointError: the state cannot be serialized or the file cannot be written.
        """
        if isinstance(step, bool) or not isinstance(step, int) or step < 0:
            raise CheckpointError(f"a checkpoint step must be an integer >= 0, got {step!r}")
        fmt = self.format_for(state)
        os.makedirs(self.directory, exist_ok=True)
        previous = self._files().get(step)
        final = os.path.join(self.directory, checkpoint_name(step, fmt))
        tmp = os.path.join(self.directory,
                           f".{os.path.basename(final)}{_TMP_MARK}{os.getpid()}")
        try:
            with open(tmp, "wb") as file:
                fmt.save(state, file)
                file.flush()
                os.fsync(file.fileno())
            os.replace(tmp, final)  # the commit point: readers see the old or the new file, whole
        except BaseException as err:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            if not isinstance(err, Exception):
                raise
            detail = str(err) if isinstance(err, CheckpointError) else f"{type(err).__name__}: {err}"
            raise CheckpointError(
                f"could not write checkpoint {final} ({fmt.name}): {detail}; checkpoint formats: "
                f"{FORMATS_HELP} (checkpoint_format= in trials.main, OPTIONS or trials.tune)"
            ) from err
        if previous is not None and previous[0] != os.path.basename(final):
            with contextlib.suppress(OSError):  # the same step, written before in another format
                os.unlink(os.path.join(self.directory, previous[0]))
        _fsync_dir(self.directory)
        self._prune()
        return final

    def _prune(self) -> None:
        files = self._files()
        for step in sorted(files)[: -self.keep]:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(os.path.join(self.directory, files[step][0]))
        for name in os.listdir(self.directory):  # temp files of writers that died mid-write
            if name.startswith(".") and _TMP_MARK in name and not name.endswith(f"-{os.getpid()}"):
                with contextlib.suppress(OSError):
                    os.unlink(os.path.join(self.directory, name))

    def load(self, step: int) -> Any:
        """Read the checkpoint of ``step`` in the format its file name says.

        Raises:
            CheckpointError: it is missing, empty or unreadable.
        """
        found = self._files().get(step)
        if found is None:
            raise CheckpointError(f"no checkpoint of step {step} in {self.directory}")
        name, fmt = found
        path = os.path.join(self.directory, name)
        try:
            with open(path, "rb") as file:
                if os.fstat(file.fileno()).st_size == 0:
                    raise CheckpointError(f"checkpoint {path} is empty")
                return fmt.load(file)
        except CheckpointError:
            raise
        except Exception as err:  # noqa: BLE001 - any loader failure means "unreadable"
            raise CheckpointError(
                f"could not read checkpoint {path} ({fmt.name}): {type(err).__name__}: {err}"
            ) from err

    def load_latest(self) -> tuple[int, Any] | None:
        """(step, state) of the newest readable checkpoint, or None when there is none.

        An unreadable checkpoint (torn by a crash outside this store, or corrupted) is renamed to
        ``.corrupt-<name>`` so it is never chosen again, and the previous one is tried.
        """
        for step in reversed(self.steps()):
            try:
                return step, self.load(step)
            except CheckpointError as err:
                self._warn(f"skipping unreadable checkpoint at step {step}: {err}")
                self._quarantine(step)
        return None

    def _quarantine(self, step: int) -> None:
        path = self.path(step)
        with contextlib.suppress(OSError):
            os.replace(path, os.path.join(self.directory, _CORRUPT_PREFIX + os.path.basename(path)))
