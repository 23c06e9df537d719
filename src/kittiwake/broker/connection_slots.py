"""One cap on connections for the whole broker process, whichever port they come in on.

Every connection is a file descriptor. Caps kept per port let the ports
together hold more descriptors than the process may open: idle HTTP
connections then took every descriptor and new binary clients were reset
with nothing logged. `ConnectionSlots` is the one count every port takes a
slot from (the binary and TLS ports, each HTTP face), and `fit_to_open_files`
checks the cap against the open-files limit at start: the cap is lowered to
what the limit allows, less a reserve for the store, the listeners and the
log (`RESERVED_DESCRIPTORS`), with a warning naming both numbers, so the cap
is always reached before the descriptors run out and a refused client gets
an answer (TOO_MANY_CONNECTIONS, or HTTP 503) instead of a reset.

A refusal is logged, at most once per `REFUSAL_LOG_SECS`, with the count
refused since the last line.

Sans-IO: the caller passes the clock to `take`; nothing here reads one.
"""

from __future__ import annotations

import logging

log = logging.getLogger("kittiwake.broker")

RESERVED_DESCRIPTORS = 64  # the store's files, the listening sockets, the log, a child or two
REFUSAL_LOG_SECS = 10.0


def fit_to_open_files(max_connections: int, open_files: int) -> tuple[int, str | None]:
    """The cap to use under an open-files limit, and a warning when it had to be lowered."""
    room = max(1, open_files - RESERVED_DESCRIPTORS)
    if max_connections <= room:
        return max_connections, None
    return room, (
        f"the open-files limit is {open_files}: connections are capped at {room} rather than "
        f"max_connections {max_connections} (raise the limit with ulimit -n to allow more)"
    )


class ConnectionSlots:
    """How many connections all ports hold, against one cap."""

    def __init__(self, limit: int) -> None:
        if limit < 1:
            raise ValueError("the connection cap must be at least 1")
        self.limit = limit
        self.held = 0
        self.refused = 0  # since the start
        self._refused_unlogged = 0
        self._logged_at: float | None = None

    def take(self, now: float, port: str) -> bool:
        """Take a slot for a new connection on `port`; False (and a log line now and then) when full."""
        if self.held < self.limit:
            self.held += 1
            return True
        self.refused += 1
        self._refused_unlogged += 1
        if self._logged_at is None or now - self._logged_at >= REFUSAL_LOG_SECS:
            log.warning(
                "connection refused on the %s port: the broker holds %d connections, its cap "
                "(%d refused since the last report)", port, self.held, self._refused_unlogged,
            )
            self._logged_at = now
            self._refused_unlogged = 0
        return False

    def give_back(self) -> None:
        """A connection that took a slot is gone."""
        if self.held > 0:
            self.held -= 1
