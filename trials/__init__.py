"""trials: write, test and tune a Vertex AI HyperparameterTuningJob trainer, offline.

``import trials`` is light: it loads neither optuna, yaml nor numpy, and changes nothing outside the package
(no import finder, no patched module, no environment variable, no thread). The public names are imported on first
use. What trials' own command processes set up before their imports is ``trials.startup``'s.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:  # pragma: no cover - typing costs ~4 ms of every trial's start-up
    from typing import Any

__version__ = "0.1.0"

_LAZY = {
    "main": ("trials.runtime.entrypoint", "main"),
    "TrialContext": ("trials.runtime.context", "TrialContext"),
    "tune": ("trials.controller.jobs.tune", "tune"),
    "load_spec": ("trials.spec.load", "load_spec"),
    "TrialsError": ("trials.errors", "TrialsError"),
    "ConfigError": ("trials.errors", "ConfigError"),
    "TuneError": ("trials.errors", "TuneError"),
}

__all__ = ["__version__", *_LAZY]


def __getattr__(name: str) -> Any:
    try:
        module_name, attr = _LAZY[name]
    except KeyError:
        raise AttributeError(f"module 'trials' has no attribute {name!r}") from None
    import importlib

    value = getattr(importlib.import_module(module_name), attr)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
