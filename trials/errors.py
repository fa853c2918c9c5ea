"""The project's error types: one base, each subclass also the builtin it resembles (and the
did-you-mean their messages suggest)."""

from __future__ import annotations

from collections.abc import Iterable


def did_you_mean(word: str, choices: Iterable[str], *, cutoff: float = 0.6) -> str | None:
    """The one of ``choices`` closest to a mistyped ``word`` (``difflib``'s ratio >= ``cutoff``), or None.

    Example:
        >>> did_you_mean("--max-trail-count", ["--max-trial-count", "--seed"])
        '--max-trial-count'
    """
    import difflib

    close = difflib.get_close_matches(word, [c for c in choices if c != word], n=1, cutoff=cutoff)
    return close[0] if close else None


class TrialsError(Exception):
    """Base of every error this project raises on purpose."""

    exit_code = 1


class ConfigError(TrialsError, ValueError):
    """A job spec, search space or option is invalid. Exit code 2."""

    exit_code = 2


class SpecError(ConfigError):
    """A spec file is invalid: the message names file, path, expected and got.

    Args:
        message: what was expected and what was got.
        source: the file (or "<string>") the spec came from.
        path: the location inside the document, e.g. ``studySpec.parameters[2].parameterId``.
    """

    def __init__(self, message: str, *, source: str | None = None, path: str | None = None):
        self.source = source
        self.path = path
        self.detail = message
        where = ": ".join(p for p in (source, path) if p)
        super().__init__(f"{where}: {message}" if where else message)


class FlagError(ConfigError):
    """A command-line flag given to a trial or to the CLI is invalid. Exit code 2."""


class MetricsError(TrialsError, ValueError):
    """A reported metric value is invalid (NaN, inf, not a number)."""


class CheckpointError(TrialsError, OSError):
    """A checkpoint could not be written or read."""


class TuneError(TrialsError, RuntimeError):
    """``trials.tune`` ended without a result: the job failed, or no trial succeeded.

    Attributes:
        result: the finished job (``TuneResult``), with every trial and its reason.
    """

    def __init__(self, message: str, result: object = None):
        super().__init__(message)
        self.result = result


class StorageError(TrialsError, RuntimeError):
    """The job's storage is missing, unreadable or holds something unexpected."""


class JobNotFoundError(StorageError, LookupError):
    """No job with the given id exists under the root or in the storage."""

    exit_code = 2

    @classmethod
    def in_storage(cls, job_id: str, names: Iterable[str]) -> JobNotFoundError:
        """The error for a storage that holds no job ``job_id``, naming the one of ``names`` it was
        likely meant to be."""
        close = did_you_mean(job_id, names)
        return cls(f"no job {job_id!r} in the storage" + (f": did you mean {close}?" if close else ""))


class JobMetaError(StorageError, ValueError):
    """A job's metadata this trials cannot read: written by a newer trials, or a member of the wrong type."""

    exit_code = 2


class DiskFullError(TrialsError, OSError):
    """The disk holding the job filled up (or a file-size limit was hit): the job is paused.

    The job loop stopped every replica; the running trials stay RUNNING in the storage and run
    again on ``trials resume`` once there is space. Exit code 1.
    """


class StorageUnreachableError(TrialsError):
    """The job's database stayed unreachable longer than the outage limit (``TRIALS_OUTAGE_TIMEOUT``).

    The worker gives up: its replicas are stopped, its running trials stay RUNNING in the database
    (another worker or ``trials resume`` runs them again). Exit code 2.
    """

    exit_code = 2


class OutageInterruptedError(TrialsError):
    """SIGTERM, SIGINT or SIGHUP arrived while the job's database was unreachable: the worker stops.

    Nothing recorded is lost; its running trials stay RUNNING. Exit code 130.
    """

    exit_code = 130
