"""Image references checked against the OCI/docker reference grammar before any runtime is asked.

The grammar is distribution/reference's (``reference/regexp.go``, the one podman and docker parse
with): ``[HOST[:PORT]/]PATH[:TAG][@DIGEST]``, lowercase path components of letters and digits joined
by ``.``, ``_``, ``__`` or dashes, a tag of at most 128 word characters, dots and dashes not starting
with either, a digest ``ALGORITHM:HEX`` of at least 32 hex digits, and a name of at most 255
characters. A reference that is not one (``--help``, ``-v=/:/host``, an empty tag, a space) is refused
here, naming where it came from, so that no runtime ever reads it as an option.
"""

from __future__ import annotations

import re

from trials.errors import ConfigError
from trials.printable import printable

NAME_MAX_CHARS = 255  # distribution/reference's NameTotalLengthMax
EXPECTED = ("an image reference [HOST[:PORT]/]NAME[:TAG][@DIGEST] (e.g. us-docker.pkg.dev/my-project/repo/"
            "trainer:1 or localhost/trainer@sha256:<64 hex>; lowercase name components of letters and digits "
            "joined by '.', '_', '__' or '-', as docker and podman parse it)")

_ALNUM = r"[a-z0-9]+"
_SEPARATOR = r"(?:[._]|__|[-]+)"
_PATH_COMPONENT = rf"{_ALNUM}(?:{_SEPARATOR}{_ALNUM})*"
_DOMAIN_COMPONENT = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_HOST = rf"(?:{_DOMAIN_COMPONENT}(?:\.{_DOMAIN_COMPONENT})*|\[[a-fA-F0-9:]+\])"
_NAME = rf"(?:{_HOST}(?::[0-9]+)?/)?{_PATH_COMPONENT}(?:/{_PATH_COMPONENT})*"
_TAG = r"\w[\w.-]{0,127}"
_DIGEST = r"[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}"
_REFERENCE = re.compile(rf"(?P<name>{_NAME})(?::(?P<tag>{_TAG}))?(?:@(?P<digest>{_DIGEST}))?", re.ASCII)


def is_reference(text: str) -> bool:
    """Whether ``text`` is an image reference by the OCI/docker grammar (never an option)."""
    match = _REFERENCE.fullmatch(text)
    return match is not None and len(match.group("name")) <= NAME_MAX_CHARS


def check_reference(text: str, where: str) -> str:
    """``text`` when it is an image reference; else a one-line ConfigError naming ``where`` it came from.

    Example:
        >>> check_reference("us-docker.pkg.dev/p/r/t:1", "--image")
        'us-docker.pkg.dev/p/r/t:1'

    Raises:
        ConfigError: ``text`` is not a reference (an option such as ``--help``, upper case, a stray space).
    """
    if is_reference(text):
        return text
    match = _REFERENCE.fullmatch(text)
    why = f" (its name is {len(match.group('name'))} characters, at most {NAME_MAX_CHARS})" if match else ""
    raise ConfigError(f"{where}: expected {EXPECTED}, got {printable(repr(text), limit=300)}{why}")
