"""``--echo``: a thread per replica log that copies each new line to the terminal, escaped and prefixed."""

from __future__ import annotations

import os
import threading
from typing import TextIO

from trials import files
from trials.printable import printable

_ECHO_CHUNK_BYTES = 1 << 16
_ECHO_MAX_LINE_BYTES = 1 << 16  # a longer line (or a flood without newlines) is echoed in pieces
_ECHO_IDLE_S = 0.05
_ECHO_LOCK = threading.Lock()  # one lock for all echo writers so prefixed lines never interleave


class Echo(threading.Thread):
    """Follows a log file from an offset and copies each new line to ``out`` with a prefix, escaped.

    The replica writes straight to the file, so a slow or blocked ``out`` never blocks it.
    """

    def __init__(self, path: str, offset: int, prefix: str, out: TextIO):
        super().__init__(name=f"echo {prefix.strip()} {os.path.basename(path)}", daemon=True)
        self._path, self._offset, self._prefix, self._out = path, offset, prefix, out
        self.finishing = threading.Event()

    def run(self) -> None:
        try:
            with os.fdopen(files.open_regular(self._path, os.O_RDONLY), "rb") as log:
                log.seek(self._offset)
                pending = b""
                while True:
                    finishing = self.finishing.is_set()  # checked before reading: nothing lost
                    chunk = log.read(_ECHO_CHUNK_BYTES)
                    if chunk:
                        pending = self._emit(pending + chunk)
                    elif finishing:
                        break
                    else:
                        self.finishing.wait(_ECHO_IDLE_S)
                if pending:
                    self._write([pending])
        except (OSError, ValueError):
            return  # echo target closed or log removed: the log file still holds everything

    def _emit(self, data: bytes) -> bytes:
        lines = data.split(b"\n")
        pending = lines.pop()
        while len(pending) > _ECHO_MAX_LINE_BYTES:
            lines.append(pending[:_ECHO_MAX_LINE_BYTES])
            pending = pending[_ECHO_MAX_LINE_BYTES:]
        if lines:
            self._write(lines)
        return pending

    def _write(self, lines: list[bytes]) -> None:
        text = "".join(self._prefix + _decode_line(line) + "\n" for line in lines)
        with _ECHO_LOCK:
            self._out.write(text)
            self._out.flush()


def _decode_line(line: bytes) -> str:
    r"""One line of a trainer's output as ``--echo`` shows it: safe on a terminal, tabs kept.

    ESC sequences, BEL, NUL and other control characters are escaped (``\x1b[2J``); invalid UTF-8
    becomes U+FFFD. A carriage return inside the line (a progress bar redrawing itself) shows what
    a terminal would end with: the text after the last one.
    """
    text = line.decode("utf-8", "replace").rstrip("\r")
    if "\r" in text:
        text = next((part for part in reversed(text.split("\r")) if part), "")
    return printable(text, keep="\t")

