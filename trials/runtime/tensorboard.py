"""Each report as TensorBoard scalars in AIP_TENSORBOARD_LOG_DIR, through tensorboardX when installed."""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from typing import Any

INSTALL_HINT = "pip install 'trials[tensorboard]'"
# tensorboardX imports these for s3:// and gs:// log dirs when they are installed (~220 ms for
# google.cloud.storage, which google-cloud-aiplatform brings). The runtime only ever hands it
# local paths (gs:// is mapped to the /gcs mount first), so they are hidden during its import.
_REMOTE_BACKENDS = ("google.cloud.storage", "boto3")


def import_summary_writer() -> Any:
    """``tensorboardX.SummaryWriter``, imported without its remote-storage backends."""
    hidden = [name for name in _REMOTE_BACKENDS if name not in sys.modules]
    for name in hidden:
        sys.modules[name] = None  # type: ignore[assignment]  # makes `import name` raise ImportError
    try:
        from tensorboardX import SummaryWriter
    finally:
        for name in hidden:
            if name in sys.modules and sys.modules[name] is None:
                del sys.modules[name]
    return SummaryWriter


class ScalarWriter:
    """Writes scalars with tensorboardX, imported on the first write.

    Without tensorboardX (or when the writer fails) it says so once through ``warn`` and then does
    nothing: TensorBoard output never fails a trial.

    Args:
        logdir: the event files' directory.
        warn: called once with a message when scalars cannot be written.
        factory: builds the writer from ``logdir`` (default ``tensorboardX.SummaryWriter``).
    """

    def __init__(self, logdir: str, *, warn: Callable[[str], None] | None = None,
                 factory: Callable[[str], Any] | None = None):
        self.logdir = logdir
        self._warn = warn or (lambda message: None)
        self._factory = factory
        self._writer: Any = None
        self.disabled = False

    def _open(self) -> Any:
        if self._writer is None:
            factory = self._factory
            if factory is None:
                summary_writer = import_summary_writer()
                factory = lambda logdir: summary_writer(logdir=logdir)  # noqa: E731
            self._writer = factory(self.logdir)
        return self._writer

    def add(self, step: int, metrics: Mapping[str, float], timestamp: float | None = None) -> None:
        """Write every metric of one step; flushed so TensorBoard sees it while the trial runs."""
        if self.disabled:
            return
        try:
            writer = self._open()
            for tag, value in metrics.items():
                writer.add_scalar(tag, value, global_step=step, walltime=timestamp)
            writer.flush()
        except ImportError as err:
            self._disable(f"TensorBoard scalars are off: could not import tensorboardX ({err}); "
                          f"{INSTALL_HINT}")
        except Exception as err:  # noqa: BLE001 - TensorBoard output must never fail the trial
            self._disable(f"TensorBoard scalars are off after an error writing to {self.logdir}: "
                          f"{type(err).__name__}: {err}")

    def _disable(self, message: str) -> None:
        self.disabled = True
        self._warn(message)

    def close(self) -> None:
        writer, self._writer = self._writer, None
        if writer is not None:
            try:
                writer.close()
            except Exception as err:  # noqa: BLE001
                self._warn(f"closing the TensorBoard writer failed: {type(err).__name__}: {err}")
