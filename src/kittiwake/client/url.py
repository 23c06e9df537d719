"""Broker addresses: parsing `kw://`, `kws://` and `kwu://` URLs, with optional credentials.

A broker is named by a URL:

    kw://host:port                      plaintext, no credentials
    kw://user:token@host:port           plaintext, authenticated
    kws://user:token@host:port          TLS, the broker's certificate verified
    kws://host:port?ca=/path/ca.pem     TLS, verified against this CA file
    kwu://host:port                     UDP datagrams (`kittiwake broker --udp-port`), blocking Client only
    kw://user:token@h1:p1,h2:p2,h3:p3   a cluster (`kittiwake.cluster`): any of the nodes is enough
                                        to fetch the cluster map; kws:// too, not kwu://

The host may be a name, an IPv4 address or a bracketed IPv6 address
(`kw://[::1]:7370`); the port may be left out (7370 for `kw`, 7371 for
`kws`, 7372 for `kwu`). User and token are percent-decoded (a token with `@`, `:` or `/`
must be percent-encoded; generated tokens never need it). With `kws`, the
certificate is checked against `?ca=PATH`, else the file named by
`$KITTIWAKE_CA`, else the system's trusted CAs, and must name the host.
When no URL is given, `$KITTIWAKE_URL` is used, then `kw://127.0.0.1:7370`.
The scheme picks the client's channel (`kittiwake.client.schemes`).
Anything else — another scheme, a path, another query parameter, a user
without a token, a port outside 1..65535 — is refused with `BadRequest`
saying what is wrong, before any connection is attempted.

The token never appears in `str(address)`, `address.url` or error messages.
Prefer `$KITTIWAKE_URL` to `--url` on a shared machine: a command line is
visible to every local user, the environment is not.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from urllib.parse import parse_qs, quote, unquote, urlsplit

from kittiwake.errors import BadRequest

SCHEME = "kw"
TLS_SCHEME = "kws"
UDP_SCHEME = "kwu"
DEFAULT_PORT = 7370
DEFAULT_TLS_PORT = 7371
DEFAULT_UDP_PORT = 7372
SCHEMES = (SCHEME, TLS_SCHEME, UDP_SCHEME)  # each has its channel (`schemes.CHANNELS`)
DEFAULT_URL = f"{SCHEME}://127.0.0.1:{DEFAULT_PORT}"
URL_ENV = "KITTIWAKE_URL"
CA_ENV = "KITTIWAKE_CA"


@dataclass(frozen=True, slots=True)
class BrokerAddress:
    """Where one broker listens, how to reach it, and who we are to it."""

    host: str
    port: int
    user: str | None = None
    token: str | None = field(default=None, repr=False)
    tls: bool = False
    ca_file: str | None = None  # with tls: the CA to verify the broker's certificate with; None: the system's
    udp: bool = False  # kwu://: requests and replies as datagrams (`kittiwake.client.udp_channel`)
    peers: tuple[tuple[str, int], ...] = ()  # a cluster URL's other nodes (host, port), after host:port

    @property
    def cluster(self) -> bool:
        """Whether the URL names several nodes of a cluster (`kw://a:1,b:2`)."""
        return bool(self.peers)

    @property
    def hosts(self) -> tuple[tuple[str, int], ...]:
        """Every (host, port) the URL names, the first one first."""
        return ((self.host, self.port), *self.peers)

    def at(self, host: str, port: int) -> BrokerAddress:
        """The address of one node at host:port, with this address's scheme and credentials."""
        return replace(self, host=host, port=port, peers=())

    @property
    def scheme(self) -> str:
        """`kw`, `kws` or `kwu`: what picks the channel (`kittiwake.client.schemes`)."""
        return UDP_SCHEME if self.udp else TLS_SCHEME if self.tls else SCHEME

    @property
    def url(self) -> str:
        """The URL without the token (safe to print)."""
        hosts = ",".join(f"[{host}]:{port}" if ":" in host else f"{host}:{port}" for host, port in self.hosts)
        user = f"{quote(self.user, safe='')}@" if self.user is not None else ""
        query = f"?ca={quote(self.ca_file)}" if self.tls and self.ca_file is not None else ""
        return f"{self.scheme}://{user}{hosts}{query}"

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
        raise BadRequest(f"broker URL {_shown(text)!r} must look like {SCHEME}://host:port")
    pieces = _cluster_pieces(text)
    if pieces is not None:
        first, *rest = [_parse_one(piece) for piece in pieces]
        if first.udp:
            raise BadRequest(f"broker URL {_shown(text)!r}: a cluster is reached over {SCHEME}:// or {TLS_SCHEME}://")
        hosts = [first.hosts[0]] + [address.hosts[0] for address in rest]
        if len(set(hosts)) != len(hosts):
            raise BadRequest(f"broker URL {_shown(text)!r} names a node twice")
        return replace(first, peers=tuple(hosts[1:]))
    return _parse_one(text)


def _cluster_pieces(text: str) -> list[str] | None:
    """A cluster URL as one single-host URL per node (credentials and query on each), or None
    when the URL names one host."""
    scheme, sep, rest = text.partition("://")
    end = len(rest)
    for mark in "/?#":
        found = rest.find(mark)
        if found >= 0:
            end = min(end, found)
    authority, tail = rest[:end], rest[end:]
    userinfo, at, hostports = authority.rpartition("@")
    if "," not in hostports:
        return None
    return [f"{scheme}{sep}{userinfo}{at}{hostport}{tail}" for hostport in hostports.split(",")]


def _parse_one(text: str) -> BrokerAddress:
    try:
        parts = urlsplit(text)
        port = parts.port  # raises ValueError for a non-numeric or out-of-range port
    except ValueError as exc:
        raise BadRequest(f"broker URL {_shown(text)!r} is malformed: {exc}") from None
    shown = _shown(text)
    if parts.scheme not in SCHEMES:
        raise BadRequest(
            f"broker URL {shown!r} has scheme {parts.scheme!r}; expected {SCHEME}://, {TLS_SCHEME}:// or {UDP_SCHEME}://"
        )
    tls = parts.scheme == TLS_SCHEME
    udp = parts.scheme == UDP_SCHEME
    if parts.path not in ("", "/") or parts.fragment:
        raise BadRequest(f"broker URL {shown!r} must not have a path or fragment")
    ca_file = _ca_file(parts.query, tls, shown)
    user = unquote(parts.username) if parts.username is not None else None
    token = unquote(parts.password) if parts.password is not None else None
    if (user is None) != (token is None) or user == "" or token == "":
        raise BadRequest(f"broker URL {shown!r}: credentials are user:token, both non-empty")
    host = parts.hostname
    if not host:
        raise BadRequest(f"broker URL {shown!r} has no host")
    if port == 0:
        raise BadRequest(f"broker URL {shown!r} has port 0; expected 1..65535")
    if port is None:
        port = DEFAULT_UDP_PORT if udp else DEFAULT_TLS_PORT if tls else DEFAULT_PORT
    return BrokerAddress(host, port, user=user, token=token, tls=tls, ca_file=ca_file, udp=udp)


def _ca_file(query: str, tls: bool, shown: str) -> str | None:
    if not query:
        return (os.environ.get(CA_ENV) or None) if tls else None
    try:
        fields = parse_qs(query, keep_blank_values=True, strict_parsing=True)
    except ValueError:
        raise BadRequest(f"broker URL {shown!r} has a malformed query") from None
    if set(fields) != {"ca"} or len(fields["ca"]) != 1 or not fields["ca"][0]:
        raise BadRequest(f"broker URL {shown!r}: the only query parameter is ca=PATH")
    if not tls:
        raise BadRequest(f"broker URL {shown!r}: ca= needs {TLS_SCHEME}://")
    return fields["ca"][0]


def _shown(text: str) -> str:
    """A URL as it may appear in a message: the token replaced by `***`."""
    scheme, sep, rest = text.partition("://")
    authority, slash, tail = rest.partition("/")
    userinfo, at, hostport = authority.rpartition("@")
    if not at:
        return text
    user, colon, _ = userinfo.partition(":")
    return f"{scheme}{sep}{user}{':***' if colon else ''}@{hostport}{slash}{tail}"
