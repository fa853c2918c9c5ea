"""Database connection outages: telling one from a failed query, and retrying through it with backoff."""

from __future__ import annotations

import math
import os
import signal
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from trials import protocol
from trials.errors import ConfigError, OutageInterruptedError, StorageUnreachableError
from trials.storage_url import redact, scrub

DEFAULT_GIVE_UP_AFTER_S = 300.0

_DRIVER_MODULES = ("psycopg", "sqlite3", "pymysql", "MySQLdb")


def is_connection_error(err: BaseException) -> bool:
    """Whether ``err`` (or what caused it) says the database connection failed, not the query."""
    from sqlalchemy import exc as sa_exc

    seen = 0
    cur: BaseException | None = err
    while cur is not None and seen < 10:
        if isinstance(cur, (sa_exc.OperationalError, sa_exc.InterfaceError, sa_exc.DisconnectionError)):
            return True
        if isinstance(cur, sa_exc.DBAPIError) and cur.connection_invalidated:
            return True
        if type(cur).__name__ in ("OperationalError", "InterfaceError") and \
                type(cur).__module__.startswith(_DRIVER_MODULES):
            return True
        cur = cur.__cause__ or cur.__context__
        seen += 1
    return False


def root_line(err: BaseException) -> str:
    """The driver's own words (``DBAPIError.orig``), not the wrappers' (Optuna's, SQLAlchemy's)."""
    chain: list[BaseException] = []
    cur: BaseException | None = err
    while cur is not None and len(chain) < 10:
        chain.append(cur)
        cur = cur.__cause__ or cur.__context__
    for e in chain:
        orig = getattr(e, "orig", None)
        if orig is not None and str(orig).strip():
            return str(orig).strip().splitlines()[0].strip()
    for e in reversed(chain):
        text = str(e).strip()
        if len(text) > 3:
            return text.splitlines()[0].strip()
    return type(chain[-1]).__name__


def outage_limit_s(environ: Mapping[str, str] | None = None) -> float:
    """How long one outage may last before a worker gives up: ``TRIALS_OUTAGE_TIMEOUT`` seconds.

    Default 300 (5 minutes); ``inf`` retries for ever (the behaviour before the limit existed).

    Raises:
        ConfigError: the variable is not a number of seconds > 0.
    """
    raw = (os.environ if environ is None else environ).get(protocol.ENV_OUTAGE_TIMEOUT, "").strip()
    if not raw:
        return DEFAULT_GIVE_UP_AFTER_S
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not value > 0:
        raise ConfigError(f"{protocol.ENV_OUTAGE_TIMEOUT}: expected a number of seconds > 0 (or inf), got {raw!r}")
    return value


class Outages:
    """Retries a database call through connection outages, with backoff, saying so once per outage.

    An outage ends the wait with an error when it lasts longer than ``give_up_after_s``
    (:class:`StorageUnreachableError`, exit 2), or at once when :meth:`interrupt` was called (a stop
    signal: :class:`OutageInterruptedError`); a stop signal that came before an outage makes the
    outage end the call at its first failed attempt.

    Args:
        notify: receives one line when an outage starts and one when it ends.
        url: the storage URL, only to scrub its password from what ``notify`` gets.
        first_delay_s, max_delay_s: the backoff (doubling from the first to the max).
        give_up_after_s: how long one outage may last (default: :func:`outage_limit_s`).
        sleep: waits between attempts (default: a wait that :meth:`interrupt` cuts short).
    """

    def __init__(self, notify: Callable[[str], None], *, url: str | None = None,
                 first_delay_s: float = 0.2, max_delay_s: float = 10.0,
                 sleep: Callable[[float], None] | None = None, clock: Callable[[], float] = time.monotonic,
                 give_up_after_s: float | None = None):
        self.notify = notify
        self.url = url
        self.first_delay_s = first_delay_s
        self.max_delay_s = max_delay_s
        self._stop = threading.Event()
        self.sleep = sleep or self._stop.wait
        self.clock = clock
        self.give_up_after_s = give_up_after_s if give_up_after_s is not None else outage_limit_s()
        self.down_since: float | None = None
        self.n_outages = 0
        self.stop_signal: int | None = None
        self._depth = 0

    def interrupt(self, signum: int) -> None:
        """A stop signal arrived (call it from the handler): an outage's wait ends at once, with an error."""
        self.stop_signal = signum
        self._stop.set()

    def _limit_text(self) -> str:
        if math.isinf(self.give_up_after_s):
            return ""
        return f", giving up after {self.give_up_after_s:g}s ({protocol.ENV_OUTAGE_TIMEOUT})"

    def _give_up_if_due(self, err: BaseException) -> None:
        reason = scrub(root_line(err), self.url)
        if self.stop_signal is not None:
            try:
                name = signal.Signals(self.stop_signal).name
            except ValueError:
                name = f"signal {self.stop_signal}"
            self.down_since = None
            raise OutageInterruptedError(
                f"stopped by {name} while the database was unreachable ({reason}); nothing recorded is lost: "
                f"the running trials stay RUNNING and run again when a worker or `trials resume` takes them over"
            ) from err
        assert self.down_since is not None
        down_s = self.clock() - self.down_since
        if down_s >= self.give_up_after_s:
            where = f"the database {redact(self.url)}" if self.url else "the database"
            self.down_since = None
            raise StorageUnreachableError(
                f"{where} has been unreachable for {down_s:.0f}s ({reason}); gave up after "
                f"{protocol.ENV_OUTAGE_TIMEOUT}={self.give_up_after_s:g}s. The running trials stay RUNNING: "
                f"start a worker again (trials worker JOB --storage URL) once the database is back"
            ) from err

    def call(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """``fn(*args, **kwargs)``, called again after each connection error until it answers."""
        if self._depth:  # a retried call made from inside another: the outer one retries
            return fn(*args, **kwargs)
        delay = self.first_delay_s
        while True:
            self._depth += 1
            try:
                result = fn(*args, **kwargs)
            except Exception as err:  # noqa: BLE001 - re-raised unless it is a connection error
                if not is_connection_error(err):
                    raise
                if self.down_since is None:
                    self.down_since = self.clock()
                    self.n_outages += 1
                    self.notify(f"database unreachable ({scrub(root_line(err), self.url)}); "
                                f"retrying with backoff up to {self.max_delay_s:g}s{self._limit_text()}")
                self._give_up_if_due(err)
                left = self.give_up_after_s - (self.clock() - self.down_since)
                self.sleep(max(0.0, min(delay, left)))
                if self.stop_signal is not None:
                    self._give_up_if_due(err)
                delay = min(delay * 2, self.max_delay_s)
                continue
            finally:
                self._depth -= 1
            if self.down_since is not None:
                self.notify(f"database reachable again after {self.clock() - self.down_since:.1f}s")
                self.down_since = None
            return result
