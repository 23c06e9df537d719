"""The seam under both clients: `Channel` (blocking) and `AsyncChannel` (asyncio).

A client turns each method call into a `Call[T]` (`calls.py`) and hands it
to its channel with the time it will wait for the reply; the channel takes
it to a broker and back and returns the decoded `T`, or raises the
`kittiwake.errors` error. Clients know nothing else of the wire: which
channel serves a URL is decided once, by its scheme (`schemes.py`), so a new
way out — a cluster router that sends each call to the broker that owns its
queue — is one more channel, not another pair of clients.

What every channel promises (docs/client.md, "Client behaviour"):

* connecting is lazy, and a connection that fails is made again with backoff
  (`backoff.connect_attempts`) within the connect timeout, then
  `BrokerUnreachable`;
* a request that never left this side is retried; one that left and lost
  its connection raises `ConnectionLost` (the outcome is unknown);
* no reply within `timeout_secs` (None: wait as long as it takes) raises
  `RequestTimeout` (the outcome is unknown);
* a long-poll (`call.wait_secs > 0`) abandoned before its reply — timed out,
  or its task cancelled — is withdrawn at the broker before the call
  returns (the connection is reset, or a `cancel_wait` request names it),
  so no task is leased to a reply nobody reads;
* `close()` makes every later call raise `BrokerUnreachable`, and ends at
  once, with that error, a call waiting out a reconnect backoff: a process
  told to stop while its broker is gone stops now, not after the connect
  timeout.
"""

from __future__ import annotations

from typing import Protocol, TypeVar

from kittiwake.client.calls import Call
from kittiwake.client.url import BrokerAddress

T = TypeVar("T")


class Channel(Protocol):
    """Blocking requests to a broker, safe to share between threads."""

    @property
    def address(self) -> BrokerAddress:
        """Where the channel sends (its URL shows no token)."""
        ...

    @property
    def closed(self) -> bool:
        """Whether `close()` was called."""
        ...

    def request(self, call: Call[T], timeout_secs: float | None) -> T:
        """Send `call` and return its decoded result; see the module docstring for the errors."""
        ...

    def close(self) -> None:
        """Stop: calls waiting to connect end now, later calls raise BrokerUnreachable."""
        ...


class AsyncChannel(Protocol):
    """Asyncio requests to a broker, any number in flight at once."""

    @property
    def address(self) -> BrokerAddress:
        """Where the channel sends (its URL shows no token)."""
        ...

    @property
    def closed(self) -> bool:
        """Whether `close()` was called."""
        ...

    async def request(self, call: Call[T], timeout_secs: float | None) -> T:
        """Send `call` and return its decoded result; cancelling the awaiting task withdraws a long-poll."""
        ...

    async def close(self) -> None:
        """Stop: calls waiting for a reply raise ConnectionLost, calls waiting to connect and later
        calls BrokerUnreachable."""
        ...
