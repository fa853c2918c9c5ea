"""Storage URLs: which name a journal file, and how to show one without its password."""

from __future__ import annotations

JOURNAL_FILE = "journal.log"  # a job folder's default storage


def is_journal_url(url: str) -> bool:
    """Whether ``url`` names an Optuna journal file (``journal:PATH``, or a ``.log``/``.journal`` path)."""
    return url.startswith("journal:") or url.endswith((".log", ".journal"))


def journal_path(url: str) -> str:
    """The file of a journal URL (``journal:PATH`` or the path itself)."""
    return url[len("journal:"):] if url.startswith("journal:") else url


def redact(url: str) -> str:
    """Hide the password of ``scheme://user:password@host/db``."""
    if "://" in url and "@" in url.split("://", 1)[1]:
        scheme, rest = url.split("://", 1)
        creds, host = rest.rsplit("@", 1)
        user = creds.split(":", 1)[0]
        return f"{scheme}://{user}:***@{host}" if ":" in creds else f"{scheme}://{user}@{host}"
    return url


def scrub(text: str, url: str | None) -> str:
    """``text`` with the password of ``url`` (and the whole URL) replaced by its redacted form."""
    if not url:
        return text
    text = text.replace(url, redact(url))
    if "://" in url and "@" in url.split("://", 1)[1]:
        creds = url.split("://", 1)[1].rsplit("@", 1)[0]
        if ":" in creds:
            password = creds.split(":", 1)[1]
            if password:
                text = text.replace(password, "***")
    return text


def first_line(err: BaseException) -> str:
    """The first line of what ``err`` (or, when it says nothing, what caused it) says."""
    cause = err
    while cause.__cause__ is not None and not str(cause).strip():
        cause = cause.__cause__
    text = str(cause).strip() or str(err.__cause__ or "").strip()
    return text.splitlines()[0] if text else ""
