"""Text a trainer wrote, made safe to show: the one escaping of control characters for terminals, HTML, JSON."""

from __future__ import annotations


def printable(text: str, *, limit: int | None = None, keep: str = "") -> str:
    r"""``text`` with every unprintable character escaped as Python writes it, on one line.

    A trainer's stderr can hold ESC sequences that clear a terminal or set its title, BEL, NUL,
    bidi overrides (U+202E) or line breaks that forge a line of output: each becomes visible text
    (``\x1b``, ``\x07``, ``\x00``, ``\u202e``, ``\n``). Invalid UTF-8 was already replaced (U+FFFD)
    when the bytes were decoded. ``limit`` bounds the result, ending it with "…" when cut. Characters
    in ``keep`` stay as they are (``--echo`` keeps tabs).

    Example:
        >>> printable("boom\x1b[2J\x07")
        'boom\\x1b[2J\\x07'
    """
    if not text.isprintable():
        text = "".join(ch if ch.isprintable() or ch in keep else repr(ch)[1:-1] for ch in text)
    if limit is not None and len(text) > limit:
        return text[: max(limit - 1, 0)] + "…"
    return text
