"""PostgreSQL sessions that never hang: server timeouts, TCP keepalives, a client deadline per answer.

A worker frozen (SIGSTOP) inside the claim's transaction holds the job's advisory lock; a silent
partition leaves a connection waiting for an answer that never comes. The server ends a session
idle in a transaction, refuses to wait long for a lock or run a statement long; libpq detects a
dead peer with keepalives and a TCP user timeout; and psycopg2 waits for each answer through a
callback with a deadline, so a frozen connection fails like a refused one (an ``OperationalError``
the outage retry understands) and a new connection is made.
"""

from __future__ import annotations

import functools
import select
import time
from typing import Any

CONNECT_TIMEOUT_S = 10
LOCK_TIMEOUT_S = 5  # waiting for the claim's advisory lock (held for milliseconds by a live worker)
IDLE_IN_TRANSACTION_TIMEOUT_S = 15  # a frozen worker's transaction (and its lock) ends after this
STATEMENT_TIMEOUT_S = 10  # the longest query of a job (all trials of a large study) takes well under 1 s
# No byte from the server for this long: the connection is frozen. Longer than the server's own
# statement timeout, so a slow statement ends with the server's error, not this one.
ANSWER_TIMEOUT_S = 15.0


def connect_args() -> dict[str, Any]:
    """libpq connection parameters: connect timeout, keepalives, server-side session timeouts."""
    options = " ".join(f"-c {name}={seconds * 1000}" for name, seconds in (
        ("lock_timeout", LOCK_TIMEOUT_S), ("statement_timeout", STATEMENT_TIMEOUT_S),
        ("idle_in_transaction_session_timeout", IDLE_IN_TRANSACTION_TIMEOUT_S)))
    return {"connect_timeout": CONNECT_TIMEOUT_S, "keepalives": 1, "keepalives_idle": 5,
            "keepalives_interval": 2, "keepalives_count": 3,
            "tcp_user_timeout": int(ANSWER_TIMEOUT_S * 1000), "options": options}


@functools.cache
def install_answer_deadline() -> bool:
    """Make psycopg2 wait for the server through :func:`_wait` (process-wide); False without psycopg2."""
    try:
        import psycopg2.extensions
    except ImportError:
        return False
    psycopg2.extensions.set_wait_callback(_wait)
    return True


def _wait(conn: Any) -> None:
    """psycopg2's wait callback: poll the connection, but give up after ANSWER_TIMEOUT_S of silence."""
    from psycopg2 import OperationalError
    from psycopg2.extensions import POLL_OK, POLL_READ, POLL_WRITE

    deadline = time.monotonic() + ANSWER_TIMEOUT_S
    while True:
        state = conn.poll()
        if state == POLL_OK:
            return
        left = deadline - time.monotonic()
        if left <= 0:
            raise OperationalError(f"no answer from the database server for {ANSWER_TIMEOUT_S:g}s "
                                   "(connection frozen: a network partition?)")
        fd = conn.fileno()
        if state == POLL_READ:
            ready = select.select([fd], [], [], min(left, 1.0))[0]
        elif state == POLL_WRITE:
            ready = select.select([], [fd], [], min(left, 1.0))[1]
        else:
            raise OperationalError(f"bad state from poll: {state}")
        if ready and state == POLL_READ:
            deadline = time.monotonic() + ANSWER_TIMEOUT_S  # the server sent bytes: it is there
            # (a writable socket says nothing: the kernel takes bytes a frozen peer never reads)
