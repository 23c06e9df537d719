"""Broker addresses: parsing `kw://host:port` URLs.

A broker is named by a URL of the form `kw://host:port`. The host may be a
name, an IPv4 address or a bracketed IPv6 address (`kw://[::1]:7370`); the
port may be left out (7370). When no URL is given, the environment variable
`KITTIWAKE_URL` is used, then `kw://127.0.0.1:7370`. Anything else — another
scheme, a path, a query, credentials, a port outside 1..65535 — is refused with
`BadRequest` saying what is wrong, before any connection is attempted.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from urllib.parse import urlsplit

from kittiwake.errors import BadRequest

SCHEME = "kw"
DEFAULT_PORT = 7370
DEFAULT_URL = f"{SCHEME}://127.0.0.1:{DEFAULT_PORT}"
URL_ENV = "KITTIWAKE_URL"


@dataclass(frozen=True, slots=True)
class BrokerAddress:
    """Where one broker listens for the binary protocol."""

    host: str
    port: int

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{SCHEME}://{host}:{self.port}"

    def __str__(self) -> str:
        return self.url


def resolve_url(url: str | None = None) -> str:
    """The URL to use: the argument, else `$KITTIWAKE_URL`, else the default."""
    if url:
        return url
    return os.environ.get(URL_ENV) or DEFAULT_URL


def parse_url(url: str | BrokerAddress | None = None) -> BrokerAddress:
    """Parse a broker URL (see the module docstring); `None` means the default."""
    if isinstance(url, BrokerAddress):
        return url
    if url is not None and not isinstance(url, str):
        raise BadRequest(f"broker URL must be a string, got {type(url).__name__}")
    text = resolve_url(url).strip()
    if "://" not in text:
        raise BadRequest(f"broker URL {text!r} must look like {SCHEME}://host:port")
    try:
        parts = urlsplit(text)
        port = parts.port  # raises ValueError for a non-numeric or out-of-range port
    except ValueError as exc:
        raise BadRequest(f"broker URL {text!r} is malformed: {exc}") from None
    if parts.scheme != SCHEME:
        raise BadRequest(f"broker URL {text!r} has scheme {parts.scheme!r}; expected {SCHEME}://host:port")
    if parts.username is not None or parts.password is not None:
        raise BadRequest(f"broker URL {text!r} must not carry credentials")
    if parts.path not in ("", "/") or parts.query or parts.fragment:
        raise BadRequest(f"broker URL {text!r} must not have a path, query or fragment")
    host = parts.hostname
    if not host:
        raise BadRequest(f"broker URL {text!r} has no host")
    if port == 0:
        raise BadRequest(f"broker URL {text!r} has port 0; expected 1..65535")
    return BrokerAddress(host, DEFAULT_PORT if port is None else port)
