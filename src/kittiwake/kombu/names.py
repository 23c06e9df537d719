"""How kombu's names and numbers become Kittiwake's: queue names, priority pids, broker URLs.

Queue names. kombu allows any string; a Kittiwake queue name allows
`[A-Za-z0-9_.:@/-]` and reads `#` as its group separator. A name made of
those characters (except `:`) passes unchanged, so `celery`,
`<host>.celery.pidbox` and `celeryev.<uuid>` look the same in `kittiwake
stats`; any other character becomes `:` and its UTF-8 bytes in hex
(`a b` → `a:20b`, `:` itself → `:3A`), which keeps the mapping one-to-one.
With the transport option `queue_group`, every queue lives in that
consistency group (`<group>#<name>`), which decides the node it lives on
when brokers share the work.

Priority pids. Kittiwake serves the smallest pid first; kombu's priority is
0..9 (AMQP: larger is served first). A message's pid is its rank (one
digit), then the publisher's clock in microseconds, then a counter and the
message's own delivery tag: FIFO within a priority (across publishers, as
far as their clocks agree), and never equal to another message's pid, so no
publish collapses into another.

URLs. `kittiwake://[user:token@]host[:port][?option=value…]` is `kw://…`,
`kittiwakes://…` is `kws://…` (TLS, `ca=PATH` as for `kws`); every other
query parameter is a transport option (`?lease_secs=5`), so a Celery app
configured only by `CELERY_BROKER_URL` can still set them.
"""

from __future__ import annotations

import itertools
import re
import threading
import time
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from kittiwake.constants import GROUP_SEPARATOR

SCHEME = "kittiwake"
TLS_SCHEME = "kittiwakes"
_KITTIWAKE_SCHEMES = {SCHEME: "kw", TLS_SCHEME: "kws"}
_BROKER_QUERY_KEYS = {"ca"}  # query parameters that belong to the broker URL, not to the transport

_PLAIN = re.compile(r"[A-Za-z0-9_.@/\-]+")  # used with fullmatch; `:` is the escape character
_ESCAPED = re.compile(r":([0-9A-F]{2})")

MIN_PRIORITY = 0
MAX_PRIORITY = 9


def queue_name(name: str, group: str | None = None) -> str:
    """The Kittiwake queue holding kombu queue `name` (in `group`, when one is set)."""
    if not _PLAIN.fullmatch(name):
        name = "".join(
            char if _PLAIN.fullmatch(char) else "".join(f":{byte:02X}" for byte in char.encode("utf-8"))
            for char in name
        )
    return f"{group}{GROUP_SEPARATOR}{name}" if group else name


def kombu_name(queue: str, group: str | None = None) -> str:
    """The kombu queue name of a Kittiwake queue: the inverse of `queue_name`."""
    if group:
        queue = queue[len(group) + len(GROUP_SEPARATOR) :]
    if ":" not in queue:
        return queue
    raw = _ESCAPED.sub(lambda match: "\x00" + match.group(1), queue)
    parts = raw.split("\x00")
    out = bytearray(parts[0].encode("utf-8"))
    for part in parts[1:]:
        out.append(int(part[:2], 16))
        out.extend(part[2:].encode("utf-8"))
    return out.decode("utf-8")


def priority_rank(priority: Any, *, highest_first: bool = True) -> int:
    """The pid's leading digit for a kombu priority: 0 is served first.

    `highest_first` is AMQP's order (9 before 0); without it 0 comes first,
    as kombu's Redis transport serves them. Missing or malformed priorities
    count as 0, as in AMQP."""
    try:
        value = min(max(int(priority), MIN_PRIORITY), MAX_PRIORITY)
    except (TypeError, ValueError):
        value = MIN_PRIORITY
    return MAX_PRIORITY - value if highest_first else value


class PidClock:
    """Pids for published messages: rank, then microseconds, then a counter, then the delivery tag."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._last_us = 0
        self._counter = itertools.count()

    def pid(self, rank: int, delivery_tag: str) -> str:
        with self._lock:
            # never step back within a process, even if the wall clock does
            now_us = max(time.time_ns() // 1000, self._last_us)
            self._last_us = now_us
            sequence = next(self._counter) % 1_000_000
        return f"{rank}{now_us:017d}.{sequence:06d}.{delivery_tag}"


def broker_url(url: str) -> tuple[str, dict[str, str]]:
    """The `kw://` URL of a `kittiwake://` URL, and the transport options its query names."""
    parts = urlsplit(url)
    scheme = _KITTIWAKE_SCHEMES.get(parts.scheme, parts.scheme)
    broker_query: list[tuple[str, str]] = []
    options: dict[str, str] = {}
    for key, value in parse_qsl(parts.query, keep_blank_values=True):
        if key in _BROKER_QUERY_KEYS:
            broker_query.append((key, value))
        else:
            options[key] = value
    # a path is kombu's virtual host, which has no meaning here (use `queue_group` to keep apps apart)
    return urlunsplit((scheme, parts.netloc, "", urlencode(broker_query), "")), options
