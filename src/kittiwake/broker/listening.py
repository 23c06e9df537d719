"""The broker's listening line: the one line it prints on stdout once every port listens.

    kittiwake broker listening on HOST:PORT [tls_port=N] [NAME_port=N ...] [plaintext=off] auth=on|off
    data=DIR|store=URL durability=MODE

(one line). HOST:PORT is the plaintext port, or the TLS port when the plaintext port is off; each
face's port follows as `NAME_port=N`, in the order the faces started. `format_listening_line`
writes it (the broker's `serve` prints it) and `parse_listening_line` reads it back
(`kittiwake.testing.BrokerProcess`, scripts that wait for a broker), so the two cannot drift: for
every `Listening` the broker can describe, parsing its line gives it back.

The store's description is last but one and may hold spaces (a directory's path, a PostgreSQL
URL followed by `schema=NAME`), so the parser takes everything between `auth=...` and the last
` durability=`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

PREFIX = "kittiwake broker listening on "
FACE_NAME = re.compile(r"[A-Za-z0-9_]+")  # a face's name, as its `NAME_port=N` can be read back
TLS = "tls"  # the TLS port's name in the line; no face may take it

_LINE = re.compile(
    re.escape(PREFIX)
    + r"(?P<host>\S*):(?P<port>[0-9]+) "
    r"(?:tls_port=(?P<tls_port>[0-9]+) )?"
    r"(?P<faces>(?:[A-Za-z0-9_]+_port=[0-9]+ )*)"
    r"(?P<plaintext>plaintext=off )?"
    r"auth=(?P<auth>on|off) "
    r"(?P<store>(?:data|store)=.*) durability=(?P<durability>\S+)"
)
_FACE_PORT = re.compile(r"([A-Za-z0-9_]+)_port=([0-9]+) ")


@dataclass(frozen=True, slots=True)
class Listening:
    """What a started broker says in its listening line."""

    host: str  # the address it listens on, as given (0.0.0.0 for every interface)
    port: int  # the plaintext port, or the TLS port when the plaintext port is off
    store: str  # "data=DIR" (SQLite) or "store=URL ..." (as `StoreLocation.describe` names it, no password)
    durability: str  # "fsync" or "os"
    auth: bool = False  # started with an auth file
    plaintext: bool = True  # the plaintext port is open
    tls_port: int | None = None  # with a TLS certificate
    face_ports: dict[str, int] = field(default_factory=dict)  # by face name ("udp", "sqs", "http"), in start order

    @property
    def data_dir(self) -> str | None:
        """The SQLite store's directory; None on another store."""
        return self.store.removeprefix("data=") if self.store.startswith("data=") else None


def format_listening_line(listening: Listening) -> str:
    """The line, without its newline; ValueError for a face name the parser could not read back."""
    for name in listening.face_ports:
        if name == TLS or not FACE_NAME.fullmatch(name):
            raise ValueError(f"a face's name must be letters, digits and _ and not {TLS!r}: {name!r}")
    if not listening.store.startswith(("data=", "store=")):
        raise ValueError(f"the store's description starts with data= or store=: {listening.store!r}")
    ports = f"tls_port={listening.tls_port} " if listening.tls_port is not None else ""
    ports += "".join(f"{name}_port={port} " for name, port in listening.face_ports.items())
    plaintext = "" if listening.plaintext else "plaintext=off "
    auth = "auth=on " if listening.auth else "auth=off "
    return (
        f"{PREFIX}{listening.host}:{listening.port} {ports}{plaintext}{auth}"
        f"{listening.store} durability={listening.durability}"
    )


def parse_listening_line(line: str) -> Listening:
    """The `Listening` a line says (a trailing newline is allowed); ValueError when it is not a listening line."""
    match = _LINE.fullmatch(line.removesuffix("\n"))
    if match is None:
        raise ValueError(f"not a kittiwake broker listening line: {line[:200]!r}")
    tls_port = match.group("tls_port")
    return Listening(
        host=match.group("host"),
        port=int(match.group("port")),
        store=match.group("store"),
        durability=match.group("durability"),
        auth=match.group("auth") == "on",
        plaintext=match.group("plaintext") is None,
        tls_port=int(tls_port) if tls_port is not None else None,
        face_ports={name: int(port) for name, port in _FACE_PORT.findall(match.group("faces"))},
    )
