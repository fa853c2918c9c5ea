"""How the runtime treats an objective: the keyword options of ``trials.main``, checked at once.

On the trial's start-up path: no import beyond the vocabulary (checkpoint formats are checked by
name against :data:`trials.protocol.CHECKPOINT_FORMATS`, not by importing them).
"""

from __future__ import annotations

from trials import protocol
from trials.errors import ConfigError

TYPE_CHECKING = False
if TYPE_CHECKING:  # pragma: no cover
    from trials.runtime.formats import CheckpointFormat


class RunOptions:
    """How the runtime treats an objective (the keyword arguments of :func:`trials.main`).

    Args:
        metric: the tag for a bare number returned by the objective (default: the spec's only
            metric, else ``$CLOUD_ML_HP_METRIC_TAG``, else hypertune's default tag).
        keep_checkpoints: how many checkpoints to keep.
        checkpoint_format: ``"auto"`` (the default: json for plain data, npz for numpy arrays, torch
            for tensors and state dicts, pickle for any other object, e.g. a scikit-learn
            estimator), one of those names, or a :class:`trials.runtime.formats.CheckpointFormat`.
        checkpoint_every: write every N-th ``checkpoint`` call's step (the latest is always
            written when the trial stops or ends).
        all_replicas: report metrics and write checkpoints from every replica, not only the primary.
        tensorboard: also write each report as TensorBoard scalars.
        install_signals: handle SIGTERM (only possible in the main thread).
    """

    __slots__ = ("metric", "keep_checkpoints", "checkpoint_format", "checkpoint_every",
                 "all_replicas", "tensorboard", "install_signals")

    def __init__(self, *, metric: str | None = None, keep_checkpoints: int = 3,
                 checkpoint_format: CheckpointFormat | str | None = None, checkpoint_every: int = 1,
                 all_replicas: bool = False, tensorboard: bool = True, install_signals: bool = True):
        if isinstance(checkpoint_every, bool) or not isinstance(checkpoint_every, int) \
                or checkpoint_every < 1:
            raise ConfigError(f"checkpoint_every must be an integer >= 1, got {checkpoint_every!r}")
        _check_format(checkpoint_format)
        self.metric, self.keep_checkpoints = metric, keep_checkpoints
        self.checkpoint_format, self.checkpoint_every = checkpoint_format, checkpoint_every
        self.all_replicas, self.tensorboard = all_replicas, tensorboard
        self.install_signals = install_signals


def _check_format(value: object) -> None:
    """Refuse an unknown checkpoint format now, not at the first checkpoint (no import needed)."""
    names = (protocol.CHECKPOINT_AUTO, *protocol.CHECKPOINT_FORMATS)
    if value is None or value in names or all(hasattr(value, a) for a in ("suffix", "save", "load")):
        return
    raise ConfigError(f"checkpoint_format must be one of {', '.join(map(repr, names))} or a "
                      f"CheckpointFormat (auto: json for plain data, npz for numpy arrays, torch for "
                      f"tensors and state dicts, pickle for any other object); got {value!r}")
