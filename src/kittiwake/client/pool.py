"""A thread-safe pool of blocking connections to one broker, and the request retry rule.

Why a pool: the blocking `Client` is shared by threads, and a long-poll lease
holds its connection until a task arrives or `wait_secs` pass. Giving each
concurrent call its own connection keeps a waiting lease from blocking other
threads' calls; idle connections are kept (up to `max_idle`) so steady traffic
reuses them. A thread that is alone pays for one connection.

Connecting is lazy. A failed connect is retried with capped exponential
backoff (`backoff.connect_attempts`) until `connect_timeout_secs` is spent,
then `BrokerUnreachable`; the pauses wait on an event that `close()` sets, so
a call waiting out a backoff ends at once, with `BrokerUnreachable` (the
request was not sent). A request that never left whole (`NotSent`, or an idle
connection found dropped before use) is retried on a fresh connection; one
that left and lost its connection raises `ConnectionLost` — only the caller
can decide whether to repeat an operation whose outcome is unknown.
"""

from __future__ import annotations

import itertools
import threading
import time
from typing import TypeVar

from kittiwake import errors
from kittiwake.client.backoff import connect_attempts
from kittiwake.client.blocking_connection import BlockingConnection
from kittiwake.client.calls import Call
from kittiwake.client.handshake import connect_failure
from kittiwake.client.url import BrokerAddress
from kittiwake.client.wire import DEFAULT_MAX_REPLY_BYTES, NotSent, encode_call, result_of

T = TypeVar("T")

DEFAULT_MAX_IDLE_CONNECTIONS = 8
# A broker that accepts and at once drops connections must not loop us forever.
MAX_UNSENT_RETRIES = 3


class ConnectionPool:
    """Blocking connections to one broker, lent to one thread at a time: the `Channel` of `kw://` and `kws://`."""

    def __init__(
        self,
        address: BrokerAddress,
        *,
        connect_timeout_secs: float,
        max_idle: int = DEFAULT_MAX_IDLE_CONNECTIONS,
        max_reply_bytes: int = DEFAULT_MAX_REPLY_BYTES,
    ) -> None:
        self.address = address
        self.connect_timeout_secs = connect_timeout_secs
        self.max_idle = max_idle
        self.max_reply_bytes = max_reply_bytes
        self._idle: list[BlockingConnection] = []
        self._lock = threading.Lock()
        self._ids = itertools.count(1)  # next() on a count is atomic in CPython
        self._closed = False
        self._closing = threading.Event()  # set by close(): wakes calls waiting out a reconnect backoff

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        """Close idle connections now and the lent ones when they come back; a call waiting out a
        reconnect backoff ends at once, later calls at once, with BrokerUnreachable."""
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        self._closing.set()
        for connection in idle:
            connection.close()

    def request(self, call: Call[T], timeout_secs: float | None, *, connect_timeout_secs: float | None = None) -> T:
        """Send a call and return its result; see the module docstring for retries. A connect it needs
        spends `connect_timeout_secs` (default: the pool's)."""
        for _ in range(MAX_UNSENT_RETRIES):
            connection = self._take(connect_timeout_secs)
            request_id = next(self._ids)
            try:
                reply = connection.exchange(encode_call(call, request_id), request_id, timeout_secs)
            except NotSent:
                continue
            self._give_back(connection)
            return result_of(call, reply)
        # never sent, so safe to retry: that is BrokerUnreachable, not the
        # outcome-unknown ConnectionLost
        raise errors.BrokerUnreachable(
            f"{self.address} dropped {MAX_UNSENT_RETRIES} fresh connections before a request could be sent; "
            "the request was not sent"
        )

    def open_connection(self) -> BlockingConnection:
        """A new connection of the caller's own, never pooled (retried with backoff as any connect)."""
        with self._lock:
            if self._closed:
                raise errors.BrokerUnreachable("the client is closed")
        return self._connect()

    def _take(self, connect_timeout_secs: float | None = None) -> BlockingConnection:
        while True:
            with self._lock:
                if self._closed:
                    raise errors.BrokerUnreachable("the client is closed")
                connection = self._idle.pop() if self._idle else None
            if connection is None:
                return self._connect(connect_timeout_secs)
            if connection.is_dropped():
                connection.close()
                continue
            return connection

    def _give_back(self, connection: BlockingConnection) -> None:
        with self._lock:
            if not self._closed and not connection.closed and len(self._idle) < self.max_idle:
                self._idle.append(connection)
                return
        connection.close()

    def _connect(self, connect_timeout_secs: float | None = None) -> BlockingConnection:
        started = time.monotonic()
        failure: OSError | None = None
        attempts = 0
        budget = self.connect_timeout_secs if connect_timeout_secs is None else connect_timeout_secs
        for attempt in connect_attempts(budget, time.monotonic):
            # close() sets the event: a call waiting out a backoff ends at once
            if self._closing.wait(attempt.pause_secs) or self._closed:
                raise self._closed_while_connecting(attempts)
            attempts += 1
            try:
                connection = BlockingConnection.open(self.address, attempt.timeout_secs, self.max_reply_bytes)
            except OSError as exc:
                failure = exc
                continue
            if self._closed:
                connection.close()
                raise self._closed_while_connecting(attempts)
            return connection
        raise connect_failure(self.address, attempts, time.monotonic() - started, failure)

    def _closed_while_connecting(self, attempts: int) -> errors.BrokerUnreachable:
        return errors.BrokerUnreachable(
            f"the client was closed while connecting to {self.address} ({attempts} attempts); "
            "the request was not sent"
        )
