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

Two more caps keep one client from taking the whole count, on a broker with
an auth file (without one, anyone may do anything anyway):

* connections of one authenticated user (`per_user`,
  `--max-connections-per-user`): a binary connection moves from its address's
  count to its user's when its `auth` succeeds (`to_user`); beyond the cap the
  `auth` is answered `TOO_MANY_CONNECTIONS` and the connection closed, so a
  user with a right on one queue cannot hold every slot;
* connections from one source address that no user is known for
  (`per_address`, `--max-unauthenticated-per-address`): binary connections
  before their `auth` succeeds, and a connection of an HTTP face (SQS,
  dashboard: their requests carry credentials one by one) until one of its
  requests shows valid ones (`HttpRequest.authenticated`), so whoever can
  reach a port, credentials or not, cannot fill the cap from one address by
  connecting faster than the auth timeout closes what it opened.

A refusal is logged, at most once per `REFUSAL_LOG_SECS`, with the count
refused since the last line, and its reason names the cap that was reached.

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
    """How many connections all ports hold, against one cap, and per address and user against theirs.

    `per_address` and `per_user` of 0 mean no such cap (a broker without an
    auth file). A caller passes the address only when it is to be counted.
    """

    def __init__(self, limit: int, *, per_address: int = 0, per_user: int = 0) -> None:
        if limit < 1:
            raise ValueError("the connection cap must be at least 1")
        if per_address < 0 or per_user < 0:
            raise ValueError("a per-address or per-user cap must be 0 (none) or more")
        self.limit = limit
        self.per_address = per_address
        self.per_user = per_user
        self.held = 0
        self.by_address: dict[str, int] = {}  # connections no user is known for, by source address
        self.by_user: dict[str, int] = {}
        self.refused = 0  # since the start
        self._refused_unlogged = 0
        self._logged_at: float | None = None

    def take(self, now: float, port: str, address: str | None = None) -> str | None:
        """Take a slot for a new connection on `port` from `address`: None when taken, else why not.

        Without `address` (or without a per-address cap) only the process's cap
        counts. A refusal is logged now and then.
        """
        if self.held >= self.limit:
            return self._refuse(now, port, f"the broker holds {self.held} connections, its cap")
        if address is not None and self.per_address:
            count = self.by_address.get(address, 0)
            if count >= self.per_address:
                return self._refuse(
                    now, port, f"{count} connections from {address} are not authenticated, the cap per address",
                )
            self.by_address[address] = count + 1
        self.held += 1
        return None

    def to_user(self, now: float, port: str, address: str | None, user: str) -> str | None:
        """Count a connection taken from `address` as `user`'s: None, else why not (it stays the address's)."""
        if self.per_user:
            count = self.by_user.get(user, 0)
            if count >= self.per_user:
                return self._refuse(now, port, f"user {user!r} holds {count} connections, the cap per user")
        self._drop_address(address)
        self.by_user[user] = self.by_user.get(user, 0) + 1
        return None

    def give_back(self, address: str | None = None, user: str | None = None) -> None:
        """A connection that took a slot is gone: it was counted for `user` if given, else for `address`."""
        if self.held > 0:
            self.held -= 1
        if user is not None:
            count = self.by_user.get(user, 0) - 1
            if count > 0:
                self.by_user[user] = count
            else:
                self.by_user.pop(user, None)
        else:
            self._drop_address(address)

    def _drop_address(self, address: str | None) -> None:
        if address is None or address not in self.by_address:
            return
        count = self.by_address[address] - 1
        if count > 0:
            self.by_address[address] = count
        else:
            del self.by_address[address]

    def _refuse(self, now: float, port: str, reason: str) -> str:
        self.refused += 1
        self._refused_unlogged += 1
        if self._logged_at is None or now - self._logged_at >= REFUSAL_LOG_SECS:
            log.warning(
                "connection refused on the %s port: %s (%d refused since the last report)",
                port, reason, self._refused_unlogged,
            )
            self._logged_at = now
            self._refused_unlogged = 0
        return reason
