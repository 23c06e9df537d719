"""Which `Host` names the broker's HTTP ports answer to: the guard against DNS rebinding.

A page on another site can make a browser send requests to the broker's
dashboard or SQS port by rebinding its own host name to the broker's address:
the browser then treats the broker as that site (same origin), and without
an auth file the page could read tasks and act on them. What gives it away
is the `Host` header, which carries the attacker's name. So an HTTP port
answers only requests whose `Host` is:

* an IP address literal (a rebinding needs a name, so an address is safe),
* `localhost` (or a name under `.localhost`),
* or a name given with `--http-host-name` (any number of times), the names
  people and tools use to reach the broker (`broker.example.com`).

Anything else gets 421 Misdirected Request, naming the option. The port in
`Host` is not compared (a proxy may change it).
"""

from __future__ import annotations

import ipaddress
from typing import Iterable


def _bare(host: str) -> str:
    """`host` without its port and brackets, lower-cased."""
    host = host.strip().lower()
    if host.startswith("["):  # [v6]:port
        return host[1:].split("]", 1)[0]
    if host.count(":") == 1:
        return host.split(":", 1)[0]
    return host  # a name, v4, or a bare v6 address


def _is_address(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


class HostNames:
    """The host names one broker's HTTP ports answer to."""

    def __init__(self, names: Iterable[str] = ()) -> None:
        self.names = frozenset(_bare(name) for name in names if name.strip())
        for name in self.names:
            if not name or any(ch in name for ch in " /\\@"):
                raise ValueError(f"not a host name: {name!r}")

    def allows(self, header: str | None) -> bool:
        """Whether a request with this `Host` header is for this broker."""
        if header is None or not header.strip():
            return False  # HTTP/1.1 requires it (h11 enforces it too)
        name = _bare(header).rstrip(".")
        return name == "localhost" or name.endswith(".localhost") or _is_address(name) or name in self.names

    def refusal(self, header: str | None) -> str:
        shown = (header or "")[:100]
        return (
            f"this broker does not answer for the host {shown!r}: start it with --http-host-name NAME "
            "to serve a name other than an IP address or localhost"
        )
