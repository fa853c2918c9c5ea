"""Who ``trials serve`` answers: its bearer token, and the Host, Origin and Content-Type checks beside it.

A job created through the API runs its command as the server's user, so the token is the boundary
(as Jupyter's is): random by default, printed at start-up and kept in ``ROOT/serve.token`` (mode
0600) for the owner's scripts. Beside it, as defence in depth against web pages (a "simple"
``no-cors`` POST, DNS rebinding): a ``Host`` that is neither the bound address nor a loopback name,
any ``Origin`` and a ``Sec-Fetch-Site`` other than ``none`` are refused (403), and a body that is
not ``application/json`` is refused (415) before anything reads it.
"""

from __future__ import annotations

import contextlib
import hmac
import ipaddress
import os
import re
import secrets
import socket
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from trials.controller.api.errors import ApiError
from trials.errors import ConfigError
from trials.printable import printable
from trials.protocol import ENV_SERVE_TOKEN

TOKEN_FILE = "serve.token"  # under the server's root, mode 0600: the token alone, for scripts and gcloud
_TOKEN = re.compile(r"[A-Za-z0-9._~+/-]+=*")  # RFC 6750's b64token: what an Authorization header carries
_LOOPBACK_NAMES = frozenset({"localhost", "ip6-localhost", "ip6-loopback"})
_WILDCARDS = frozenset({"", "0.0.0.0", "::"})
_BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})
_MISSING = ("Request is missing required authentication credential. Expected OAuth 2 access token, login "
            "cookie or other valid authentication credential: trials serve wants the token it printed, as "
            "'Authorization: Bearer TOKEN' ({where})")
_INVALID = ("Request had invalid authentication credentials. Expected OAuth 2 access token, login cookie or "
            "other valid authentication credential: trials serve wants the token it printed ({where})")


def new_token() -> str:
    """A random token (256 bits, URL-safe), as Jupyter's."""
    return secrets.token_urlsafe(32)


def choose_token(flag: str | None, *, no_auth: bool, environ: Mapping[str, str]) -> tuple[str | None, str]:
    """The server's token and where it came from: ``--token``, then ``$TRIALS_SERVE_TOKEN``, else a
    random one; ``(None, "--no-auth")`` only when turned off on purpose.

    Raises:
        ConfigError: both ``--token`` and ``--no-auth``, or a token that cannot be a bearer token.
    """
    if no_auth:
        if flag is not None:
            raise ConfigError("--no-auth and --token: choose one (--no-auth turns the token off)")
        return None, "--no-auth"
    if flag is not None:
        value, source = flag, "--token"
    elif environ.get(ENV_SERVE_TOKEN):
        value, source = environ[ENV_SERVE_TOKEN], ENV_SERVE_TOKEN
    else:
        return new_token(), "random"
    if not _TOKEN.fullmatch(value):
        bad = next((c for c in value if not re.fullmatch(r"[A-Za-z0-9._~+/=-]", c)), "=")
        raise ConfigError(f"{source}: a token is letters, digits and - . _ ~ + / (then = padding), as a bearer "
                          f"token is written, got a value of {len(value)} characters with {printable(bad)!r}")
    return value, source


def write_token_file(root: str, token: str | None) -> str:
    """Write ``ROOT/serve.token`` (mode 0600, the token alone) by rename, never through a link; with no
    token (``--no-auth``) remove a stale one. Returns its path."""
    path = os.path.join(root, TOKEN_FILE)
    if token is None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
        return path
    tmp = os.path.join(root, f".{TOKEN_FILE}.{os.getpid()}.tmp")
    with contextlib.suppress(FileNotFoundError):
        os.unlink(tmp)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        os.fchmod(fd, 0o600)  # (whatever the umask)
        os.write(fd, token.encode("ascii"))
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)  # a link planted at the name is replaced, not followed
    return path


def allowed_hosts(bind: str) -> frozenset[str]:
    """The ``Host`` names a request may carry besides loopback ones: the bound address, and for a
    wildcard bind (0.0.0.0, ::) this machine's names (any IP literal is then accepted too)."""
    names = {bind.strip("[]").lower()}
    if bind in _WILDCARDS:
        with contextlib.suppress(OSError):
            names.update({socket.gethostname().lower(), socket.getfqdn().lower()})
    return frozenset(n for n in names if n)


def host_name(header: str) -> str:
    """The host part of a ``Host`` header (``name``, ``name:port``, ``[v6]:port``), lower-cased."""
    value = header.strip().lower()
    if value.startswith("["):
        return value[1:].split("]", 1)[0]
    if value.count(":") == 1:
        value = value.split(":", 1)[0]
    return value.rstrip(".")


def is_loopback(name: str) -> bool:
    if name in _LOOPBACK_NAMES or name.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def _is_ip(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


@dataclass(frozen=True, slots=True, kw_only=True)
class Guard:
    """What a request must show before the API reads its body.

    Args:
        token: the bearer token every request carries; None: ``--no-auth``.
        bind: the address the server listens on (its ``Host`` is accepted, and loopback names).
        token_file: where the token is kept, named in a 401's message.
    """

    token: str | None
    bind: str = "127.0.0.1"
    token_file: str = TOKEN_FILE
    hosts: frozenset[str] = frozenset()

    @classmethod
    def for_server(cls, *, token: str | None, bind: str, token_file: str) -> Guard:
        return cls(token=token, bind=bind, token_file=token_file, hosts=allowed_hosts(bind))

    def check(self, method: str, headers: _Headers, *, has_body: bool) -> ApiError | None:
        """The refusal of a request (403, 401, 415, in that order), or None: it may be served."""
        hosts = headers.get_all("Host") or []
        if len(hosts) != 1:
            return ApiError(403, f"a request carries one Host header, got {len(hosts)}")
        name = host_name(hosts[0])
        if not (is_loopback(name) or name in self.hosts or (self.bind in _WILDCARDS and _is_ip(name))):
            return ApiError(403, f"Host {printable(hosts[0])[:100]!r} refused: this server answers requests to "
                                 f"{self.bind} or a loopback name (a foreign Host is a web page's DNS rebinding)")
        origin = headers.get("Origin")
        if origin is not None:
            return ApiError(403, f"a request from a web page (Origin {printable(origin)[:100]!r}) is refused: "
                                 f"trials serve answers programs, not browsers")
        site = (headers.get("Sec-Fetch-Site") or "none").strip().lower()
        if site != "none":
            return ApiError(403, f"a request a web page made (Sec-Fetch-Site: {printable(site)[:40]}) is refused: "
                                 f"trials serve answers programs, not browsers")
        if self.token is not None:
            refused = self._check_token(self.token, headers.get_all("Authorization") or [])
            if refused is not None:
                return refused
        kind = headers.get("Content-Type")
        if method in _BODY_METHODS and (has_body or kind is not None):
            media = (kind or "").split(";", 1)[0].strip().lower()
            if media != "application/json":
                return ApiError(415, f"Content-Type must be application/json, got "
                                     f"{printable(kind)[:100]!r}" if kind else
                                     "Content-Type must be application/json, got none")
        return None

    def _check_token(self, token: str, values: list[str]) -> ApiError | None:
        where = f"it is in {self.token_file}"
        if not values:
            return ApiError(401, _MISSING.format(where=where))
        scheme, _, given = values[0].strip().partition(" ")
        ok = (len(values) == 1 and scheme.lower() == "bearer"
              and hmac.compare_digest(given.strip().encode("utf-8", "replace"), token.encode("ascii")))
        return None if ok else ApiError(401, _INVALID.format(where=where))


class _Headers(Protocol):
    """What :meth:`Guard.check` reads of a request's headers (``http.client.HTTPMessage`` has it)."""

    def get(self, name: str, /) -> str | None: ...

    def get_all(self, name: str, /) -> list[str] | None: ...
