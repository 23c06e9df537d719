"""`AsyncPool`: the `AsyncChannel` of `kw://` and `kws://`, one pipelined connection remade as needed.

Theory of operation. Every call goes over one `AsyncConnection`, which
matches replies to calls by request id, so any number of calls are in flight
at once and a long-poll never holds up the others. The connection is opened
on first use and opened again when it is found dropped: one caller connects
while the others wait on a lock, following `backoff.connect_attempts` within
`connect_timeout_secs`, then `BrokerUnreachable`. A request that did not leave
(`NotSent`: the connection was already closed) is sent again on a new
connection, at most `MAX_UNSENT_RETRIES` times; one that left and lost its
connection raises `ConnectionLost` (outcome unknown).

Withdrawals. A long-poll abandoned before its reply — timed out here, or its
task cancelled — would stay parked at the broker, which could then lease a
task to a reply nobody reads. The connection carries other calls, so it is
not reset as the blocking pool does; instead a `cancel_wait` request names
the abandoned request id, and the broker answers the long-poll with nothing.

Closing. `close()` wakes every call waiting out a reconnect backoff (each
waits on a future that `close()` resolves, from any task or thread), which
then raises `BrokerUnreachable` at once instead of after the connect timeout.

Loops. A connection belongs to the event loop that opened it; used from
another loop (say, a second `asyncio.run`), the pool opens a new one.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from contextlib import suppress
from typing import TypeVar

from kittiwake import errors
from kittiwake.client import calls
from kittiwake.client.async_connection import AsyncConnection
from kittiwake.client.backoff import connect_attempts
from kittiwake.client.calls import Call
from kittiwake.client.handshake import connect_failure
from kittiwake.client.pool import MAX_UNSENT_RETRIES
from kittiwake.client.url import BrokerAddress
from kittiwake.client.wire import NotSent, encode_call, result_of

T = TypeVar("T")


class AsyncPool:
    """One broker over one pipelined asyncio connection at a time."""

    def __init__(self, address: BrokerAddress, *, connect_timeout_secs: float, max_reply_bytes: int) -> None:
        self._address = address
        self.connect_timeout_secs = connect_timeout_secs
        self.max_reply_bytes = max_reply_bytes
        self._connection: AsyncConnection | None = None
        self._connecting: asyncio.Lock | None = None
        self._connecting_loop: asyncio.AbstractEventLoop | None = None
        self._ids = itertools.count(1)
        self._closed = False
        self._pauses: set[asyncio.Future[None]] = set()  # calls waiting out a backoff; close() ends them

    @property
    def address(self) -> BrokerAddress:
        return self._address

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def in_flight(self) -> int:
        """Requests sent on the current connection and not yet answered."""
        connection = self._connection
        return 0 if connection is None else connection.in_flight

    async def close(self) -> None:
        """Close the connection; calls still waiting raise ConnectionLost, calls waiting to
        connect and later calls BrokerUnreachable."""
        self._closed = True
        for pause in list(self._pauses):
            _resolve(pause)
        connection, self._connection = self._connection, None
        if connection is not None and connection.loop is asyncio.get_running_loop():
            await connection.close()

    async def request(
        self, call: Call[T], timeout_secs: float | None, *, connect_timeout_secs: float | None = None
    ) -> T:
        """Send a call and return its result; see the module docstring for retries and withdrawals. A
        connect it needs spends `connect_timeout_secs` (default: the pool's)."""
        for _ in range(MAX_UNSENT_RETRIES):
            connection = await self._connected(connect_timeout_secs)
            request_id = next(self._ids)
            try:
                future = connection.send(request_id, encode_call(call, request_id))
            except NotSent:
                continue
            try:
                await connection.drain()
                async with asyncio.timeout(timeout_secs):  # not wait_for: on 3.11 it can swallow a cancel
                    reply = await future
            except TimeoutError:
                self._withdraw(connection, call, request_id)
                raise errors.RequestTimeout(
                    f"no reply to {call.op} from {self._address} within {timeout_secs}s; outcome unknown"
                ) from None
            except asyncio.CancelledError:
                if not future.done() or future.cancelled():  # no reply came: the broker may still hold it
                    self._withdraw(connection, call, request_id)
                raise
            finally:
                connection.forget(request_id)
            return result_of(call, reply)
        raise errors.ConnectionLost(
            f"{self._address} dropped {MAX_UNSENT_RETRIES} fresh connections before a request could be sent; "
            "the request was not sent"
        )

    def _withdraw(self, connection: AsyncConnection, call: Call[T], request_id: int) -> None:
        """An abandoned long-poll: ask the broker to answer it with nothing now."""
        if call.wait_secs <= 0:
            return
        cancel_id = next(self._ids)
        with suppress(Exception):
            connection.send(cancel_id, encode_call(calls.cancel_wait(request_id), cancel_id))
            connection.forget(cancel_id)

    # ----------------------------------------------------------- connection

    async def _connected(self, connect_timeout_secs: float | None = None) -> AsyncConnection:
        if self._closed:
            raise errors.BrokerUnreachable("the client is closed")
        loop = asyncio.get_running_loop()
        connection = self._connection
        if connection is not None and connection.loop is loop and not connection.is_dropped():
            return connection
        if self._connecting is None or self._connecting_loop is not loop:
            self._connecting = asyncio.Lock()  # a lock serves one loop only
            self._connecting_loop = loop
        async with self._connecting:
            if self._closed:  # while this call waited for the one connecting
                raise errors.BrokerUnreachable("the client is closed")
            connection = self._connection
            if connection is not None and connection.loop is loop and not connection.is_dropped():
                return connection
            if connection is not None and connection.loop is loop:
                await connection.close()
            self._connection = await self._connect(connect_timeout_secs)
            return self._connection

    async def _connect(self, connect_timeout_secs: float | None = None) -> AsyncConnection:
        started = time.monotonic()
        failure: BaseException | None = None
        attempts = 0
        budget = self.connect_timeout_secs if connect_timeout_secs is None else connect_timeout_secs
        for attempt in connect_attempts(budget, time.monotonic):
            if attempt.pause_secs > 0:
                await self._pause(attempt.pause_secs)
            if self._closed:
                raise self._closed_while_connecting(attempts)
            attempts += 1
            try:
                connection = await AsyncConnection.open(self._address, attempt.timeout_secs, self.max_reply_bytes)
            except (OSError, asyncio.TimeoutError) as exc:
                failure = exc
                continue
            if self._closed:
                await connection.close()
                raise self._closed_while_connecting(attempts)
            return connection
        raise connect_failure(self._address, attempts, time.monotonic() - started, failure)

    async def _pause(self, secs: float) -> None:
        """Wait `secs`, or until close() is called."""
        woken: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._pauses.add(woken)
        try:
            await asyncio.wait([woken], timeout=secs)
        finally:
            self._pauses.discard(woken)

    def _closed_while_connecting(self, attempts: int) -> errors.BrokerUnreachable:
        return errors.BrokerUnreachable(
            f"the client was closed while connecting to {self._address} ({attempts} attempts); "
            "the request was not sent"
        )


def _resolve(woken: asyncio.Future[None]) -> None:
    """Wake a pause from whatever loop or thread close() runs in."""

    def wake() -> None:
        if not woken.done():
            woken.set_result(None)

    loop = woken.get_loop()
    try:
        running: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
    except RuntimeError:
        running = None
    if loop is running:
        wake()
    elif not loop.is_closed():
        loop.call_soon_threadsafe(wake)
