"""Database connection outages: telling one from a failed query, and retrying through it with backoff."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from trials.storage_url import scrub

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


class Outages:
    """Retries a database call through connection outages, with backoff, saying so once per outage.

    Args:
        notify: receives one line when an outage starts and one when it ends.
        url: the storage URL, only to scrub its password from what ``notify`` gets.
        first_delay_s, max_delay_s: the backoff (doubling from the first to the max).
    """

    def __init__(self, notify: Callable[[str], None], *, url: str | None = None,
                 first_delay_s: float = 0.2, max_delay_s: float = 10.0,
                 sleep: Callable[[float], None] = time.sleep, clock: Callable[[], float] = time.monotonic):
        self.notify = notify
        self.url = url
        self.first_delay_s = first_delay_s
        self.max_delay_s = max_delay_s
        self.sleep = sleep
        self.clock = clock
        self.down_since: float | None = None
        self.n_outages = 0
        self._depth = 0

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
                                f"retrying with backoff up to {self.max_delay_s:g}s")
                self.sleep(delay)
                delay = min(delay * 2, self.max_delay_s)
                continue
            finally:
                self._depth -= 1
            if self.down_since is not None:
                self.notify(f"database reachable again after {self.clock() - self.down_since:.1f}s")
                self.down_since = None
            return result
