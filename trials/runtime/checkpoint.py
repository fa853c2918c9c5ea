"""Crash-safe checkpoints: atomic write (temp, fsync, rename, fsync dir), keep the last K, skip torn ones.

A checkpoint is one file ``ckpt-<step:08d><suffix>`` in the checkpoint directory; the step lives in
the name, the state is whatever the format's ``save`` writes. numpy and torch are imported only by
their formats' functions, when used.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import IO, Any

from trials import protocol
from trials.errors import CheckpointError

DEFAULT_KEEP = 3
_TMP_MARK = ".tmp-"
_CORRUPT_PREFIX = ".corrupt-"


@dataclass(frozen=True, slots=True, kw_only=True)
class CheckpointFormat:
    """How a state is written to and read from a binary file.

    Example:
        >>> import pickle
        >>> PICKLE = CheckpointFormat(name="pickle", suffix=".pkl", save=pickle.dump, load=pickle.load)
    """

    name: str
    suffix: str
    save: Callable[[Any, IO[bytes]], None]
    load: Callable[[IO[bytes]], Any]

    def __post_init__(self) -> None:
        if not self.suffix.startswith(".") or "/" in self.suffix or _TMP_MARK in self.suffix:
            raise CheckpointError(f"a checkpoint suffix must look like '.json', got {self.suffix!r}")


def _save_json(state: Any, file: IO[bytes]) -> None:
    file.write(json.dumps(state, allow_nan=True, sort_keys=True).encode("utf-8"))


def _load_json(file: IO[bytes]) -> Any:
    return json.loads(file.read().decode("utf-8"))


def _save_npz(state: Any, file: IO[bytes]) -> None:
    import numpy

    if not isinstance(state, dict):
        raise CheckpointError(f"the npz format saves a dict of arrays, got {type(state).__name__}")
    numpy.savez(file, **state)


def _load_npz(file: IO[bytes]) -> Any:
    import numpy

    with numpy.load(file, allow_pickle=False) as archive:
        return {key: archive[key] for key in archive.files}


def _save_torch(state: Any, file: IO[bytes]) -> None:
    import torch

    torch.save(state, file)


def _load_torch(file: IO[bytes]) -> Any:
    import torch

    return torch.load(file, map_location="cpu")


JSON_FORMAT = CheckpointFormat(name="json", suffix=".json", save=_save_json, load=_load_json)
NPZ_FORMAT = CheckpointFormat(name="npz", suffix=".npz", save=_save_npz, load=_load_npz)
TORCH_FORMAT = CheckpointFormat(name="torch", suffix=".pt", save=_save_torch, load=_load_torch)


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
        fmt: the serialization; :data:`JSON_FORMAT` by default.
        warn: called with a message when a checkpoint is unreadable and skipped.

    Example:
        >>> import tempfile
        >>> store = CheckpointStore(tempfile.mkdtemp(), keep=2)
        >>> for step in (1, 2, 3):
        ...     _ = store.save({"w": step}, step)
        >>> store.steps(), store.load_latest()
        ([2, 3], (3, {'w': 3}))
    """

    def __init__(self, directory: str, *, keep: int = DEFAULT_KEEP,
                 fmt: CheckpointFormat = JSON_FORMAT, warn: Callable[[str], None] | None = None):
        if isinstance(keep, bool) or not isinstance(keep, int) or keep < 1:
            raise CheckpointError(f"keep must be an integer >= 1, got {keep!r}")
        self.directory = directory
        self.keep = keep
        self.fmt = fmt
        self._warn = warn or (lambda message: None)

    def path(self, step: int) -> str:
        return os.path.join(self.directory, checkpoint_name(step, self.fmt))

    def steps(self) -> list[int]:
        """Steps of the committed checkpoints, oldest first."""
        try:
            names = os.listdir(self.directory)
        except FileNotFoundError:
            return []
        steps = (parse_checkpoint_name(n, self.fmt) for n in names)
        return sorted(s for s in steps if s is not None)

    def save(self, state: Any, step: int) -> str:
        """Write ``state`` as the checkpoint of ``step`` atomically; prune to the newest ``keep``.

        Returns:
            The checkpoint's path.

        Raises:
            CheckpointError: the state cannot be serialized or the file cannot be written.
        """
        if isinstance(step, bool) or not isinstance(step, int) or step < 0:
            raise CheckpointError(f"a checkpoint step must be an integer >= 0, got {step!r}")
        os.makedirs(self.directory, exist_ok=True)
        final = self.path(step)
        tmp = os.path.join(self.directory,
                           f".{os.path.basename(final)}{_TMP_MARK}{os.getpid()}")
        try:
            with open(tmp, "wb") as file:
                self.fmt.save(state, file)
                file.flush()
                os.fsync(file.fileno())
            os.replace(tmp, final)  # the commit point: readers see the old or the new file, whole
        except BaseException as err:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            if isinstance(err, CheckpointError) or not isinstance(err, Exception):
                raise
            raise CheckpointError(
                f"could not write checkpoint {final} ({self.fmt.name}): {type(err).__name__}: {err}"
            ) from err
        _fsync_dir(self.directory)
        self._prune()
        return final

    def _prune(self) -> None:
        for step in self.steps()[: -self.keep]:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.path(step))
        for name in os.listdir(self.directory):  # temp files of writers that died mid-write
            if name.startswith(".") and _TMP_MARK in name and not name.endswith(f"-{os.getpid()}"):
                with contextlib.suppress(OSError):
                    os.unlink(os.path.join(self.directory, name))

    def load(self, step: int) -> Any:
        """Read the checkpoint of ``step``.

        Raises:
            CheckpointError: it is missing, empty or unreadable.
        """
        path = self.path(step)
        try:
            with open(path, "rb") as file:
                if os.fstat(file.fileno()).st_size == 0:
                    raise CheckpointError(f"checkpoint {path} is empty")
                return self.fmt.load(file)
        except CheckpointError:
            raise
        except Exception as err:  # noqa: BLE001 - any loader failure means "unreadable"
            raise CheckpointError(
                f"could not read checkpoint {path} ({self.fmt.name}): {type(err).__name__}: {err}"
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
