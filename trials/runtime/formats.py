"""Checkpoint formats: how a state becomes a file (json, npz, torch, pickle) and which one fits a state.

numpy and torch are imported only by their formats' functions, when used; detecting them looks in
``sys.modules`` only (an object cannot be an array of a library that was never imported).
"""

from __future__ import annotations

import json
import pickle
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import IO, Any

from trials import protocol
from trials.errors import CheckpointError, ConfigError

_TMP_MARK = ".tmp-"
_ONE_ARRAY = "__array__"  # the npz key of a state that is a single array
_MAX_DEPTH = 8  # how deep the detection looks into nested containers


@dataclass(frozen=True, slots=True, kw_only=True)
class CheckpointFormat:
    """How a state is written to and read from a binary file.

    The four built-in formats are chosen by name (``checkpoint_format="pickle"``); build one of these
    only for a serialization of your own.

    Example:
        >>> import marshal
        >>> MARSHAL = CheckpointFormat(name="marshal", suffix=".marshal", save=marshal.dump, load=marshal.load)
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

    arrays = {_ONE_ARRAY: state} if isinstance(state, numpy.ndarray) else state
    if not isinstance(arrays, dict) or not all(isinstance(k, str) for k in arrays):
        raise CheckpointError(f"the npz format saves an array or a dict of arrays with str keys, "
                              f"got {type(state).__name__}")
    for key, value in arrays.items():
        if numpy.asarray(value).dtype.hasobject:
            raise CheckpointError(f"the npz format saves numeric arrays; {key!r} holds Python objects "
                                  f"(use checkpoint_format='pickle')")
    numpy.savez(file, **arrays)


def _load_npz(file: IO[bytes]) -> Any:
    import numpy

    with numpy.load(file, allow_pickle=False) as archive:
        if archive.files == [_ONE_ARRAY]:
            return archive[_ONE_ARRAY]
        return {key: archive[key] for key in archive.files}


def _save_torch(state: Any, file: IO[bytes]) -> None:
    try:
        import torch  # type: ignore[import-not-found, unused-ignore]
    except ImportError:
        raise CheckpointError("the torch format needs PyTorch (pip install torch)") from None
    torch.save(state, file)


def _load_torch(file: IO[bytes]) -> Any:
    import torch

    # the trial's own file: a whole module or optimizer object loads too, not only tensors
    return torch.load(file, map_location="cpu", weights_only=False)


def _save_pickle(state: Any, file: IO[bytes]) -> None:
    pickle.dump(state, file, protocol=pickle.HIGHEST_PROTOCOL)


def _load_pickle(file: IO[bytes]) -> Any:
    return pickle.load(file)  # noqa: S301 - the trial's own checkpoint, written by _save_pickle


_SUFFIX = protocol.CHECKPOINT_FORMATS
JSON_FORMAT = CheckpointFormat(name="json", suffix=_SUFFIX["json"], save=_save_json, load=_load_json)
NPZ_FORMAT = CheckpointFormat(name="npz", suffix=_SUFFIX["npz"], save=_save_npz, load=_load_npz)
TORCH_FORMAT = CheckpointFormat(name="torch", suffix=_SUFFIX["torch"], save=_save_torch, load=_load_torch)
PICKLE_FORMAT = CheckpointFormat(name="pickle", suffix=_SUFFIX["pickle"], save=_save_pickle,
                                 load=_load_pickle)
FORMATS = {f.name: f for f in (JSON_FORMAT, NPZ_FORMAT, TORCH_FORMAT, PICKLE_FORMAT)}
FORMATS_HELP = (f"'{protocol.CHECKPOINT_AUTO}' (the default: chosen by the state), 'json' (dicts, lists, "
                f"str, numbers), 'npz' (a numpy array or a dict of them), 'torch' (PyTorch tensors and "
                f"state dicts), 'pickle' (any picklable object, e.g. a scikit-learn estimator)")


def resolve_format(value: Any) -> CheckpointFormat | None:
    """A format from its name or object; None means "auto" (chosen per state by :func:`choose_format`).

    Raises:
        ConfigError: an unknown name or a non-format object, naming the formats that exist.
    """
    if value is None or value == protocol.CHECKPOINT_AUTO:
        return None
    if isinstance(value, CheckpointFormat):
        return value
    if isinstance(value, str) and value in FORMATS:
        return FORMATS[value]
    raise ConfigError(f"checkpoint_format must be one of {FORMATS_HELP}, or a CheckpointFormat; "
                      f"got {value!r}")


def _module_type(module: str, name: str) -> Any:
    loaded = sys.modules.get(module)
    return getattr(loaded, name, None) if loaded is not None else None


def _is_array(value: Any, ndarray: Any) -> bool:
    return ndarray is not None and isinstance(value, ndarray) and not value.dtype.hasobject


def _has_torch(value: Any, tensor: Any, module: Any, depth: int = 0) -> bool:
    if isinstance(value, tensor) or (module is not None and isinstance(value, module)):
        return True
    if depth >= _MAX_DEPTH:
        return False
    if isinstance(value, dict):
        return any(_has_torch(v, tensor, module, depth + 1) for v in value.values())
    if isinstance(value, (list, tuple)):
        return any(_has_torch(v, tensor, module, depth + 1) for v in value)
    return False


def _is_json(value: Any, depth: int = 0) -> bool:
    """Plain JSON types that come back unchanged (no tuples, no int keys, no numpy scalars)."""
    if value is None or type(value) in (bool, int, float, str):
        return True
    if depth >= _MAX_DEPTH:
        return False
    if type(value) is list:
        return all(_is_json(v, depth + 1) for v in value)
    if type(value) is dict:
        return all(type(k) is str and _is_json(v, depth + 1) for k, v in value.items())
    return False


def choose_format(state: Any) -> CheckpointFormat:
    """The format for ``state``: torch if it holds tensors or modules, npz for an array or a dict of
    arrays, json for plain JSON data, pickle for anything else."""
    tensor = _module_type("torch", "Tensor")
    module = getattr(getattr(sys.modules.get("torch"), "nn", None), "Module", None)
    if tensor is not None and _has_torch(state, tensor, module):
        return TORCH_FORMAT
    ndarray = _module_type("numpy", "ndarray")
    if _is_array(state, ndarray) or (isinstance(state, dict) and state and all(
            type(k) is str and _is_array(v, ndarray) for k, v in state.items())):
        return NPZ_FORMAT
    return JSON_FORMAT if _is_json(state) else PICKLE_FORMAT
